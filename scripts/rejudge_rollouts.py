"""Re-judge a GRPO run's recorded completions against the rows it trained on, whole.

Before the fix of the group sampler's reward (``trl_env.ROW_KEYS``), each completion was judged by an env whose
earlier scans the memoryless policy had played, whatever the run's ``echo_history``: the reward (the scan's
score) was right, but ``echo_copy``, ``echo_kept``, ``echo_kept_beyond`` and ``carry_rate`` compared the report
with an echo the model had not been shown. This replays every recorded completion (its parsed calls, as
``rollouts.jsonl`` holds them) on the run's own rows and writes a corrected copy of the run's record:

    python scripts/rejudge_rollouts.py --out runs/rejudged results/memory-evidence5/weak-*-s*
    spectrum-rft memory-report runs/rejudged/*          # the curves and the training-curve rule, corrected

Each output folder holds the run's ``config.json`` and ``metrics.jsonl`` unchanged and a ``rollouts.jsonl``
whose echo metrics are re-judged (every score is checked to be the recorded one: the rows are the run's).
The run folders are not touched. One line per run says how many records changed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ECHO_METRICS = ("echo_copy", "echo_kept", "echo_kept_beyond", "carry_rate")


def rejudge(run: Path, out: Path) -> tuple[int, int]:
    """Write ``out`` (the run's record with re-judged echo metrics; one the record lacked, such as a metric added
    later, is filled in); return (records, records whose recorded echo metrics changed)."""
    from spectrum_rft.training.spectrum.trl_env import judge
    from spectrum_rft.training.spectrum.trl_run import GrpoConfig, training_rows

    try:
        config = json.loads((run / "config.json").read_text())
        records = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as e:
        raise SystemExit(f"{run}: not a readable `spectrum-rft train` run ({e})") from None
    fields = {f.name for f in dataclasses.fields(GrpoConfig)}
    cfg = GrpoConfig(**{k: v for k, v in config.items() if k in fields})
    rows = {r["row_id"]: r for r in training_rows(cfg, int(config.get("processes") or 1))}
    changed = 0
    for rec in records:
        if rec.get("row_id") not in rows:
            raise SystemExit(f"{run}: row {rec.get('row_id')!r} is none of the rows its config trains on")
        message = {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": {"name": c.get("name"), "arguments": c.get("arguments")}}
                                  for c in rec.get("calls") or []]}
        row = rows[rec["row_id"]]
        if "prefix_reports" in rec:  # echo_history policy: the model's own prefix, as recorded
            row = {**row, "prefix_reports": rec["prefix_reports"]}
        m = judge(row, message).metrics()
        if abs(m["score"] - rec["score"]) > 1e-9:
            raise SystemExit(f"{run}: row {rec['row_id']} scores {m['score']} now, {rec['score']} recorded: "
                             "not the rows this run trained on")
        new = {k: m.get(k) for k in ECHO_METRICS if k in rec or m.get(k) is not None}
        if any(k in rec and rec[k] != v for k, v in new.items()):  # a metric the record had, now different
            changed += 1
        rec.update(new)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "metrics.jsonl"):
        if (run / name).is_file():
            shutil.copyfile(run / name, out / name)
    (out / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return len(records), changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders (config.json + rollouts.jsonl)")
    ap.add_argument("--out", required=True, help="where the corrected records go (one folder per run)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    names = [Path(r).name for r in a.runs]
    if len(set(names)) != len(names):
        print("rejudge: two runs share a folder name; give them from distinct folders one call each", file=sys.stderr)
        return 2
    for r in a.runs:
        n, changed = rejudge(Path(r), out / Path(r).name)
        print(f"{r}: {n} completions re-judged, echo metrics changed in {changed} -> {out / Path(r).name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
