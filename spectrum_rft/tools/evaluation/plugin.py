"""The pytest plugin of the evaluation child (``-p spectrum_rft.tools.evaluation.plugin``): marks where each
model's item starts (for the parent's progress bar) and streams every scored row to a file as it is
scored (so a stopped run keeps its finished rows). Imported by pytest in the child only."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

ITEM_MARK = "@@spectrum-eval item"
# The child streams every row its entry has scored to this file (JSON lines), as the row is scored.
STREAM_ENV = "SPECTRUM_EVAL_STREAM"
STREAM_FILE = "scored-rows.jsonl"  # in the run's temp folder


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    """pytest hook, active only in the child (``-p spectrum_rft.tools.evaluation.plugin``): marks where each model's item
    starts, so the parent's progress bar knows which model is running."""
    stream = sys.__stderr__
    if stream is not None:
        stream.write(f"\n{ITEM_MARK} {nodeid}\n")
        stream.flush()


def pytest_configure(config: Any) -> None:
    """pytest hook, active only in the child (``-p spectrum_rft.tools.evaluation.plugin``) and only when ``$SPECTRUM_EVAL_STREAM``
    names a file: every row scored by the entries' one scoring function (``spectrum_rft.rollouts.row_result.
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
    if getattr(inner, "spectrum_streamed", False):
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

    evaluate_row.spectrum_streamed = True  # type: ignore[attr-defined]
    spectrum_eval_result.evaluate_row = evaluate_row
