"""The run's row stream (``--out/rows.partial.jsonl``): every row the evaluation child scored, appended as it
was scored and labelled with its model (:mod:`.plugin`), read back by the run and by ``--resume``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from spectrum_rft.rollouts.dataset import row_identity


def _clean_row(d: dict) -> dict:
    d.pop("evals", None)  # eval-protocol's flattened copies of evaluation_result
    d.pop("eval_details", None)
    return d


def load_streamed_rows(path: Path, offset: int = 0) -> list[tuple[str, dict]]:
    """(model label, row) for every line of the stream from byte ``offset`` on, in the order they were
    scored. A line cut short by a killed child, or not a streamed row at all, is skipped."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("model"), str) and isinstance(d.get("row"), dict):
            out.append((d["model"], _clean_row(d["row"])))
    return out


def first_of_each(labels: Iterable[str], rows: Iterable[tuple[str, dict]]) -> dict[str, list[dict]]:
    """Each label's rows, the first one of each row id (a row kept from an earlier run wins over a rerun of
    it), in the order given; rows of other labels are dropped."""
    by_model: dict[str, list[dict]] = {label: [] for label in labels}
    seen: set[tuple[str, Any]] = set()
    for label, row in rows:
        key = (label, row_identity(row))
        if label in by_model and key not in seen:
            seen.add(key)
            by_model[label].append(row)
    return by_model
