"""The model-by-model table: every run's means with standard errors, its per-scan curve, and paired differences
of the score on the bands two runs both saw. What an eval folder (or several) is read for; the per-epoch
analysis (:mod:`.analysis`) is only for rows that span epochs.

Standard errors are over rows: the rollouts of one row (GRPO candidates, one band) are averaged first, so
several rollouts of a band do not pass for independent evidence. A paired difference pairs bands by their
fingerprint (rows of two models with the same row_id in one eval folder are the same band; across folders the
fingerprint says whether they are), else by row_id within one input.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any, Mapping, Sequence

from spectrum_rft.common.stats import mean, mean_or, standard_error

from .validate import TABLE_METRICS, Rollout

MAX_ALL_PAIRS = 6  # up to this many runs every pair is shown; beyond, each run against the first


def display_names(runs: Mapping[str, Sequence[Rollout]]) -> dict[str, str]:
    """A run's name in the table: its model where one input holds every run, the input's label where every
    input holds one model of the same name, else ``label:model`` (the run's own name)."""
    sources = {name: {r.source for r in rs} for name, rs in runs.items()}
    models = {name: {r.model for r in rs} for name, rs in runs.items()}
    labels = set().union(*sources.values()) if sources else set()
    out = {}
    for name in runs:
        (model,) = models[name] if len(models[name]) == 1 else (None,)
        if len(labels) == 1 and model:
            out[name] = model
        elif len(sources[name]) == 1 and len(set().union(*models.values())) == 1:
            out[name] = next(iter(sources[name]))
        else:
            out[name] = name
    if len(set(out.values())) < len(out):  # two runs would read alike: their own names
        return {name: name for name in runs}
    return out


def _by_row(rows: Sequence[Rollout], value) -> dict[str, float]:  # noqa: ANN001 (Rollout -> float | None)
    """Per row (its rollouts averaged) the mean of ``value``; rows without one are left out."""
    acc: dict[str, list[float]] = {}
    for r in rows:
        v = value(r)
        if v is not None:
            acc.setdefault(r.row_id, []).append(v)
    return {k: m for k, v in acc.items() if (m := mean(v)) is not None}  # v is never empty: m is never None


def per_scan_curve(rows: Sequence[Rollout]) -> tuple[list[float], list[float | None]]:
    """Mean per-scan reward over rows (a row's rollouts averaged first) and its standard error, per scan."""
    acc: dict[str, list[tuple[float, ...]]] = {}
    for r in rows:
        if r.per_scan:
            acc.setdefault(r.row_id, []).append(r.per_scan)
    # every mean below is of at least one value (n is the longest curve's length): nan never shows
    per_row = []
    for curves in acc.values():
        n = max(len(c) for c in curves)
        per_row.append([mean_or((c[i] for c in curves if len(c) > i), math.nan) for i in range(n)])
    n = max((len(c) for c in per_row), default=0)
    cols = [[c[i] for c in per_row if len(c) > i] for i in range(n)]
    return [mean_or(col, math.nan) for col in cols], [standard_error(col) for col in cols]


def model_row(name: str, display: str, run: dict, rows: Sequence[Rollout]) -> dict[str, Any]:
    """One line of the table: a failed run (no result) has ``failed`` and no figure at all."""
    out: dict[str, Any] = {"run": name, "name": display, "rows": len({r.row_id for r in rows}),
                           "rollouts": len(rows), "errored": sum(r.errored for r in rows), "failed": run["failed"]}
    if run["failed"]:
        return {**out, "metrics": {m: None for m in TABLE_METRICS}, "per_scan_reward": [], "per_scan_reward_se": []}
    metrics = {}
    for m in TABLE_METRICS:
        vals = list(_by_row(rows, lambda r, m=m: dict(r.table).get(m, r.score if m == "score" else None)).values())
        metrics[m] = {"mean": mean(vals), "se": standard_error(vals), "rows": len(vals)} if vals else None
    curve, se = per_scan_curve(rows)
    return {**out, "metrics": metrics, "per_scan_reward": curve, "per_scan_reward_se": se}


def _band_scores(rows: Sequence[Rollout]) -> dict[str, float]:
    """Score per band (fingerprint, else the input and row_id), a band's rollouts averaged."""
    acc: dict[str, list[float]] = {}
    for r in rows:
        acc.setdefault(f"fp:{r.fingerprint}" if r.fingerprint else f"row:{r.source}#{r.row_id}", []).append(r.score)
    return {k: mean(v) for k, v in acc.items()}  # type: ignore[misc]


def paired(a: str, b: str, a_rows: Sequence[Rollout], b_rows: Sequence[Rollout]) -> dict[str, Any]:
    """Score of ``a`` minus score of ``b`` on the bands both saw: mean and standard error over those bands."""
    sa, sb = _band_scores(a_rows), _band_scores(b_rows)
    shared = sorted(set(sa) & set(sb))
    diffs = [sa[k] - sb[k] for k in shared]
    return {"a": a, "b": b, "metric": "score", "bands": len(shared), "mean_difference": mean(diffs),
            "se": standard_error(diffs)}


def pairs_to_show(table: list[dict], control: str | None) -> list[tuple[str, str]]:
    """(a, b) runs to difference: every run against ``control`` when given; else every pair of the first
    :data:`MAX_ALL_PAIRS` (the higher mean first, so a difference reads as a gain), then the rest against the
    first run. Failed runs are in none."""
    ok = [t for t in table if not t["failed"]]
    if control is not None:
        return [(t["run"], control) for t in ok if t["run"] != control] if control in {t["run"] for t in ok} else []
    score = {t["run"]: t["metrics"]["score"]["mean"] if t["metrics"]["score"] else 0.0 for t in ok}
    names = [t["run"] for t in ok]
    out = [(a, b) if score[a] >= score[b] else (b, a) for a, b in combinations(names[:MAX_ALL_PAIRS], 2)]
    return out + [(n, names[0]) for n in names[MAX_ALL_PAIRS:]]


def build_table(analyzed: dict[str, dict], rows: Mapping[str, Sequence[Rollout]], control: str | None) -> dict:
    """The table of every run and the paired differences (those with no shared band are left out)."""
    names = display_names(rows)
    table = [model_row(n, names[n], analyzed[n], rows[n]) for n in analyzed]
    diffs = [paired(a, b, rows[a], rows[b]) for a, b in pairs_to_show(table, control)]
    return {"table": table, "paired": [d for d in diffs if d["bands"]]}
