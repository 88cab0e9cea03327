"""The scored rows of an evaluation child: eval-protocol's persisted rows, the rows the child streamed
(:mod:`.plugin`), and which model each row belongs to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from spectrum_rft.tools.evaluation.specs import ModelSpec


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
