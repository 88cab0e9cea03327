"""``spectrum-rft report``: per-epoch analysis of evaluated spectrum rows.

    spectrum-rft report out/eval/                          # the model table, paired differences, per-scan curves
    spectrum-rft report a/eval b/eval                      # one table across eval folders (a/eval:MODEL, ...)
    spectrum-rft report weak=runs/weak.jsonl control=runs/ctrl.jsonl --png curves.png
    spectrum-rft report --logs-db                          # ~/.eval_protocol/logs.db (latest experiment)
    spectrum-rft report --logs-db --experiment ID1 --experiment ID2
    spectrum-rft report ck1=e1.jsonl ck1=e2.jsonl ck1=e3.jsonl --group-by input   # one point per input

Inputs are EvaluationRow JSON: eval-protocol's experiment JSONL (``--ep-output-dir``), the rows of
``spectrum-rft eval --out DIR`` (a directory: every ``*.jsonl`` under it), or eval-protocol's sqlite store
(``logs.db``: table of ``rollout_id`` + ``data`` JSON, read-only). ``LABEL=PATH`` names a run; inputs with
the same label form one run. Each row's numbers come from ``execution_metadata.extra["spectrum"]`` (the
environment's own metrics) and, where that is absent, from ``evaluation_result.metrics``.

The x-axis (``--group-by``): ``epoch`` (default) = the dataset epoch in the row's
``input_metadata.dataset_info.environment_context["epoch"]`` (``make_spectrum_dataset.py --epochs``, and
``spectrum-rft launch``'s fresh-band datasets); ``input`` = the position of the input within its run (one
eval per checkpoint); ``run-id`` = eval-protocol's ``execution_metadata.run_id`` in order of first row;
``order:K`` = K equal buckets of rows by ``created_at`` (a training-time proxy).

Held-out evaluation rows of a launch (``environment_context["split"] == "heldout"``) beside training rows are
reported apart: per run, by the training epoch in progress when they were scored, mean ± SE over bands of score,
memory_gain, dormant_recall and beyond_current, and treatment vs control on them (docs/LAUNCH.md).

A run whose rollouts all errored, or whose scans were mostly skipped because the model's requests failed
(a dead endpoint), is shown as FAILED, first, with no figure: its numbers would be empty reports' scores.

Exit status: 0 report written, 2 unusable input (every problem listed as FILE:LINE: reason),
1 when a run FAILED, or with ``--fail-on-check`` when an integrity or freshness check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .analysis import build_report
from .load import load_inputs
from .render import format_text, plot_per_scan_png, plot_png
from .validate import ReportError

DEFAULT_DB = os.path.join("~", ".eval_protocol", "logs.db")


def default_png(inputs: list[str]) -> Path:
    """Where the curves go by default: in the first input's folder (a run's own), not the working folder."""
    if not inputs:
        return Path("spectrum_report.png")
    first = Path(inputs[0].split("=", 1)[1] if "=" in inputs[0] and not Path(inputs[0]).exists() else inputs[0])
    return (first if first.is_dir() else first.parent) / "spectrum_report.png"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft report", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("inputs", nargs="*", metavar="[LABEL=]PATH", help="JSONL file, directory of JSONL, or .db")
    ap.add_argument("--logs-db", nargs="?", const=DEFAULT_DB, default=None, metavar="PATH",
                    help=f"read eval-protocol's sqlite store (default path {DEFAULT_DB})")
    ap.add_argument("--experiment", action="append", default=[], metavar="ID",
                    help="experiment id(s) to report from a .db (default: the latest)")
    ap.add_argument("--group-by", default="epoch", help="epoch | input | run-id | order:K (default epoch)")
    ap.add_argument("--control", default=None, metavar="LABEL", help="the control run: every other run is "
                    "compared with it (default, with two runs: the scrambled one, else the second)")
    ap.add_argument("--png", default=None, help="curves PNG path ('' for none; default: spectrum_report.png beside "
                    "the first input, in the run's folder)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--skip-bad", action="store_true", help="skip malformed rows instead of stopping")
    ap.add_argument("--fail-on-check", action="store_true", help="exit 1 when an integrity/freshness check fails")
    a = ap.parse_args(argv)
    if not a.inputs and a.logs_db is None:
        ap.error("give at least one input (JSONL file, directory, .db) or --logs-db")
    try:
        runs, notes = load_inputs(a.inputs, a.logs_db, a.experiment)
        errors = [e for ld in runs.values() for e in ld.errors]
        if errors and not a.skip_bad:
            shown = "\n  ".join(errors[:20])
            more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
            raise ReportError(f"{len(errors)} malformed row(s) (rerun with --skip-bad to skip them):\n  {shown}{more}")
        if not runs:
            raise ReportError("no rows")
        report = build_report(runs, a.group_by, a.control, notes)
    except ReportError as e:
        print(f"spectrum-rft report: {e}", file=sys.stderr)
        return 2
    png = a.png if a.png is not None else str(default_png(a.inputs))
    if png and any(not r["failed"] for r in report["runs"]):  # no figure of runs that are no result
        # per-epoch curves where the rows span epochs; else each run's per-scan curve (dots at one epoch say nothing)
        report["png"] = plot_png(report, png) if report["epoch_analysis"] else plot_per_scan_png(report, png)
    if a.json:
        for name, why in report["failed"].items():
            print(f"spectrum-rft report: run {name}: FAILED: {why}: no result", file=sys.stderr)
        print(json.dumps(report, indent=2, allow_nan=False))
    else:
        print(format_text(report))  # a failed run's line comes first
    return 1 if report["failed"] or (a.fail_on_check and not report["checks_ok"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
