"""``spectrum-rft eval``: the parser, :func:`run_eval` (dataset, local server, the child, rows, summary,
plot) and :func:`report` (table on stdout, what went wrong on stderr, exit status). See the package's
docstring for how a run is made."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Coroutine, Iterator, Sequence, TypeVar

from spectrum_rft.common.redaction import redact_params
from spectrum_rft.tools.entries import ENTRIES, PROJECT_ROOT
from spectrum_rft.tools.evaluation.progress import Progress
from spectrum_rft.tools.evaluation.render import format_fault_summary, format_table, plot_per_scan, skip_warnings
from spectrum_rft.tools.evaluation.plugin import STREAM_FILE
from spectrum_rft.rollouts.dataset import row_identity
from spectrum_rft.tools.evaluation.rows import first_of_each, load_streamed_rows
from spectrum_rft.tools.evaluation.runner import EvalError, Stop, Watchdog, run_models
from spectrum_rft.tools.evaluation.specs import DEFAULT_LADDER, PATH_PARAM_DEFAULTS, ModelSpec, model_specs
from spectrum_rft.tools.evaluation.summary import METRICS, summarize
from spectrum_rft.tools.local_llm import LocalServerError  # stdlib only: cheap


def _parse_param(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--param expects KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    try:
        return k, json.loads(v)
    except ValueError:
        return k, v


MAX_ROWS = 100_000  # bands per model in one run: a dataset that size is written in seconds


def _count(text: str) -> int:
    """A whole number >= 1 (``--rows``, ``--concurrency``, ``--max-calls-per-scan``)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _seconds(text: str) -> float:
    """A finite number of seconds > 0 (``--timeout``)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return v


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (exit 2) instead of the whole usage block first (eval, bench90)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from spectrum_rft.rollouts.dataset import ROW_PRESETS  # noqa: PLC0415
    from spectrum_rft.task.config import MEMORY_MODES, PROMPT_VARIANTS  # noqa: PLC0415

    ap = OneLineParser(
        prog="spectrum-rft eval",
        description="Run the evaluator offline through eval-protocol (the evaluation entries themselves) on "
                    "baseline policies, a local SmolLM2, or any OpenAI-compatible model; print a table, write "
                    "rows, a summary and a per-scan plot.")
    ap.add_argument("--path", choices=tuple(ENTRIES), default="turn",
                    help="turn: in-process processor (default); mcp: McpGym server")
    ap.add_argument("--model", action="append", default=None, metavar="M",
                    help="a baseline (memoryless, accumulate, oracle, empty, carpet-K, random-K, or spectrum/<name>), "
                         "'local' (SmolLM2 via llama.cpp, started for the run), hf:DIR[@ENGINE] (a checkpoint "
                         "directory or smollm2, served for the run by serve-hf with a model engine: transformers, "
                         "vllm, llama.cpp), or any litellm model (openai/<name> "
                         "with --api-base). Repeatable. Default: the ladder " + ", ".join(DEFAULT_LADDER))
    ap.add_argument("--rows", type=_count, default=None,
                    help="dataset rows (bands) per model (>= 1; default 16, or every row of --dataset)")
    ap.add_argument("--dataset", default=None, metavar="FILE",
                    help="run the rows of a JSONL file (from `spectrum-rft dataset`, raw or evaluation-row format) "
                         "instead of generating them; the rows carry their own preset, memory mode, prompt, reward "
                         "and salt")
    ap.add_argument("--preset", default=None,
                    help=f"the band preset: {', '.join(ROW_PRESETS)} (default: default; the 90-scan schedule has a "
                         "command of its own)")
    ap.add_argument("--memory-mode", choices=MEMORY_MODES, default=None,
                    help="default: the prompt's (scaffold for the explicit prompt)")
    ap.add_argument("--prompt", choices=PROMPT_VARIANTS, default=None, help="system prompt variant (default: explicit)")
    ap.add_argument("--reward", default=None, help="the reward (default: default, the audited one)")
    ap.add_argument("--max-calls-per-scan", type=_count, default=None,
                    help="model calls per scan before it is skipped, >= 1 (the environment's default otherwise)")
    ap.add_argument("--concurrency", type=_count, default=16,
                    help="concurrent rollouts (--ep-max-concurrent-rollouts, >= 1)")
    ap.add_argument("--api-base", default=None, help="OpenAI-compatible endpoint for openai/<name> models")
    ap.add_argument("--tool-choice", default=None, help="tool_choice to send (e.g. auto; the local model sets it)")
    ap.add_argument("--param", action="append", type=_parse_param, default=[], metavar="KEY=VALUE",
                    help="extra completion param for non-baseline models (value parsed as JSON if it can be)")
    ap.add_argument("--salt", default=None, help="band salt (rows are reproducible for a given salt; default none)")
    ap.add_argument("--out", default=None, help="results folder (default: runs/eval/<path>-<time>)")
    ap.add_argument("--overwrite", action="store_true", help="replace the run an existing --out folder holds")
    ap.add_argument("--resume", action="store_true",
                    help="go on with the run --out holds (stopped by --timeout, Ctrl-C or a crash): keep its finished "
                         "rows, run only the unfinished ones (the same flags as the first run)")
    ap.add_argument("--timeout", type=_seconds, default=1800.0,
                    help="seconds per model (> 0); the run is stopped after this times the number of models, "
                         "keeping the rows that finished, and exits 1")
    ap.add_argument("--ep-logs", action="store_true",
                    help="keep eval-protocol's local row log (~/.eval_protocol/logs.db, for `ep logs`)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    ap.add_argument("--no-progress", action="store_true")
    return ap


def _row_setting(rows: list[dict], key: str) -> str:
    """A setting of a user's rows (``environment_context[key]``, raw or evaluation-row format): its value when
    every row has the same, else ``"mixed"``."""
    def ctx(r: dict) -> dict:
        info = (r.get("input_metadata") or {}).get("dataset_info") if "input_metadata" in r else None
        c = (info or {}).get("environment_context") if isinstance(info, dict) else r.get("environment_context")
        return c if isinstance(c, dict) else {}

    values = {str(ctx(r).get(key)) for r in rows}
    return values.pop() if len(values) == 1 else "mixed"


def load_user_dataset(path: str) -> list[dict]:
    """``--dataset FILE``: its rows, checked as the entries will check them (:func:`~spectrum_rft.rollouts.
    dataset.dataset_adapter`) before any work. A line that is not JSON is skipped and named on stderr (one line
    each: file and line number); a row over the size limit, a row id given twice, a row that is not a spectrum
    row or a file with no row is :class:`~spectrum_rft.rollouts.dataset.DatasetError` (one line)."""
    from spectrum_rft.rollouts.dataset import DatasetError, dataset_adapter, read_dataset  # noqa: PLC0415

    rows, skipped = read_dataset(path)
    for line in skipped:
        print(f"spectrum-rft eval: {line}", file=sys.stderr)
    if not rows:
        raise DatasetError(f"--dataset {path} holds no row to run")
    dataset_adapter(rows)
    return rows


def write_dataset(path: Path, n: int, *, preset: str, memory_mode: str | None, reward: str, prompt: str,
                  salt: str, max_calls_per_scan: int | None) -> Path:
    from spectrum_rft.rollouts.dataset import make_rows, write_jsonl  # noqa: PLC0415

    rows = make_rows(n, prompt=prompt, memory_mode=memory_mode, preset=preset, reward=reward, salt=salt,
                     prefix="eval")
    if max_calls_per_scan is not None:
        for r in rows:
            r["environment_context"]["max_calls_per_scan"] = max_calls_per_scan
    return write_jsonl(rows, path)


def kept_rows(out: Path, dataset: Path, specs: list[ModelSpec]) -> list[list[dict]]:
    """For ``--resume``: the finished rows the run in ``out`` kept, for each of ``specs`` (a model the run did
    not have: none; ``local`` matches the label it was given, ``local (<model>)``): the rows of a run that ended
    (``rows.jsonl`` with its ``summary.json``) and those in the row stream of a run that was killed before it
    could write them (:data:`STREAM_FILE`). ``dataset`` is this run's dataset, built beside the kept one: they
    must be identical (same rows, preset, salt, ...), else :class:`EvalError` says so."""
    kept_dataset, rows_file, summary_file = out / "dataset.jsonl", out / "rows.jsonl", out / "summary.json"
    stream = out / STREAM_FILE
    if not (kept_dataset.is_file() and (rows_file.is_file() or stream.is_file())):
        raise EvalError(f"--resume: {out} holds no run to go on with (dataset.jsonl with rows.jsonl or {STREAM_FILE})")
    if kept_dataset.read_bytes() != dataset.read_bytes():
        raise EvalError(f"--resume: the run in {out} has other rows (its dataset.jsonl differs): give the flags of "
                        "the first run (--rows, --preset, --memory-mode, --prompt, --reward, --salt, "
                        "--max-calls-per-scan), or another --out")
    pairs: list[tuple[str, dict]] = []
    if rows_file.is_file() and summary_file.is_file():  # a run that ended (else: killed before its summary)
        try:
            summary = json.loads(summary_file.read_text())
            lines = [json.loads(x) for x in rows_file.read_text().splitlines() if x.strip()]
            counts = [(label, int(m["rows"])) for label, m in summary["models"].items()]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise EvalError(f"--resume: cannot read the run in {out}: {e}") from e
        if sum(n for _, n in counts) != len(lines):
            raise EvalError(f"--resume: {rows_file} does not hold the rows its summary.json counts")
        i = 0
        for label, n in counts:  # rows.jsonl holds each model's rows in turn (write_model_rows)
            pairs += [(label, r) for r in lines[i:i + n]]
            i += n
    pairs += load_streamed_rows(stream)
    labels = {label for label, _ in pairs}

    def kept_label(spec: ModelSpec) -> str:
        started = sorted(k for k in labels if k.startswith(f"{spec.label} (")) if spec.label == "local" else []
        return spec.label if spec.label in labels or not started else started[0]

    wanted = {kept_label(spec): spec for spec in specs}
    by_label = first_of_each(wanted, pairs)
    return [by_label[kept_label(spec)] for spec in specs]


def in_the_whole_dataset(row: dict, order: dict[Any, int]) -> dict:
    """A row a resume ran, placed in the run's whole dataset as an uninterrupted run would have it: eval-protocol's
    loader records the row's index and the row count of the dataset it loaded (``dataset_info["data_loader_*"]``),
    and a resume loads only the unfinished rows."""
    info = (row.get("input_metadata") or {}).get("dataset_info")
    if isinstance(info, dict) and "data_loader_row_idx" in info and row_identity(row) in order:
        info["data_loader_row_idx"] = order[row_identity(row)]
        for k in ("data_loader_num_rows", "data_loader_num_rows_after_preprocessing"):
            if k in info:
                info[k] = len(order)
    return row


def start_local_models(specs: list[ModelSpec], stack: ExitStack, bar: Progress) -> list[Watchdog]:
    """Start the server of every local model on ``stack`` (stopped with it): llama.cpp's for ``local``, ``serve-hf``
    for ``hf:DIR@ENGINE``; fill in the spec's params (and ``local``'s label); return the servers' failure
    watchdogs."""
    dogs: list[Watchdog] = []
    for i, spec in enumerate(specs):
        if spec.local:
            from spectrum_rft.tools.local_llm import hf_server, local_server  # noqa: PLC0415

            if spec.served:
                bar.model(i, f"{spec.label}: starting serve-hf")
                server = stack.enter_context(hf_server(*spec.served))
                spec.params = {**server.params, **spec.params}
                dogs.append(server.failure)
                continue
            bar.model(i, "local: starting llama.cpp")
            server = stack.enter_context(local_server())
            params = dict(server.params)  # a LocalServer (its params and a supervisor)
            failure = getattr(server, "failure", None)
            if callable(failure):
                dogs.append(failure)
            spec.params = {**params, **spec.params}
            spec.label = f"local ({params['model'].split('/', 1)[1]})"
    return dogs


def write_model_rows(specs: list[ModelSpec], run: Any, ids: list[str], rows: int,
                     path: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Write every model's finished rows to ``path``; (per-model summaries with the unfinished rows, the
    models the stopped run cut off)."""
    models: dict[str, dict[str, Any]] = {}
    cut_off: list[str] = []
    part = path.with_name(path.name + ".tmp")
    with part.open("w") as f:
        for spec in specs:
            mine = run.by_model[spec.label]
            for r in mine:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
            s = summarize(mine)
            s["privileged"] = spec.privileged
            s["completion_params"] = redact_params(spec.params)
            done = {(r.get("input_metadata") or {}).get("row_id") for r in mine}
            s["rows_unfinished"] = max(0, rows - len(mine))
            s["unfinished_row_ids"] = [i for i in ids if i not in done] if s["rows_unfinished"] else []
            if run.stopped and s["rows_unfinished"]:
                s["stopped"] = run.stopped
                if run.stopped == "aborted":
                    s["aborted"] = run.message
                cut_off.append(spec.label)
            models[spec.label] = s
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)
    return models, cut_off


def write_atomic(path: Path, text: str) -> None:
    """``text`` as the whole of ``path``, or ``path`` unchanged: written beside it, fsynced, then renamed over it."""
    part = path.with_name(path.name + ".tmp")
    with part.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)


def scans_to_play(dataset: Path) -> int:
    """The scans one model plays on the rows of ``dataset`` (each row's own preset); 0 when a row does not
    say (the progress bar then counts rows only)."""
    from spectrum_rft.rollouts.dataset import to_evaluation_row_dict  # noqa: PLC0415
    from spectrum_rft.task.presets import get_preset  # noqa: PLC0415
    from spectrum_rft.task.rows import row_episode  # noqa: PLC0415

    total = 0
    try:
        for line in dataset.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                meta = (row if "input_metadata" in row else to_evaluation_row_dict(row))["input_metadata"]
                total += get_preset(row_episode(meta["row_id"], meta.get("dataset_info"))[0].preset).n_scans
    except Exception:  # noqa: BLE001  (a display figure: the run itself reports a bad row)
        return 0
    return total


def _checked_settings(preset: str, memory_mode: str | None, reward: str, prompt: str,
                      max_calls_per_scan: int | None) -> tuple[str, str, str]:
    """The run's preset, memory mode and reward, checked before any work and named by their versions (``default``
    -> ``default-v2`` / ``match_iou``), as the rows record them."""
    from spectrum_rft.rollouts.dataset import check_row_preset  # noqa: PLC0415
    from spectrum_rft.task.config import EnvConfig, default_memory_mode  # noqa: PLC0415

    memory_mode = memory_mode or default_memory_mode(prompt)
    check_row_preset(preset)
    calls = EnvConfig.max_calls_per_scan if max_calls_per_scan is None else max_calls_per_scan  # None: the default
    cfg = EnvConfig(preset=preset, memory_mode=memory_mode, reward=reward, prompt=prompt, max_calls_per_scan=calls)
    return cfg.preset, memory_mode, cfg.reward


def _rows_to_resume(out: Path, dataset: Path, specs: list[ModelSpec], all_ids: list, rows: int) -> tuple[list, Path, int]:
    """``--resume``: the finished rows kept per model, the dataset of the rows some model has not finished, and
    their count; an error when none is left."""
    try:
        kept = kept_rows(out, dataset, specs)
    finally:
        dataset.unlink(missing_ok=True)
    done = [{row_identity(r) for r in rs} for rs in kept]
    todo = [i for i in all_ids if any(i not in d for d in done)]
    lines = [x for x in (out / "dataset.jsonl").read_text().splitlines() if x.strip()]
    dataset = out / "dataset.resume.jsonl"
    wanted = set(todo)
    dataset.write_text("".join(x + "\n" for x in lines if row_identity(json.loads(x)) in wanted))
    if not todo:
        raise EvalError(f"--resume: every row of the run in {out} is finished; nothing to resume")
    print(f"resume: {sum(len(v) for v in kept)} finished rows kept, {len(todo)} of {rows} rows to run",
          file=sys.stderr, flush=True)
    return kept, dataset, len(todo)


def _merge_kept(by_model: dict[str, list[dict]], specs: list[ModelSpec], kept: list[list[dict]], all_ids: list) -> None:
    """``--resume``: each model's kept rows and this run's, in dataset order (a row it had finished: the kept one)."""
    order = {i: k for k, i in enumerate(all_ids)}
    for spec, mine in zip(specs, kept):
        have = {row_identity(r) for r in mine}
        new = [in_the_whole_dataset(r, order) for r in by_model.get(spec.label, []) if row_identity(r) not in have]
        by_model[spec.label] = sorted(mine + new, key=lambda r: order.get(row_identity(r), len(order)))


def _plot(models: dict, displays: dict, out: Path, title: str) -> str | None:
    """Each model's per-scan curve (+- 1 SE over rows) in ``out/per_scan_reward.png``; None when no row scored."""
    curves = {displays[k]: v["per_scan_reward"] for k, v in models.items() if v.get("per_scan_reward")}
    if not curves:
        return None
    bands = {displays[k]: v.get("per_scan_reward_se") for k, v in models.items() if v.get("per_scan_reward")}
    return str(plot_per_scan(curves, out / "per_scan_reward.png", title, bands))


def run_eval(specs: list[ModelSpec], *, path: str, rows: int, out: Path, preset: str = "default",
             memory_mode: str | None = None, reward: str = "default", prompt: str = "explicit", salt: str = "",
             max_calls_per_scan: int | None = None, concurrency: int = 16, timeout: float = 1800.0,
             keep_ep_logs: bool = False, progress: bool = True,
             watchdogs: Sequence[Watchdog] = (), resume: bool = False,
             dataset_rows: list[dict] | None = None) -> dict[str, Any]:
    """Run every model through the ``path`` entry; write rows, summary and plot under ``out``; return the
    summary (``models[label]``: the table's metrics, the per-scan curve, row and error counts, error
    causes, fault totals, skipped scans).

    ``timeout`` is per model (the run gets ``timeout`` x models). ``watchdogs``: callables polled about
    every 0.5 s while the rollouts run; the first message one returns stops the run. A run stopped by
    the timeout, Ctrl-C or a watchdog still writes every row that finished; the summary says
    ``stopped`` (``"timeout"``, ``"interrupted"``, ``"aborted"``), ``aborted`` (the watchdog's message),
    ``cut_off`` (the models with unfinished rows) and, per model, ``rows_unfinished`` and
    ``unfinished_row_ids``. A local model server started here is watched too (it exiting aborts the run)."""
    from spectrum_rft.rollouts.dataset import write_jsonl  # noqa: PLC0415

    started = time.monotonic()  # the timeout counts from here: building the dataset is part of the run
    if dataset_rows is not None:  # a user's rows: they carry their settings (the summary names them, or "mixed")
        dataset_rows = dataset_rows[:rows]
        preset, memory_mode, reward, prompt = (_row_setting(dataset_rows, k) for k in
                                               ("preset", "memory_mode", "reward", "prompt"))
    else:
        preset, memory_mode, reward = _checked_settings(preset, memory_mode, reward, prompt, max_calls_per_scan)
    if rows < 1 or concurrency < 1 or not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError("rows and concurrency must be >= 1 and timeout a finite number of seconds > 0")
    if rows > MAX_ROWS:
        raise ValueError(f"--rows {rows} is more than {MAX_ROWS} bands per model; run it in parts (--salt, --out)")
    out.mkdir(parents=True, exist_ok=True)
    stream = out / STREAM_FILE  # every scored row, appended as it is scored: what a killed run leaves
    if not resume:  # a run --overwrite replaces: nothing of it may be taken for this run's
        for name in (STREAM_FILE, "rows.jsonl", "summary.json"):
            (out / name).unlink(missing_ok=True)
    dataset_path = out / ("dataset.jsonl.resume" if resume else "dataset.jsonl")
    if dataset_rows is not None:
        dataset = write_jsonl(dataset_rows, dataset_path)
        rows = len(dataset_rows)
    else:
        dataset = write_dataset(dataset_path, rows, preset=preset, memory_mode=memory_mode, reward=reward,
                                prompt=prompt, salt=salt, max_calls_per_scan=max_calls_per_scan)
    all_ids = [row_identity(json.loads(line)) for line in dataset.read_text().splitlines() if line.strip()]
    kept: list[list[dict]] = []
    n_run = len(all_ids)
    if resume:  # run only the rows some model has not finished; keep the rest
        kept, dataset, n_run = _rows_to_resume(out, dataset, specs, all_ids, rows)
    bar = Progress(len(specs), n_run, path, enabled=progress, scans=scans_to_play(dataset))
    dogs = list(watchdogs)
    with ExitStack() as stack:
        dogs += start_local_models(specs, stack, bar)
        for spec in specs:  # what the entry's own default completion params carry for this path
            spec.params = {**PATH_PARAM_DEFAULTS.get(path, {}), **spec.params}
        bar.model(0, specs[0].label)
        try:
            run = run_models(path, specs, dataset, n_run, concurrency=concurrency, log_path=out / "pytest.log",
                             stream=stream, timeout=max(1.0, timeout * len(specs) - (time.monotonic() - started)),
                             keep_ep_logs=keep_ep_logs, progress=bar, watchdogs=dogs)
        finally:
            bar.finish()
    wall = round(time.monotonic() - started, 2)
    if resume:
        _merge_kept(run.by_model, specs, kept, all_ids)
        dataset.unlink(missing_ok=True)
    models, cut_off = write_model_rows(specs, run, all_ids, rows, out / "rows.jsonl")
    displays = {s.label: s.display for s in specs}
    plot = None if run.stopped == "interrupted" else _plot(  # after Ctrl-C: no (blank) figure
        models, displays, out, f"{path} path, preset {preset}, memory {memory_mode}, reward {reward}, {rows} rows "
                               "(band: +- 1 SE over rows)")
    summary = {
        "rows": rows, "path": path, "preset": preset, "memory_mode": memory_mode, "reward": reward, "prompt": prompt,
        "models": models, "plot": plot, "out": str(out), "log": str(out / "pytest.log"), "wall_s": wall,
        "displays": displays, "missing": [k for k, v in models.items() if v["rows"] < rows],
        "stopped": run.stopped, "aborted": run.message if run.stopped == "aborted" else None, "cut_off": cut_off,
        "signal": run.message if run.stopped == "interrupted" else None,
        "timeout_s": timeout, "run_s": run.elapsed_s,
        "resumed": {"kept_rows": sum(len(v) for v in kept), "ran_rows": n_run} if resume else None,
    }
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    stream.unlink(missing_ok=True)  # its rows are in rows.jsonl, which summary.json now counts
    return summary


def _first_line(text: Any, n: int = 400) -> str:
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
    return line if len(line) <= n else line[: n - 3] + "..."


def report(summary: dict[str, Any], *, as_json: bool = False) -> int:
    """Print what went wrong on stderr first, then a run's results (the table and the fault summary, or JSON)
    on stdout; return the exit status: 0, 1 (a model failed: it errored on every row, skipped every scan, had
    most scans skipped because its requests failed, or came back incomplete; the run was stopped by the
    timeout or a watchdog), 130 (Ctrl-C: one line, no table), 143 or 129 (SIGTERM or SIGHUP: the same line,
    naming the signal). A failed model's row of the table says FAILED, with no figure."""
    models, displays = summary["models"], summary["displays"]
    out, log = summary["out"], summary.get("log") or str(Path(summary["out"]) / "pytest.log")
    stopped = summary.get("stopped")
    if stopped == "interrupted":
        kept = sum(v["rows"] for v in models.values())
        sig = summary.get("signal")
        how = f"stopped by {sig}" if sig else "interrupted"
        print(f"spectrum-rft eval: {how}: the run was stopped; {kept} of {summary['rows'] * len(models)} rows "
              f"had finished and are kept in {out} (rows.jsonl, summary.json); the same command with --resume "
              "runs the rest", file=sys.stderr)
        return 128 + int(getattr(signal.Signals, sig)) if sig in STOP_SIGNALS else 130
    lines: list[str] = []
    failed = set(summary.get("missing") or ())
    for name, v in models.items():
        disp = displays.get(name, name)
        n, k = v["rows"], v["rows_errored"]
        if k and k == n:
            lines.append(f"spectrum-rft eval: {disp}: every rollout errored ({k}/{n}), cause: "
                         f"{v['error_cause']}: {_first_line(v['first_error'])} (log: {log})")
            failed.add(name)
        elif v.get("scans_total") and v["scans_skipped_total"] == v["scans_total"]:
            why = f"model requests failed: {v['llm_failure_cause']}" if v.get("llm_failure_cause") else \
                "no valid report within the call budget"
            lines.append(f"spectrum-rft eval: {disp}: every scan of every row was skipped "
                         f"({v['scans_skipped_total']}/{v['scans_total']}; {why}): nothing the model did was scored "
                         f"(log: {log})")
            failed.add(name)
        elif v.get("failed"):  # most scans skipped because its requests failed
            first = f": {_first_line(v['first_error'])}" if v.get("first_error") else ""
            lines.append(f"spectrum-rft eval: {disp}: {v['failed']}{first}: no result, its figures would be "
                         f"empty reports' (log: {log})")
            failed.add(name)
        if k and k != n:
            lines.append(f"spectrum-rft eval: {disp}: {k}/{n} rollouts errored (scored 0), mostly "
                         f"{v['error_cause']}: {_first_line(v['first_error'])} (log: {log})")
    lines += skip_warnings(models, displays)
    cut = ", ".join(f"{displays.get(k, k)} ({models[k]['rows']}/{summary['rows']} rows finished)"
                    for k in summary.get("cut_off") or ()) or "no model"
    kept = (f"finished rows kept in {Path(out) / 'rows.jsonl'} and summary.json (log: {log}); the same command "
            "with --resume runs the rest")
    if stopped == "timeout":
        lines.append(f"spectrum-rft eval: timeout: the run was stopped after {summary.get('run_s', 0):.0f} s "
                     f"(--timeout {summary['timeout_s']:g} s per model); cut off by the timeout: {cut}; {kept}")
    elif stopped == "aborted":
        lines.append(f"spectrum-rft eval: aborted: {summary['aborted']}")
        lines.append(f"spectrum-rft eval: aborted run: cut off: {cut}; {kept}")
    elif summary.get("missing"):
        lines.append(f"spectrum-rft eval: incomplete results for {', '.join(summary['missing'])} (see {log})")
    for line in lines:  # first: what went wrong is read before any table
        print(line, file=sys.stderr)
    sys.stderr.flush()
    if as_json:
        keys = (*METRICS, "privileged", "failed", "rows_errored", "error_cause", "rows_unfinished",
                "scans_skipped_total", "scans_total", "faults")
        print(json.dumps({"rows": summary["rows"], "path": summary["path"],
                          "models": {k: {m: v.get(m) for m in keys} for k, v in models.items()},
                          "plot": summary["plot"], "stopped": stopped}))
    else:
        print(format_table(models, displays))
        print()
        print(format_fault_summary(models, displays))
        print(f"\n{summary['rows']} rows per model through the {summary['path']} path (preset {summary['preset']}, "
              f"memory {summary['memory_mode']}, reward {summary['reward']}) in {summary['wall_s']:.1f} s")
        if any(v["privileged"] for v in models.values()):
            print("privileged: the oracle reads the hidden truth (an upper bound, not a model)")
        if failed & set(models):
            print(f"FAILED (no result, see above): {', '.join(displays.get(k, k) for k in models if k in failed)}")
        print(f"plot: {summary['plot'] or 'none (no model has a result)'}\nrows, summary, logs: {out}")
    sys.stdout.flush()
    return 1 if failed or stopped else 0


def out_problem(out: Path, overwrite: bool, resume: bool = False,
                run_files: Sequence[str] = ("rows.jsonl", STREAM_FILE)) -> str | None:
    """Why ``--out`` cannot take this run (one line), or None after making the folder. A folder that holds a
    run (one of ``run_files``) is never replaced silently: ``--overwrite`` replaces it, ``--resume`` goes on
    with it."""
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file; give a folder"
    if overwrite and resume:
        return "--overwrite replaces the run in --out and --resume goes on with it: give one"
    held = [name for name in run_files if (out / name).exists()]
    if resume and not held:
        return f"--resume: {out} holds no run to go on with (no {' or '.join(run_files)})"
    if held and not (overwrite or resume):
        return (f"--out {out} already holds a run ({held[0]}): give another folder, --resume to go on with it, or "
                "--overwrite to replace it")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"cannot create --out {out}: {e.strerror or e}"
    if not os.access(out, os.W_OK | os.X_OK):
        return f"--out {out} is not writable"
    return None


T = TypeVar("T")
STOP_SIGNALS = ("SIGTERM", "SIGHUP")  # stop the run as Ctrl-C does (Slurm, `timeout`, a dropped SSH session)


@contextmanager
def signals_stop_the_run() -> Iterator[None]:
    """While the block runs (main thread only), :data:`STOP_SIGNALS` raise :class:`.runner.Stop`: the run
    stops as on Ctrl-C (the child's group stopped, every finished row written), and says which signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise Stop(signal.Signals(signum).name)

    previous = {name: signal.signal(getattr(signal, name), stop) for name in STOP_SIGNALS if hasattr(signal, name)}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def run_until_stopped(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` for a command inside :func:`signals_stop_the_run`: a stop signal while the loop runs
    cancels the main task (every task unwinds through its own cancellation, none is left pending) and
    :class:`.runner.Stop` is raised once the loop has closed; Ctrl-C is asyncio's own (the same, as
    ``KeyboardInterrupt``). A Python-level handler's exception would land in whichever task happened to be
    running, stop the loop there, and leave the rest pending ("Task was destroyed but it is pending!")."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    names = [name for name in STOP_SIGNALS if hasattr(signal, name)]
    previous = {name: signal.getsignal(getattr(signal, name)) for name in names}
    stopped: list[str] = []

    async def guarded() -> T:
        task, loop = asyncio.current_task(), asyncio.get_running_loop()

        def stop(name: str) -> None:
            stopped.append(name)
            if task is not None:
                task.cancel()

        for name in names:  # removed when the loop closes, which leaves SIG_DFL: restored below
            loop.add_signal_handler(getattr(signal, name), stop, name)
        return await main

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if stopped:
            raise Stop(stopped[0]) from None
        raise
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)
    if stopped:  # the main coroutine swallowed its cancellation: the command still stops
        raise Stop(stopped[0])
    return result


def main(argv: list[str] | None = None) -> int:
    with signals_stop_the_run():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    entry_file = PROJECT_ROOT / ENTRIES[a.path][0]
    if not entry_file.is_file():
        print(f"spectrum-rft eval: the {a.path} path is not available in this checkout ({entry_file.name} is missing)",
              file=sys.stderr)
        return 2
    try:
        specs = model_specs(a.model or list(DEFAULT_LADDER), api_base=a.api_base, tool_choice=a.tool_choice,
                            extra=dict(a.param))
    except ValueError as e:
        ap.error(str(e))
    dataset_rows = None
    if a.dataset is not None:
        given = [f for f, v in (("--preset", a.preset), ("--memory-mode", a.memory_mode), ("--prompt", a.prompt),
                                ("--reward", a.reward), ("--salt", a.salt),
                                ("--max-calls-per-scan", a.max_calls_per_scan)) if v is not None]
        if given:
            ap.error(f"--dataset rows carry their own settings: drop {', '.join(given)} (or write the rows with them: "
                     "spectrum-rft dataset)")
        try:
            dataset_rows = load_user_dataset(a.dataset)
        except ValueError as e:
            print(f"spectrum-rft eval: {e}", file=sys.stderr)
            return 2
    out = Path(a.out) if a.out else PROJECT_ROOT / "runs" / "eval" / f"{a.path}-{time.strftime('%Y%m%d-%H%M%S')}"
    problem = out_problem(out, a.overwrite, a.resume)
    if problem:
        print(f"spectrum-rft eval: {problem}", file=sys.stderr)
        return 2
    try:
        summary = run_eval(specs, path=a.path, rows=a.rows or (len(dataset_rows) if dataset_rows else 16), out=out,
                           preset=a.preset or "default", memory_mode=a.memory_mode, reward=a.reward or "default",
                           prompt=a.prompt or "explicit", salt=a.salt or "", max_calls_per_scan=a.max_calls_per_scan,
                           concurrency=a.concurrency, timeout=a.timeout, keep_ep_logs=a.ep_logs,
                           progress=not a.no_progress, resume=a.resume, dataset_rows=dataset_rows)
    except ValueError as e:
        ap.error(str(e))
    except (EvalError, LocalServerError) as e:
        print(f"spectrum-rft eval: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # before the rollouts started, or a second Ctrl-C while writing the results
        sig = getattr(e, "signal", None)
        print(f"spectrum-rft eval: {f'stopped by {sig}' if sig else 'interrupted'} (finished rows, if any, are "
              f"under {out}; the same command with --resume goes on)", file=sys.stderr)
        return 128 + int(getattr(signal.Signals, sig)) if sig else 130
    return report(summary, as_json=a.json)


if __name__ == "__main__":
    raise SystemExit(main())
