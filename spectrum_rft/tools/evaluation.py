"""``spectrum-rft eval``: run the evaluator offline on baseline policies or a model, with eval-protocol.

    spectrum-rft eval                                     # the ladder memoryless < accumulate < oracle, 16 rows
    spectrum-rft eval --path mcp --rows 8                 # the same through the McpGym path
    spectrum-rft eval --model local --rows 2              # SmolLM2-135M served by llama.cpp on 127.0.0.1
    spectrum-rft eval --model openai/qwen3 --api-base http://127.0.0.1:8000/v1 --tool-choice auto

How a run is made (and why): for every model, the evaluation entry itself
(``test_spectrum_turn.py::test_spectrum_turn`` or ``test_spectrum_rft.py::test_spectrum_rft``) is run by
pytest in a child process with eval-protocol's own flags: ``--ep-completion-params`` (the model),
``--ep-jsonl-path`` (a dataset written by :func:`make_spectrum_dataset.make_rows`), ``--ep-max-rows``,
``--ep-max-concurrent-rollouts`` and ``--ep-output-dir``, where eval-protocol persists every finished
row (EvaluationRow JSON with ``evaluation_result`` and ``execution_metadata.extra``). That is exactly
what the Fireworks cloud executes: the entry's own decorator configuration (rollout processor, its
kwargs, the MCP server script, ``steps``, dataset adapter) and its own scoring, with eval-protocol's
retries. Nothing here re-implements a rollout or a score, so the two cannot drift apart; a child
process per model also keeps eval-protocol's environment-variable configuration (its pytest plugin
writes ``os.environ``) out of this process and isolates a crashing model. The cost is ~3 s of imports
per model, which the 2-minute budget of the default ladder absorbs.

The progress bar follows eval-protocol's rollout bar in the child's output (rows done per model); if
that format ever changes, the bar degrades to per-model progress, never to a failure.

Results go under ``--out`` (default ``runs/eval/<path>-<time>``): ``dataset.jsonl`` (the input rows),
``rows.jsonl`` (every scored EvaluationRow), ``summary.json``, ``per_scan_reward.png`` and
``pytest.log`` (the child's pytest output).

When a run goes wrong:

* **A model that never answered.** Under the table: ``errors`` and the dominant ``cause`` per model
  (``extra["spectrum_rollout"]["model_failure"]["cause"]`` when the rollout processor recorded it, else
  classified from the error row's status message: eval-protocol's own errors), and a fault summary (the
  most frequent environment fault kinds, scans skipped of all scans; totals in ``summary.json``). A model
  whose every row errored, or whose every scan was skipped, fails the run (exit 1) with one line naming
  the cause and the log; more than half of a model's scans skipped is a WARNING.
* **Stopped runs** (``--timeout``, Ctrl-C, a watchdog of :func:`run_eval`): the child's process group is
  stopped and every row that finished is kept: rows.jsonl and summary.json are written (``stopped``,
  ``cut_off``, per model ``rows_unfinished``). eval-protocol persists an item's rows only when the whole
  item has finished, so the child streams each row as the entry scores it (:func:`pytest_configure`).
  Exit 1 (timeout, watchdog) or 130 (Ctrl-C: one line saying where the rows are).
* The child runs with its own ``TMPDIR`` inside the run's temp folder: whatever it or the MCP server
  leaves there (a stopped server's log) is removed with it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from spectrum_rft.common.processes import stop_process_group
from spectrum_rft.tools.entries import ENTRIES, PROJECT_ROOT
from spectrum_rft.tools.local_llm import LocalServerError  # stdlib only: cheap

ROOT = PROJECT_ROOT  # the evaluation entries live there
DEFAULT_LADDER = ("memoryless", "accumulate", "oracle")
METRICS = ("score", "mean_occ", "mean_avail", "memory_gain", "dormant_recall", "scans_skipped")
POLICY_PREFIX = "spectrum/"
PRIVILEGED = {"spectrum/oracle"}
# eval-protocol's McpGym policy caches responses unless told not to: identical first prompts of a row's
# rollouts would come back identical (EVAL_PROTOCOL_NOTES.md); test_spectrum_rft's own default turns it off.
PATH_PARAM_DEFAULTS: dict[str, dict[str, Any]] = {"mcp": {"use_caching": False}}
OFFLINE_ENV = {"EP_NO_UPLOAD": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "EP_DISABLE_AUTO_BROWSER": "1"}
# eval-protocol's rollout bar: "  Run 1:  50%|█████     | 8/16 [00:01<00:01, 7.9rollout/s]"
_TQDM_RUN = re.compile(r"Run \d+:\s*\d+%\|[^|\r\n]*\|\s*(\d+)/(\d+)")


class EvalError(RuntimeError):
    """The child exited by itself without one scored row (the message carries the tail of its output)."""


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------


@dataclass
class ModelSpec:
    """One model of a run: its label in tables and the litellm completion params the entry receives."""

    label: str
    params: dict[str, Any] = field(default_factory=dict)
    local: bool = False  # started by this run (spectrum_local.local_server)

    @property
    def privileged(self) -> bool:
        return self.params.get("model") in PRIVILEGED

    @property
    def display(self) -> str:
        return f"{self.label} (privileged)" if self.privileged else self.label


def _is_policy_name(name: str) -> bool:
    from spectrum_rft.baselines import policies as sp  # noqa: PLC0415

    try:
        sp.make_policy(name)
    except ValueError:
        return False
    return True


def model_specs(names: Sequence[str], *, api_base: str | None = None, tool_choice: str | None = None,
                extra: dict[str, Any] | None = None) -> list[ModelSpec]:
    """Model names -> specs. A bare policy name (``accumulate``, ``carpet-16``) means ``spectrum/<name>``;
    ``local`` is the SmolLM2 server this run starts; anything else is a litellm model name, given
    ``--api-base`` / ``--tool-choice`` / ``--param`` when set."""
    specs: list[ModelSpec] = []
    for name in names:
        if name == "local":
            specs.append(ModelSpec("local", {**(extra or {})}, local=True))
            continue
        model = name
        if not name.startswith(POLICY_PREFIX) and "/" not in name and _is_policy_name(name):
            model = POLICY_PREFIX + name
        if model.startswith(POLICY_PREFIX):
            if not _is_policy_name(model[len(POLICY_PREFIX):]):
                raise ValueError(f"unknown baseline policy model {model!r}")
            specs.append(ModelSpec(model, {"model": model}))
            continue
        params: dict[str, Any] = {"model": model, **(extra or {})}
        if api_base:
            params["api_base"] = api_base
        if tool_choice:
            params["tool_choice"] = tool_choice
        specs.append(ModelSpec(model, params))
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"a model is listed twice: {labels}")
    return specs


# --------------------------------------------------------------------------------------------------
# The models through one evaluation entry (one pytest child process)
# --------------------------------------------------------------------------------------------------

_MARK = "@@spectrum-eval item"
# The child streams every row its entry has scored to this file (JSON lines), as the row is scored.
STREAM_ENV = "SPECTRUM_EVAL_STREAM"
STREAM_FILE = "scored-rows.jsonl"  # in the run's temp folder


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    """pytest hook, active only in the child (``-p spectrum_eval``): marks where each model's item
    starts, so the parent's progress bar knows which model is running."""
    stream = sys.__stderr__
    if stream is not None:
        stream.write(f"\n{_MARK} {nodeid}\n")
        stream.flush()


def pytest_configure(config: Any) -> None:
    """pytest hook, active only in the child (``-p spectrum_eval``) and only when ``$SPECTRUM_EVAL_STREAM``
    names a file: every row scored by the entries' one scoring function (``spectrum_eval_result.
    evaluate_row``, which both entries call on each finished rollout) is also appended to that file, as
    it is scored.

    Why: eval-protocol persists rows under ``--ep-output-dir`` only when the whole item (one model, every
    row) has finished (``handle_persist_flow`` from the item's postprocess), and its row logger sees a
    scored row only at the end of the run too; a run stopped by ``--timeout``, Ctrl-C or a watchdog would
    lose every row already finished. This runs before collection, so the entries import the wrapped
    function; nothing of eval-protocol is touched, and the row is the one eval-protocol then persists."""
    path = os.environ.get(STREAM_ENV)
    if not path:
        return
    import functools  # noqa: PLC0415

    from spectrum_rft.rollouts import row_result as spectrum_eval_result  # noqa: PLC0415

    inner = spectrum_eval_result.evaluate_row
    if getattr(inner, "_spectrum_streamed", False):
        return
    lock = threading.Lock()

    @functools.wraps(inner)
    def evaluate_row(row: Any, *args: Any, **kwargs: Any) -> Any:
        out = inner(row, *args, **kwargs)
        try:
            line = json.dumps(out.model_dump(exclude_none=True, mode="json"), separators=(",", ":"))
            with lock, open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except Exception as e:  # noqa: BLE001  (never fail a row over the side copy)
            sys.__stderr__.write(f"spectrum-eval: could not stream a scored row: {e!r}\n")
        return out

    evaluate_row._spectrum_streamed = True  # type: ignore[attr-defined]
    spectrum_eval_result.evaluate_row = evaluate_row


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"


def child_env(specs: Sequence[ModelSpec], *, keep_ep_logs: bool = False, tmpdir: Path | None = None,
              stream: Path | None = None) -> dict[str, str]:
    """The child's environment: offline defaults, no Fireworks tracing when every model is offline, and
    a dummy OpenAI key for an OpenAI-compatible endpoint (litellm insists on one). ``tmpdir``: the
    child's own temp folder (``TMPDIR``): whatever it and its MCP server leave there (the server's
    ``spectrum_server_<pid>_<port>.log`` when the child is stopped) goes with the run's temp folder.
    ``stream``: where the child appends each scored row (:func:`pytest_configure`)."""
    env = dict(os.environ)
    for k, v in OFFLINE_ENV.items():
        env.setdefault(k, v)
    if not keep_ep_logs:
        env["DISABLE_EP_SQLITE_LOG"] = "1"  # eval-protocol's shared sqlite row log: slow; rows.jsonl has the rows
    models = [str(s.params.get("model", "")) for s in specs]
    if all(m.startswith(POLICY_PREFIX) or s.params.get("api_base") for m, s in zip(models, specs)):
        env.pop("FIREWORKS_API_KEY", None)  # with it set, eval-protocol posts logs to Fireworks tracing
    if any(m.startswith("openai/") and s.params.get("api_base") for m, s in zip(models, specs)):
        env.setdefault("OPENAI_API_KEY", "dummy")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    if tmpdir is not None:
        for k in ("TMPDIR", "TEMP", "TMP"):
            env[k] = str(tmpdir)
    if stream is not None:
        env[STREAM_ENV] = str(stream)
    else:
        env.pop(STREAM_ENV, None)
    return env


def entry_command(path: str, specs: Sequence[ModelSpec], dataset: Path, rows: int, out_dir: Path,
                   concurrency: int) -> list[str]:
    """``python -m pytest <entry> --ep-completion-params ... (once per model) ...``: one test item per model."""
    entry_file, entry_fn = ENTRIES[path]
    cmd = [sys.executable, "-m", "pytest", f"{entry_file}::{entry_fn}", "-q", "-p", "no:cacheprovider",
           "-p", "spectrum_rft.tools.evaluation", "--rootdir", str(ROOT), "--no-header", "--capture=sys"]
    for spec in specs:
        cmd += ["--ep-completion-params", json.dumps(spec.params, sort_keys=True)]
    return cmd + ["--ep-jsonl-path", str(dataset), "--ep-max-rows", str(rows),
                  "--ep-max-concurrent-rollouts", str(concurrency), "--ep-output-dir", str(out_dir), "--ep-no-upload"]


def _tail(text: str, n: int = 1500) -> str:
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    return text[-n:].strip()


def _clean_row(d: dict) -> dict:
    d.pop("evals", None)  # eval-protocol's flattened copies of evaluation_result
    d.pop("eval_details", None)
    return d


def load_result_rows(out_dir: Path) -> list[dict]:
    """The rows eval-protocol persisted under ``--ep-output-dir`` (``experiment_results/*.jsonl``), as
    EvaluationRow JSON (its flattened ``evals``/``eval_details`` copies dropped)."""
    rows = []
    for f in sorted((out_dir / "experiment_results").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                rows.append(_clean_row(json.loads(line)))
    return rows


def _row_key(row: dict) -> tuple:
    md = row.get("execution_metadata") or {}
    return (md.get("experiment_id"), md.get("run_id"), md.get("rollout_id"),
            (row.get("input_metadata") or {}).get("row_id"))


def load_streamed_rows(path: Path) -> list[dict]:
    """The rows the child streamed as they were scored (the last copy of each rollout; a line cut short
    by a stopped child is skipped)."""
    latest: dict[tuple, dict] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            latest[_row_key(d)] = _clean_row(d)
    return list(latest.values())


def collect_rows(out_dir: Path, stream: Path | None = None) -> list[dict]:
    """Every finished row: eval-protocol's persisted rows (items that finished), plus the streamed rows
    of items that did not (a run stopped mid-item)."""
    rows = load_result_rows(out_dir)
    seen = {_row_key(r) for r in rows}
    if stream is not None:
        rows += [r for r in load_streamed_rows(stream) if _row_key(r) not in seen]
    return rows


def _compatible(row: dict, spec: ModelSpec) -> bool:
    """Whether a row came from ``spec``: same model, and no identifying param that differs (processors
    rewrite completion params: add defaults, drop keys such as ``use_caching``)."""
    cp = (row.get("input_metadata") or {}).get("completion_params") or {}
    params = json.loads(json.dumps(spec.params))
    return cp.get("model") == params.get("model") and all(
        cp[k] == params[k] for k in ("api_base", "tool_choice", "temperature") if k in cp and k in params)


def assign_rows(rows: Sequence[dict], specs: Sequence[ModelSpec]) -> dict[str, list[dict]]:
    """Rows -> their model. One pytest item (one experiment) per model, run in the specs' order: each
    experiment goes to the first compatible model not yet served (so the same model listed twice with
    different params still maps in order)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str((r.get("execution_metadata") or {}).get("experiment_id")), []).append(r)
    ordered = sorted(groups.values(), key=lambda g: min(str(r.get("created_at", "")) for r in g))
    by_model: dict[str, list[dict]] = {s.label: [] for s in specs}
    for g in ordered:
        cands = [s for s in specs if _compatible(g[0], s)]
        pick = next((s for s in cands if not by_model[s.label]), cands[0] if cands else None)
        if pick is not None:
            by_model[pick.label].extend(g)
    return by_model


Watchdog = Callable[[], "str | None"]
WATCHDOG_POLL_S = 0.5


@dataclass
class ModelsRun:
    """What :func:`run_models` returns: each model's finished rows (dataset order) and how the child ended.

    ``stopped``: None (the child exited by itself), ``"timeout"``, ``"interrupted"`` (Ctrl-C) or
    ``"aborted"`` (a watchdog fired; ``message`` is what it said). Rows that finished before a stop are
    kept; the others are simply absent."""

    by_model: dict[str, list[dict]]
    stopped: str | None = None
    message: str | None = None
    returncode: int | None = None
    elapsed_s: float = 0.0
    log_path: Path | None = None


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored for the block (main thread only: elsewhere signals cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ask_watchdogs(watchdogs: Sequence[Watchdog]) -> str | None:
    for dog in watchdogs:
        try:
            msg = dog()
        except Exception as e:  # noqa: BLE001  (a broken watchdog must not leave the child running)
            return f"watchdog {getattr(dog, '__qualname__', dog)!s} failed: {type(e).__name__}: {e}"
        if msg:
            return str(msg)
    return None


def _wait_child(proc: subprocess.Popen, timeout: float | None,
                watchdogs: Sequence[Watchdog]) -> tuple[str | None, str | None]:
    """Wait for the child; poll the watchdogs about every :data:`WATCHDOG_POLL_S` seconds. Returns
    (stopped, message): (None, None) when the child exited by itself."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            step = WATCHDOG_POLL_S if deadline is None else min(WATCHDOG_POLL_S, deadline - time.monotonic())
            try:
                proc.wait(timeout=max(0.0, step))
                return None, None
            except subprocess.TimeoutExpired:
                pass
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout", None
            msg = _ask_watchdogs(watchdogs)
            if msg:
                return "aborted", msg
    except KeyboardInterrupt:
        return "interrupted", None





def run_models(path: str, specs: Sequence[ModelSpec], dataset: Path, rows: int, *, concurrency: int,
               log_path: Path, timeout: float | None = None, keep_ep_logs: bool = False,
               progress: "Progress | None" = None, watchdogs: Sequence[Watchdog] = ()) -> ModelsRun:
    """Run every model through the evaluation entry of ``path`` in one pytest child; return each model's
    scored rows (EvaluationRow JSON) in dataset order. A model with no rows maps to ``[]``.

    The child is stopped (its whole process group) when ``timeout`` seconds have passed, on Ctrl-C, or
    when one of ``watchdogs`` (polled about every 0.5 s while the child runs) returns a message; the rows
    finished by then are kept (``ModelsRun.stopped`` says why). Raises :class:`EvalError` when the child
    exited by itself without a single scored row."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spectrum-eval-", ignore_cleanup_errors=True) as tmp:
        out_dir = Path(tmp)
        child_tmp = out_dir / "tmp"
        child_tmp.mkdir()
        stream = out_dir / STREAM_FILE
        cmd = entry_command(path, specs, dataset, rows, out_dir, concurrency)
        # Its own session: the child and whatever it starts (the MCP server) form one process group,
        # which is stopped as a whole if anything is left (timeout, Ctrl-C, a child killed mid-run).
        proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(specs, keep_ep_logs=keep_ep_logs, tmpdir=child_tmp,
                                                             stream=stream),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        chunks: list[str] = []

        def pump() -> None:
            assert proc.stdout is not None
            buf, item = "", -1
            for raw in iter(lambda: proc.stdout.read1(8192), b""):  # type: ignore[union-attr]
                text = raw.decode("utf-8", "replace")
                chunks.append(text)
                if progress is None:
                    continue
                buf = (buf + text)[-600:]
                if _MARK in text:
                    item += text.count(_MARK)
                    buf = buf[buf.rindex(_MARK):]
                    progress.model(min(item, len(specs) - 1), specs[min(item, len(specs) - 1)].label)
                hits = _TQDM_RUN.findall(buf)
                if hits and item >= 0:
                    progress.rows_done(int(hits[-1][0]), int(hits[-1][1]))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        stopped, message = "interrupted", None
        try:
            stopped, message = _wait_child(proc, timeout, watchdogs)
        finally:  # also on an exception: the child never outlives this call
            with _sigint_ignored():  # a second Ctrl-C must not leave the group running
                stop_process_group(proc)
                reader.join(timeout=5)
                log_path.write_text("".join(chunks))
        result = collect_rows(out_dir, stream)
    output = "".join(chunks)
    if not result and stopped is None:
        raise EvalError(f"the {path} entry produced no scored rows (pytest exit {proc.returncode}; see {log_path}):"
                        f"\n{_tail(output)}")
    by_model = assign_rows(result, specs)
    order: dict[Any, int] = {}
    for line in dataset.read_text().splitlines():
        if line.strip():
            order.setdefault(json.loads(line).get("id"), len(order))
    for lst in by_model.values():
        lst.sort(key=lambda r: order.get((r.get("input_metadata") or {}).get("row_id"), len(order)))
    return ModelsRun(by_model, stopped, message, proc.returncode, round(time.monotonic() - started, 2), log_path)


# --------------------------------------------------------------------------------------------------
# Summaries, table, plot
# --------------------------------------------------------------------------------------------------


def _extra_sources(row: dict) -> list[dict]:
    """Where a rollout path leaves the environment's record: ``execution_metadata.extra["spectrum"]``."""
    extra = (row.get("execution_metadata") or {}).get("extra") or {}
    return [d for d in (extra.get("spectrum"), extra) if isinstance(d, dict)]


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def row_metric(row: dict, name: str) -> float | None:
    """A metric of a scored row (EvaluationRow JSON): the EvaluateResult's, else the environment record's."""
    ev = row.get("evaluation_result")
    if not isinstance(ev, dict):
        return None
    if name == "score":
        return _number(ev.get("score"))
    m = (ev.get("metrics") or {}).get(name)
    if isinstance(m, dict) and m.get("is_score_valid", True) and _number(m.get("score")) is not None:
        return _number(m.get("score"))
    for src in _extra_sources(row):
        if _number(src.get(name)) is not None:
            return _number(src.get(name))
    return None


def per_scan_rewards(row: dict) -> list[float]:
    """The per-scan rewards of a scored row: the EvaluateResult's step_outputs (one per scan), else the
    environment's record in ``execution_metadata.extra``."""
    ev = row.get("evaluation_result") if isinstance(row.get("evaluation_result"), dict) else {}
    steps = sorted(ev.get("step_outputs") or [], key=lambda st: st.get("step_index", 0))
    if steps:
        return [float(st.get("base_reward") or 0.0) for st in steps]
    for src in _extra_sources(row):
        v = src.get("per_scan_reward")
        if isinstance(v, list):
            return [float(x) for x in v]
    return []


def is_error_row(row: dict) -> bool:
    return ((row.get("rollout_status") or {}).get("code")) == 13  # Status.Code.INTERNAL


# Why a rollout errored: the rollout processors' model-failure causes (extra["spectrum_rollout"]
# ["model_failure"]["cause"]), the same words for errors classified here from the status message.
FAILURE_CAUSES = ("connection refused", "http 5xx", "timeout", "rate limited", "empty reply", "bad request", "error")
MODEL_FAILURE = "model never produced a usable reply"
_CAUSE_TEXT: tuple[tuple[str, re.Pattern], ...] = tuple((cause, re.compile(rx, re.I)) for cause, rx in (
    ("connection refused", r"connection refused|APIConnectionError|connection error|connecterror|connect call failed"
                           r"|failed to establish|cannot connect|name or service not known|connection reset"
                           r"|server disconnected|remoteprotocolerror"),
    ("timeout", r"timed? ?out|timeout"),
    ("rate limited", r"rate.?limit|too many requests|\b(?:http|status|code|error)\W{0,3}429\b"),
    ("http 5xx", r"InternalServerError|ServiceUnavailable|bad ?gateway|\b(?:http|status|code|error)\W{0,3}5\d\d\b"
                 r"|\b5\d\d (?:internal|server|service)"),
    ("empty reply", r"no choices|empty (?:reply|response|choices)|without a choice"),
    ("bad request", r"BadRequest|bad request|NotFoundError|AuthenticationError|PermissionDenied|invalid_request"
                    r"|UnprocessableEntity|request rejected|\b(?:http|status|code|error)\W{0,3}4\d\d\b"),
))
# env fault kinds of failed model requests -> the same causes (a finished row that skipped every scan)
_FAULT_CAUSE = {"llm_connection": "connection refused", "llm_5xx": "http 5xx", "llm_timeout": "timeout",
                "llm_rate_limited": "rate limited", "llm_empty_choices": "empty reply",
                "llm_bad_request": "bad request", "llm_error": "error"}


def classify_failure_text(text: str | None) -> str:
    """One of :data:`FAILURE_CAUSES` for an error message (eval-protocol's own errors, litellm's)."""
    text = text or ""
    m = re.search(re.escape(MODEL_FAILURE) + r":\s*([a-z0-9 ]+)", text)
    if m:
        for cause in FAILURE_CAUSES:
            if m.group(1).startswith(cause):
                return cause
    for cause, rx in _CAUSE_TEXT:
        if rx.search(text):
            return cause
    return "error"


def _rollout_extra(row: dict) -> dict:
    extra = (row.get("execution_metadata") or {}).get("extra") or {}
    r = extra.get("spectrum_rollout") if isinstance(extra, dict) else None
    return r if isinstance(r, dict) else {}


def error_cause(row: dict) -> str | None:
    """Why an error row errored (None for a row that did not): the rollout processor's
    ``model_failure.cause`` when it recorded one, else classified from the status message."""
    if not is_error_row(row):
        return None
    failure = _rollout_extra(row).get("model_failure")
    if isinstance(failure, dict) and failure.get("cause") in FAILURE_CAUSES:
        return str(failure["cause"])
    return classify_failure_text((row.get("rollout_status") or {}).get("message"))


def _env_record(row: dict) -> dict:
    extra = (row.get("execution_metadata") or {}).get("extra") or {}
    rec = extra.get("spectrum") if isinstance(extra, dict) else None
    return rec if isinstance(rec, dict) else {}


def row_faults(row: dict) -> dict[str, int]:
    """The environment's fault counts of a row (``extra["spectrum"]["faults"]``)."""
    faults = _env_record(row).get("faults")
    if not isinstance(faults, dict):
        return {}
    return {str(k): int(v) for k, v in faults.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v}


def row_scans(row: dict) -> tuple[int, int] | None:
    """(scans skipped, scans) of a row with an environment record; None without one."""
    rec = _env_record(row)
    n = rec.get("n_scans")
    if not isinstance(n, int) or isinstance(n, bool):
        per_scan = rec.get("per_scan_reward")
        n = len(per_scan) if isinstance(per_scan, list) else None
    skipped = rec.get("scans_skipped")
    if not n or not isinstance(skipped, (int, float)) or isinstance(skipped, bool):
        return None
    return int(skipped), int(n)


def fault_group(kind: str) -> str:
    """The summary's fault groups: LLM failures, skipped scans, invalid reports, other refusals."""
    if kind.startswith("llm_"):
        return "llm failures"
    if kind.startswith("skip_"):
        return "skipped scans"
    if kind.startswith("invalid_"):
        return "invalid reports"
    return "refusals"


def summarize(rows: Sequence[dict]) -> dict[str, Any]:
    """Means over rows of the table's metrics, the mean per-scan reward curve, error counts and causes,
    fault totals and skipped scans."""
    out: dict[str, Any] = {}
    for name in METRICS:
        vals = [v for v in (row_metric(r, name) for r in rows) if v is not None]
        out[name] = round(sum(vals) / len(vals), 6) if vals else None
    curves = [per_scan_rewards(r) for r in rows]
    n = max((len(c) for c in curves), default=0)
    out["per_scan_reward"] = [
        round(sum(c[i] for c in curves if len(c) > i) / max(1, sum(len(c) > i for c in curves)), 6) for i in range(n)
    ]
    out["rows"] = len(rows)
    errored = [r for r in rows if is_error_row(r)]
    out["rows_errored"] = len(errored)
    out["first_error"] = (errored[0].get("rollout_status") or {}).get("message") if errored else None
    causes: dict[str, int] = {}
    for r in errored:
        c = error_cause(r) or "error"
        causes[c] = causes.get(c, 0) + 1
    out["error_causes"] = dict(sorted(causes.items(), key=lambda kv: (-kv[1], FAILURE_CAUSES.index(kv[0]))))
    out["error_cause"] = next(iter(out["error_causes"]), None)  # the dominant one
    out["rows_unscored"] = sum(1 for r in rows if not isinstance(r.get("evaluation_result"), dict))
    faults: dict[str, int] = {}
    for r in rows:
        for k, v in row_faults(r).items():
            faults[k] = faults.get(k, 0) + v
    out["faults"] = dict(sorted(faults.items(), key=lambda kv: (-kv[1], kv[0])))
    groups: dict[str, int] = {}
    for k, v in faults.items():
        groups[fault_group(k)] = groups.get(fault_group(k), 0) + v
    out["fault_groups"] = dict(sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])))
    llm = {c: v for k, v in faults.items() if (c := _FAULT_CAUSE.get(k))}
    out["llm_failure_cause"] = max(llm, key=lambda c: llm[c]) if llm else None
    scans = [x for x in (row_scans(r) for r in rows) if x is not None]
    out["scans_skipped_total"] = sum(k for k, _ in scans)
    out["scans_total"] = sum(n for _, n in scans)
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return f"{v:+.3f}" if isinstance(v, float) and v < 0 else f"{v:.3f}"


def format_table(models: dict[str, dict[str, Any]], displays: dict[str, str] | None = None) -> str:
    """The metrics table: one line per model; ``rows`` is ``finished/asked`` when some never finished,
    ``cause`` the dominant cause of the model's errored rows."""
    displays = displays or {}
    names = [displays.get(k, k) for k in models]
    w = max([len("model"), *map(len, names)])
    cols = [*METRICS, "rows", "errors"]
    causes = [str(m.get("error_cause") or "-") for m in models.values()]
    cw = max([len("cause"), *map(len, causes)])
    head = f"{'model':<{w}}  " + "  ".join(f"{c:>14}" for c in cols) + f"  {'cause':<{cw}}"
    lines = [head.rstrip(), "-" * len(head)]
    for key, disp, cause in zip(models, names, causes):
        m = models[key]
        rows = str(m.get("rows", "-"))
        if m.get("rows_unfinished"):
            rows = f"{m['rows']}/{m['rows'] + m['rows_unfinished']}"
        cells = [_fmt(m.get(c)) for c in METRICS] + [rows, str(m.get("rows_errored", "-"))]
        lines.append((f"{disp:<{w}}  " + "  ".join(f"{c:>14}" for c in cells) + f"  {cause:<{cw}}").rstrip())
    return "\n".join(lines)


SKIP_WARN_FRACTION = 0.5  # warn when more than this share of a model's scans was skipped


def _pct(k: int, n: int) -> str:
    return f"{100.0 * k / n:.0f}%" if n else "-"


def format_fault_summary(models: dict[str, dict[str, Any]], displays: dict[str, str] | None = None,
                         top: int = 4) -> str:
    """Under the table: per model its most frequent fault kinds and the scans skipped of all scans."""
    displays = displays or {}
    lines = ["faults (all rows of a model; skipped scans are scored as empty reports):"]
    for key, m in models.items():
        faults = m.get("faults") or {}
        kinds = ", ".join(f"{k} {v}" for k, v in list(faults.items())[:top]) or "none"
        if len(faults) > top:
            kinds += f", +{len(faults) - top} more kinds"
        k, n = m.get("scans_skipped_total", 0), m.get("scans_total", 0)
        skipped = f"scans skipped {k}/{n} ({_pct(k, n)})" if n else "scans skipped -"
        lines.append(f"  {displays.get(key, key)}: {kinds}; {skipped}")
    return "\n".join(lines)


def skip_warnings(models: dict[str, dict[str, Any]], displays: dict[str, str] | None = None) -> list[str]:
    """A WARNING per model that skipped more than half of its scans (its score measures empty reports)."""
    displays = displays or {}
    out = []
    for key, m in models.items():
        k, n = m.get("scans_skipped_total", 0), m.get("scans_total", 0)
        if m.get("rows") and m.get("rows_errored") == m.get("rows"):
            continue  # every rollout errored: said on its own line, with the cause
        if n and k / n > SKIP_WARN_FRACTION:
            why = f" (model requests failed: {m['llm_failure_cause']})" if m.get("llm_failure_cause") else ""
            out.append(f"WARNING: {displays.get(key, key)}: {k}/{n} scans skipped ({_pct(k, n)}){why}: its score "
                       f"is mostly empty reports, not the model's answers")
    return out


def plot_per_scan(curves: dict[str, Sequence[float]], path: Path, title: str) -> Path:
    """Mean per-scan reward against scan index, one line per model (PNG). The Agg canvas is chosen
    here, for this figure only: nothing global (no pyplot, no backend switch at import)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(7.5, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for label, ys in curves.items():
        if ys:
            ax.plot(range(1, len(ys) + 1), ys, marker="o", markersize=3.5, linewidth=1.6, label=label)
    ax.set_xlabel("scan")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.05)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    if any(curves.values()):
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


# --------------------------------------------------------------------------------------------------
# Progress bar
# --------------------------------------------------------------------------------------------------


class Progress:
    """One line on stderr: ``eval turn [#####.....] 2/3 spectrum/accumulate rows 8/16 12s``."""

    def __init__(self, n_models: int, rows: int, path: str, stream: Any = None, enabled: bool = True):
        self.n_models, self.rows, self.path = n_models, rows, path
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.model_i, self.label, self.done_rows = 0, "", 0
        self._lock = threading.Lock()
        self._last = ""

    def model(self, i: int, label: str) -> None:
        self.model_i, self.label, self.done_rows = i, label, 0
        self._draw(force=True)

    def rows_done(self, done: int, total: int) -> None:
        self.done_rows = min(done, self.rows)
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            total = max(1, self.n_models * self.rows)
            frac = (self.model_i * self.rows + self.done_rows) / total
            bar = "#" * int(round(24 * frac))
            line = (f"eval {self.path} [{bar:<24}] model {self.model_i + 1}/{self.n_models} {self.label} "
                    f"rows {self.done_rows}/{self.rows} {time.monotonic() - self.start:4.0f}s")
            if line == self._last and not force:
                return
            if self.tty:
                self.stream.write("\r" + line.ljust(len(self._last)))
            elif force or line.split(" rows ")[0] != self._last.split(" rows ")[0]:
                self.stream.write(line + "\n")
            self.stream.flush()
            self._last = line

    def finish(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# --------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------


def _parse_param(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--param expects KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    try:
        return k, json.loads(v)
    except ValueError:
        return k, v


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


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error on one line (exit 2) instead of the whole usage block first."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from spectrum_rft.task.environment import MEMORY_MODES  # noqa: PLC0415

    from spectrum_rft.task.environment import PROMPT_VARIANTS  # noqa: PLC0415

    ap = _Parser(
        prog="spectrum-rft eval",
        description="Run the evaluator offline through eval-protocol (the evaluation entries themselves) on "
                    "baseline policies, a local SmolLM2, or any OpenAI-compatible model; print a table, write "
                    "rows, a summary and a per-scan plot.")
    ap.add_argument("--path", choices=tuple(ENTRIES), default="turn",
                    help="turn: in-process processor (default); mcp: McpGym server")
    ap.add_argument("--model", action="append", default=None, metavar="M",
                    help="a baseline (memoryless, accumulate, oracle, empty, carpet-K, random-K, or spectrum/<name>), "
                         "'local' (SmolLM2 via llama.cpp, started for the run), or any litellm model (openai/<name> "
                         "with --api-base). Repeatable. Default: the ladder " + ", ".join(DEFAULT_LADDER))
    ap.add_argument("--rows", type=_count, default=16, help="dataset rows (bands) per model (>= 1)")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--memory-mode", choices=MEMORY_MODES, default=None,
                    help="default: the prompt's (scaffold for the explicit prompt)")
    ap.add_argument("--prompt", choices=PROMPT_VARIANTS, default="explicit", help="system prompt variant")
    ap.add_argument("--reward", default="default")
    ap.add_argument("--max-calls-per-scan", type=_count, default=None,
                    help="model calls per scan before it is skipped, >= 1 (the environment's default otherwise)")
    ap.add_argument("--concurrency", type=_count, default=16,
                    help="concurrent rollouts (--ep-max-concurrent-rollouts, >= 1)")
    ap.add_argument("--api-base", default=None, help="OpenAI-compatible endpoint for openai/<name> models")
    ap.add_argument("--tool-choice", default=None, help="tool_choice to send (e.g. auto; the local model sets it)")
    ap.add_argument("--param", action="append", type=_parse_param, default=[], metavar="KEY=VALUE",
                    help="extra completion param for non-baseline models (value parsed as JSON if it can be)")
    ap.add_argument("--salt", default="", help="band salt (rows are reproducible for a given salt)")
    ap.add_argument("--out", default=None, help="results folder (default: runs/eval/<path>-<time>)")
    ap.add_argument("--timeout", type=_seconds, default=1800.0,
                    help="seconds per model (> 0); the run is stopped after this times the number of models, "
                         "keeping the rows that finished, and exits 1")
    ap.add_argument("--ep-logs", action="store_true",
                    help="keep eval-protocol's local row log (~/.eval_protocol/logs.db, for `ep logs`)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    ap.add_argument("--no-progress", action="store_true")
    return ap


def write_dataset(path: Path, n: int, *, preset: str, memory_mode: str | None, reward: str, prompt: str,
                  salt: str, max_calls_per_scan: int | None) -> Path:
    from spectrum_rft.rollouts.dataset import make_rows, write_jsonl  # noqa: PLC0415

    rows = make_rows(n, prompt=prompt, memory_mode=memory_mode, preset=preset, reward=reward, salt=salt,
                     prefix="eval")
    if max_calls_per_scan is not None:
        for r in rows:
            r["environment_context"]["max_calls_per_scan"] = max_calls_per_scan
    return write_jsonl(rows, path)


def run_eval(specs: list[ModelSpec], *, path: str, rows: int, out: Path, preset: str = "default",
             memory_mode: str | None = None, reward: str = "default", prompt: str = "explicit", salt: str = "",
             max_calls_per_scan: int | None = None, concurrency: int = 16, timeout: float = 1800.0,
             keep_ep_logs: bool = False, progress: bool = True,
             watchdogs: Sequence[Watchdog] = ()) -> dict[str, Any]:
    """Run every model through the ``path`` entry; write rows, summary and plot under ``out``; return the
    summary (``models[label]``: the table's metrics, the per-scan curve, row and error counts, error
    causes, fault totals, skipped scans).

    ``timeout`` is per model (the run gets ``timeout`` x models). ``watchdogs``: callables polled about
    every 0.5 s while the rollouts run; the first message one returns stops the run. A run stopped by
    the timeout, Ctrl-C or a watchdog still writes every row that finished; the summary says
    ``stopped`` (``"timeout"``, ``"interrupted"``, ``"aborted"``), ``aborted`` (the watchdog's message),
    ``cut_off`` (the models with unfinished rows) and, per model, ``rows_unfinished`` and
    ``unfinished_row_ids``. A local model server started here is watched too (it exiting aborts the run)."""
    from spectrum_rft.rollouts.dataset import default_memory_mode  # noqa: PLC0415
    from spectrum_rft.task.environment import EnvConfig  # noqa: PLC0415

    memory_mode = memory_mode or default_memory_mode(prompt)
    EnvConfig(preset=preset, memory_mode=memory_mode, reward=reward, prompt=prompt,  # validate before any work
              **({"max_calls_per_scan": max_calls_per_scan} if max_calls_per_scan is not None else {}))
    if rows < 1 or concurrency < 1 or not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError("rows and concurrency must be >= 1 and timeout a finite number of seconds > 0")
    out.mkdir(parents=True, exist_ok=True)
    dataset = write_dataset(out / "dataset.jsonl", rows, preset=preset, memory_mode=memory_mode, reward=reward,
                            prompt=prompt, salt=salt, max_calls_per_scan=max_calls_per_scan)
    started = time.monotonic()
    bar = Progress(len(specs), rows, path, enabled=progress)
    dogs = list(watchdogs)
    with ExitStack() as stack:
        for i, spec in enumerate(specs):
            if spec.local:
                from spectrum_rft.tools.local_llm import local_server  # noqa: PLC0415

                bar.model(i, "local: starting llama.cpp")
                server = stack.enter_context(local_server())
                params = dict(getattr(server, "params", server))  # a LocalServer (its params and a supervisor)
                failure = getattr(server, "failure", None)
                if callable(failure):
                    dogs.append(failure)
                spec.params = {**params, **spec.params}
                spec.label = f"local ({params['model'].split('/', 1)[1]})"
        for spec in specs:  # what the entry's own default completion params carry for this path
            spec.params = {**PATH_PARAM_DEFAULTS.get(path, {}), **spec.params}
        bar.model(0, specs[0].label)
        try:
            run = run_models(path, specs, dataset, rows, concurrency=concurrency, log_path=out / "pytest.log",
                             timeout=timeout * len(specs), keep_ep_logs=keep_ep_logs, progress=bar, watchdogs=dogs)
        finally:
            bar.finish()
    wall = round(time.monotonic() - started, 2)
    ids = [json.loads(line).get("id") for line in dataset.read_text().splitlines() if line.strip()]
    models: dict[str, dict[str, Any]] = {}
    cut_off: list[str] = []
    with (out / "rows.jsonl").open("w") as f:
        for spec in specs:
            mine = run.by_model[spec.label]
            for r in mine:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
            s = summarize(mine)
            s["privileged"] = spec.privileged
            s["completion_params"] = spec.params
            done = {(r.get("input_metadata") or {}).get("row_id") for r in mine}
            s["rows_unfinished"] = max(0, rows - len(mine))
            s["unfinished_row_ids"] = [i for i in ids if i not in done] if s["rows_unfinished"] else []
            if run.stopped and s["rows_unfinished"]:
                s["stopped"] = run.stopped
                if run.stopped == "aborted":
                    s["aborted"] = run.message
                cut_off.append(spec.label)
            models[spec.label] = s
    displays = {s.label: s.display for s in specs}
    plot = None
    if run.stopped != "interrupted":  # after Ctrl-C: keep the rows and go, no figure
        plot = str(plot_per_scan({displays[k]: v["per_scan_reward"] for k, v in models.items()},
                                 out / "per_scan_reward.png",
                                 f"{path} path, preset {preset}, memory {memory_mode}, reward {reward}, {rows} rows"))
    summary = {
        "rows": rows, "path": path, "preset": preset, "memory_mode": memory_mode, "reward": reward, "prompt": prompt,
        "models": models, "plot": plot, "out": str(out), "log": str(out / "pytest.log"), "wall_s": wall,
        "displays": displays, "missing": [k for k, v in models.items() if v["rows"] < rows],
        "stopped": run.stopped, "aborted": run.message if run.stopped == "aborted" else None, "cut_off": cut_off,
        "timeout_s": timeout, "run_s": run.elapsed_s,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _first_line(text: Any, n: int = 400) -> str:
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
    return line if len(line) <= n else line[: n - 3] + "..."


def report(summary: dict[str, Any], *, as_json: bool = False) -> int:
    """Print a run's results (the table and the fault summary, or JSON) on stdout and what went wrong on
    stderr; return the exit status: 0, 1 (a model errored on every row, skipped every scan, or came back
    incomplete; the run was stopped by the timeout or a watchdog), 130 (Ctrl-C: one line, no table)."""
    models, displays = summary["models"], summary["displays"]
    out, log = summary["out"], summary.get("log") or str(Path(summary["out"]) / "pytest.log")
    stopped = summary.get("stopped")
    if stopped == "interrupted":
        kept = sum(v["rows"] for v in models.values())
        print(f"spectrum-rft eval: interrupted: the run was stopped; {kept} of {summary['rows'] * len(models)} rows "
              f"had finished and are kept in {out} (rows.jsonl, summary.json)", file=sys.stderr)
        return 130
    if as_json:
        keys = (*METRICS, "privileged", "rows_errored", "error_cause", "rows_unfinished", "scans_skipped_total",
                "scans_total", "faults")
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
        print(f"plot: {summary['plot']}\nrows, summary, logs: {out}")
    sys.stdout.flush()
    lines = skip_warnings(models, displays)
    failed = set(summary.get("missing") or ())
    for name, v in models.items():
        disp = displays.get(name, name)
        n, k = v["rows"], v["rows_errored"]
        if k:
            if k == n:
                lines.append(f"spectrum-rft eval: {disp}: every rollout errored ({k}/{n}), cause: {v['error_cause']}: "
                             f"{_first_line(v['first_error'])} (log: {log})")
                failed.add(name)
            else:
                lines.append(f"spectrum-rft eval: {disp}: {k}/{n} rollouts errored (scored 0), mostly "
                             f"{v['error_cause']}: {_first_line(v['first_error'])} (log: {log})")
        elif v.get("scans_total") and v["scans_skipped_total"] == v["scans_total"]:
            why = f"model requests failed: {v['llm_failure_cause']}" if v.get("llm_failure_cause") else \
                "no valid report within the call budget"
            lines.append(f"spectrum-rft eval: {disp}: every scan of every row was skipped "
                         f"({v['scans_skipped_total']}/{v['scans_total']}; {why}): nothing the model did was scored "
                         f"(log: {log})")
            failed.add(name)
    cut = ", ".join(f"{displays.get(k, k)} ({models[k]['rows']}/{summary['rows']} rows finished)"
                    for k in summary.get("cut_off") or ()) or "no model"
    kept = f"finished rows kept in {Path(out) / 'rows.jsonl'} and summary.json (log: {log})"
    if stopped == "timeout":
        lines.append(f"spectrum-rft eval: timeout: the run was stopped after {summary.get('run_s', 0):.0f} s "
                     f"(--timeout {summary['timeout_s']:g} s per model); cut off by the timeout: {cut}; {kept}")
    elif stopped == "aborted":
        lines.append(f"spectrum-rft eval: aborted: {summary['aborted']}")
        lines.append(f"spectrum-rft eval: aborted run: cut off: {cut}; {kept}")
    elif summary.get("missing"):
        lines.append(f"spectrum-rft eval: incomplete results for {', '.join(summary['missing'])} (see {log})")
    for line in lines:
        print(line, file=sys.stderr)
    return 1 if failed or stopped else 0


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    entry_file = ROOT / ENTRIES[a.path][0]
    if not entry_file.is_file():
        print(f"spectrum-rft eval: the {a.path} path is not available in this checkout ({entry_file.name} is missing)",
              file=sys.stderr)
        return 2
    try:
        specs = model_specs(a.model or list(DEFAULT_LADDER), api_base=a.api_base, tool_choice=a.tool_choice,
                            extra=dict(a.param))
    except ValueError as e:
        ap.error(str(e))
    out = Path(a.out) if a.out else ROOT / "runs" / "eval" / f"{a.path}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        summary = run_eval(specs, path=a.path, rows=a.rows, out=out, preset=a.preset, memory_mode=a.memory_mode,
                           reward=a.reward, prompt=a.prompt, salt=a.salt, max_calls_per_scan=a.max_calls_per_scan,
                           concurrency=a.concurrency, timeout=a.timeout, keep_ep_logs=a.ep_logs,
                           progress=not a.no_progress)
    except ValueError as e:
        ap.error(str(e))
    except (EvalError, LocalServerError) as e:
        print(f"spectrum-rft eval: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the rollouts started, or a second Ctrl-C while writing the results
        print(f"spectrum-rft eval: interrupted (results, if any, under {out})", file=sys.stderr)
        return 130
    return report(summary, as_json=a.json)


if __name__ == "__main__":
    raise SystemExit(main())
