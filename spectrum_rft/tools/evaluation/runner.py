"""The models through one evaluation entry: one pytest child process (its environment, its command line,
its process group), a progress bar fed from the child's output, watchdogs, and the rows it scored (read from
the run's row stream, which the child appends to as it scores: :mod:`.plugin`)."""

from __future__ import annotations

import codecs
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from spectrum_rft.common.processes import stop_process_group
from spectrum_rft.common.redaction import REDACTED
from spectrum_rft.rollouts.dataset import row_identity
from spectrum_rft.tools.entries import ENTRIES, PROJECT_ROOT
from spectrum_rft.tools.evaluation.plugin import ITEM_MARK, MODELS_ENV, PARENT_ENV, SCAN_MARK, STREAM_ENV
from spectrum_rft.tools.evaluation.progress import Progress
from spectrum_rft.tools.evaluation.rows import first_of_each, load_streamed_rows
from spectrum_rft.tools.evaluation.specs import POLICY_PREFIX, ModelSpec

OFFLINE_ENV = {"EP_NO_UPLOAD": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "EP_DISABLE_AUTO_BROWSER": "1"}
PLUGIN = "spectrum_rft.tools.evaluation.plugin"  # the child's pytest plugin (-p)
# eval-protocol's plugin ends a session with links to a local UI server (``ep logs``) that an evaluation here
# never starts: in pytest.log they would point nowhere, so the block becomes one line that says so.
_LOCAL_UI_BLOCK = re.compile(r"={20,}\n[^\n]*LOCAL UI EVALUATION RESULTS\n={20,}\n.*?={20,}\n", re.S)
LOCAL_UI_NOTE = ("(eval-protocol's links to its local UI were left out: spectrum-rft eval starts no UI server; "
                 "the rows are in rows.jsonl beside this log)\n")


def without_local_ui_links(log: str) -> str:
    """The child's output with eval-protocol's local-UI link block replaced by :data:`LOCAL_UI_NOTE`."""
    return _LOCAL_UI_BLOCK.sub(lambda _: LOCAL_UI_NOTE, log)


_SCAN_MARK_LINE = re.compile(rf"{re.escape(SCAN_MARK)} \d+\n")  # mid-line too (after a tqdm bar)


def without_scan_marks(log: str) -> str:
    """The child's output without the plugin's per-scan progress lines (they feed the bar, not the log)."""
    return _SCAN_MARK_LINE.sub("", log)


def without_secrets(text: str, specs: Sequence[ModelSpec]) -> str:
    """``text`` with every key the specs hold replaced by :data:`~spectrum_rft.common.redaction.REDACTED` (the
    child never had one on its command line; this covers whatever a library might print)."""
    for spec in specs:
        for value in spec.secrets.values():
            if value:
                text = text.replace(value, REDACTED)
    return text


# eval-protocol's rollout bar: "  Run 1:  50%|█████     | 8/16 [00:01<00:01, 7.9rollout/s]"
_TQDM_RUN = re.compile(r"Run \d+:\s*\d+%\|[^|\r\n]*\|\s*(\d+)/(\d+)")


class EvalError(RuntimeError):
    """The child exited by itself without one scored row (the message carries the tail of its output)."""


WORK_DIR = ".eval-work"  # in --out: the child's output folder and temp folder, removed when the child is done


def child_env(specs: Sequence[ModelSpec], *, keep_ep_logs: bool = False, tmpdir: Path | None = None,
              stream: Path | None = None) -> dict[str, str]:
    """The child's environment: offline defaults, no Fireworks tracing when every model is offline, and
    a dummy OpenAI key for an OpenAI-compatible endpoint (litellm insists on one). ``tmpdir``: the
    child's own temp folder (``TMPDIR``): whatever it and its MCP server leave there (the server's
    ``spectrum_server_<pid>_<port>.log`` when the child is stopped) goes with the run's work folder.
    ``stream``: where the child appends each scored row (:func:`.plugin.pytest_configure`), labelled with
    the spec's label. The child also gets this process's pid, and ends itself when this process is gone."""
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
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    if tmpdir is not None:
        for k in ("TMPDIR", "TEMP", "TMP"):
            env[k] = str(tmpdir)
    if stream is not None:
        env[STREAM_ENV] = str(stream)
    else:
        env.pop(STREAM_ENV, None)
    for spec in specs:  # keys given as params: by reference in the command line, by value here only
        env.update(spec.secrets)
    env[MODELS_ENV] = json.dumps([s.label for s in specs])
    env[PARENT_ENV] = str(os.getpid())
    return env


def entry_command(path: str, specs: Sequence[ModelSpec], dataset: Path, rows: int, out_dir: Path,
                   concurrency: int) -> list[str]:
    """``python -m pytest <entry> --ep-completion-params ... (once per model) ...``: one test item per model."""
    entry_file, entry_fn = ENTRIES[path]
    cmd = [sys.executable, "-m", "pytest", f"{entry_file}::{entry_fn}", "-q", "-p", "no:cacheprovider",
           "-p", PLUGIN, "--rootdir", str(PROJECT_ROOT), "--no-header", "--capture=sys"]
    for spec in specs:
        cmd += ["--ep-completion-params", json.dumps(spec.params, sort_keys=True)]
    return cmd + ["--ep-jsonl-path", str(dataset), "--ep-max-rows", str(rows),
                  "--ep-max-concurrent-rollouts", str(concurrency), "--ep-output-dir", str(out_dir), "--ep-no-upload"]


def _tail(text: str, n: int = 1500) -> str:
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    return text[-n:].strip()


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


class Stop(KeyboardInterrupt):
    """A signal that stops the run as Ctrl-C does (``SIGTERM``, ``SIGHUP``): the rows are kept, the run says
    which signal it was (:attr:`signal`, e.g. ``"SIGTERM"``)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal = signal_name


def _wait_child(proc: subprocess.Popen, timeout: float | None,
                watchdogs: Sequence[Watchdog]) -> tuple[str | None, str | None]:
    """Wait for the child; poll the watchdogs about every :data:`WATCHDOG_POLL_S` seconds. Returns
    (stopped, message): (None, None) when the child exited by itself; ("interrupted", None) on Ctrl-C,
    ("interrupted", "SIGTERM") on a :class:`Stop`."""
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
    except Stop as e:
        return "interrupted", e.signal
    except KeyboardInterrupt:
        return "interrupted", None



assert len(SCAN_MARK) == len(ITEM_MARK)  # one tail length keeps a mark split across reads whole, counted once


class ProgressFollower:
    """Reads the child's output as it comes: which item (model) is running (our plugin's ``ITEM_MARK``
    lines), the scans closed within it (``SCAN_MARK`` lines: :attr:`scans`) and eval-protocol's rollout bar
    within it. Marks split across reads are counted once."""

    def __init__(self) -> None:
        self.item = -1
        self.scans = 0  # scans closed (episodes' last scans aside) since the running item started
        self._buf = ""  # output since the last mark, at most its last 600 characters

    def feed(self, text: str) -> tuple[int | None, tuple[int, int] | None]:
        """(the new item index when a mark arrived, else None; (rows done, rows) when the bar shows it)."""
        joined = self._buf[-(len(ITEM_MARK) - 1):] + text  # the tail that could hold a split mark
        marks = joined.count(ITEM_MARK)
        if marks:
            self.item += marks
            after = joined[joined.rindex(ITEM_MARK) + len(ITEM_MARK):]
            self.scans = after.count(SCAN_MARK)
            self._buf = after[-600:]
        else:
            self.scans += joined.count(SCAN_MARK)
            self._buf = (self._buf + text)[-600:]
        hits = _TQDM_RUN.findall(self._buf)
        return (self.item if marks else None), ((int(hits[-1][0]), int(hits[-1][1])) if hits else None)


def run_models(path: str, specs: Sequence[ModelSpec], dataset: Path, rows: int, *, concurrency: int,
               log_path: Path, stream: Path, timeout: float | None = None, keep_ep_logs: bool = False,
               progress: Progress | None = None, watchdogs: Sequence[Watchdog] = ()) -> ModelsRun:
    """Run every model through the evaluation entry of ``path`` in one pytest child; return each model's
    rows (EvaluationRow JSON) that this child scored, in dataset order. A model with no rows maps to ``[]``.

    ``stream``: the run's row stream (in ``--out``), which the child appends every scored row to as it is
    scored; rows already there (a killed run's) are not this child's and are not returned. The child's own
    work (eval-protocol's output folder, ``TMPDIR``) is in :data:`WORK_DIR` beside the stream, removed when
    the child is done. The child is stopped (its whole process group) when ``timeout`` seconds have passed,
    on Ctrl-C or a :class:`Stop` signal, or when one of ``watchdogs`` (polled about every 0.5 s while the
    child runs) returns a message; the rows finished by then are kept (``ModelsRun.stopped`` says why).
    Raises :class:`EvalError` when the child exited by itself without a single scored row."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    work = stream.parent / WORK_DIR
    shutil.rmtree(work, ignore_errors=True)  # a killed run's leftovers
    child_tmp = work / "tmp"
    child_tmp.mkdir(parents=True)
    offset = stream.stat().st_size if stream.exists() else 0
    cmd = entry_command(path, specs, dataset, rows, work, concurrency)
    chunks: list[str] = []
    try:
        # Its own session: the child and whatever it starts (the MCP server) form one process group,
        # which is stopped as a whole if anything is left (timeout, Ctrl-C, a child killed mid-run).
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=child_env(specs, keep_ep_logs=keep_ep_logs, tmpdir=child_tmp,
                                                             stream=stream),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

        def pump() -> None:
            out = proc.stdout
            assert isinstance(out, io.BufferedIOBase)  # stdout=PIPE, binary and buffered: a BufferedReader
            decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character may span two reads
            follow = ProgressFollower()
            for raw in iter(lambda: out.read1(8192), b""):
                text = decoder.decode(raw)
                chunks.append(text)
                if progress is None:
                    continue
                try:  # the progress bar must never stop this thread: it also drains the child's pipe
                    item, done = follow.feed(text)
                    if item is not None:
                        progress.model(min(item, len(specs) - 1), specs[min(item, len(specs) - 1)].label)
                    if follow.item >= 0:
                        progress.scans_done(follow.scans)
                    if done is not None and follow.item >= 0:
                        progress.rows_done(*done)
                except Exception:  # noqa: BLE001  (a display glitch, never a lost log or a hung child)
                    continue

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        stopped: str | None = "interrupted"
        message: str | None = None
        try:
            stopped, message = _wait_child(proc, timeout, watchdogs)
        finally:  # also on an exception: the child never outlives this call
            with _sigint_ignored():  # a second Ctrl-C must not leave the group running
                stop_process_group(proc)
                reader.join(timeout=5)
                log_path.write_text(without_secrets(without_local_ui_links(without_scan_marks("".join(chunks))), specs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    by_model = first_of_each([s.label for s in specs], load_streamed_rows(stream, offset))
    output = without_scan_marks("".join(chunks))
    if not any(by_model.values()) and stopped is None:
        raise EvalError(f"the {path} entry produced no scored rows (pytest exit {proc.returncode}; see {log_path}):"
                        f"\n{_tail(output)}")
    order: dict[Any, int] = {}
    for line in dataset.read_text().splitlines():
        if line.strip():
            order.setdefault(row_identity(json.loads(line)), len(order))
    for lst in by_model.values():
        lst.sort(key=lambda r: order.get((r.get("input_metadata") or {}).get("row_id"), len(order)))
    return ModelsRun(by_model, stopped, message, proc.returncode, round(time.monotonic() - started, 2), log_path)
