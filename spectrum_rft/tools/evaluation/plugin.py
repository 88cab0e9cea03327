"""The pytest plugin of the evaluation child (``-p spectrum_rft.tools.evaluation.plugin``): marks where each
model's item starts and each scan that closes (for the parent's progress bar), appends every scored row to
the run's row stream as it is scored (so no death of either process loses a finished row), and ends the
child with its parent.
Imported by pytest in the child only; what it does is set by the parent through the child's environment
(:func:`spectrum_rft.tools.evaluation.runner.child_env`), read once in :func:`pytest_configure`."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

ITEM_MARK = "@@spectrum-eval item"
SCAN_MARK = "@@spectrum-eval scan"  # one line per scan closed (not an episode's last: its row's end says it)
# The parent's settings for the child (names of environment variables the parent sets on the child alone):
STREAM_ENV = "SPECTRUM_EVAL_STREAM"  # the file every scored row is appended to, as it is scored
MODELS_ENV = "SPECTRUM_EVAL_MODELS"  # JSON list: the model label of each item, in run order
PARENT_ENV = "SPECTRUM_EVAL_PARENT"  # the parent's pid: the child ends its process group when it is gone
STREAM_FILE = "rows.partial.jsonl"  # in --out: {"model": label, "row": EvaluationRow JSON} per line
PARENT_POLL_S = 0.25


class _Items:
    """Which item (model) is running: pytest runs them one after another, in the parent's order."""

    def __init__(self, labels: list[str]) -> None:
        self.labels, self.index = labels, -1

    def started(self) -> None:
        self.index += 1

    @property
    def label(self) -> str:
        return self.labels[min(max(self.index, 0), len(self.labels) - 1)] if self.labels else f"item {self.index}"


_ITEMS = _Items([])  # replaced in pytest_configure (the child's own, one per process)


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    """pytest hook: marks where each model's item starts, so the parent's progress bar knows which model is
    running, and counts the items, so each streamed row names its model."""
    _ITEMS.started()
    stream = sys.__stderr__
    if stream is not None:
        stream.write(f"\n{ITEM_MARK} {nodeid}\n")
        stream.flush()


def _mark_scans() -> None:
    """Write :data:`SCAN_MARK` to the child's stderr each time a rollout's scan closes (the rollout
    processor's :func:`spectrum_rft.rollouts.loop.scan_closed`, both entries): the parent's progress counts
    scans, so a model that takes minutes per reply is seen moving."""
    from spectrum_rft.rollouts import loop  # noqa: PLC0415

    if getattr(loop.scan_closed, "spectrum_marked", False):
        return

    def scan_closed(row_id: str, scan: int) -> None:
        stream = sys.__stderr__
        if stream is not None:
            try:
                stream.write(f"{SCAN_MARK} {scan}\n")
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: the parent is gone (the parent watch ends us)
                pass

    scan_closed.spectrum_marked = True  # type: ignore[attr-defined]
    loop.scan_closed = scan_closed


def _end_with_parent(parent: int) -> None:
    """Poll the parent; once it is gone (``kill -9``, an OOM kill), end this child's whole process group
    (the child and the MCP server it started): nothing outlives the command."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="spectrum-eval-parent", daemon=True).start()


def append_line(path: str | os.PathLike, line: str) -> None:
    """One line, on disk before the call returns (flushed and fsynced: it survives a machine reboot)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def pytest_configure(config: Any) -> None:
    """pytest hook, active only in the child: the parent's settings (:data:`MODELS_ENV`, :data:`PARENT_ENV`,
    :data:`STREAM_ENV`). With a parent, the child ends with it and marks every closed scan
    (:func:`_mark_scans`). With a stream, every row scored by the entries' one scoring function
    (``spectrum_rft.rollouts.row_result.evaluate_row``, which both entries call on each finished rollout) is
    appended to it as ``{"model": label, "row": ...}`` as it is scored.

    Why: eval-protocol persists rows only when a whole item (one model, every row) has finished, and its row
    logger sees a scored row only at the end of the run too; a run stopped by ``--timeout``, a signal or a
    watchdog, or killed outright, would lose every row already finished. This runs before collection, so the
    entries import the wrapped function; nothing of eval-protocol is touched."""
    global _ITEMS
    try:
        labels = json.loads(os.environ.get(MODELS_ENV) or "[]")
    except ValueError:
        labels = []
    _ITEMS = _Items([str(x) for x in labels] if isinstance(labels, list) else [])
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit():
        _end_with_parent(int(parent))
        _mark_scans()
    path = os.environ.get(STREAM_ENV)
    if not path:
        return
    import functools  # noqa: PLC0415

    from spectrum_rft.rollouts import row_result  # noqa: PLC0415

    inner = row_result.evaluate_row
    if getattr(inner, "spectrum_streamed", False):
        return
    lock = threading.Lock()

    @functools.wraps(inner)
    def evaluate_row(row: Any, *args: Any, **kwargs: Any) -> Any:
        out = inner(row, *args, **kwargs)
        try:
            line = json.dumps({"model": _ITEMS.label, "row": out.model_dump(exclude_none=True, mode="json")},
                              separators=(",", ":"))
            with lock:
                append_line(path, line)
        except Exception as e:  # noqa: BLE001  (never fail a row over the stream)
            if sys.__stderr__ is not None:  # None only in a process started without a stderr
                sys.__stderr__.write(f"spectrum-eval: could not stream a scored row: {e!r}\n")
        return out

    evaluate_row.spectrum_streamed = True  # type: ignore[attr-defined]
    row_result.evaluate_row = evaluate_row
