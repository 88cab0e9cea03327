"""Held-out bands scored during a Fireworks RFT job: the evaluation rows `spectrum-rft launch` uploads as the job's
``evaluationDataset`` (:mod:`spectrum_rft.tools.launch.heldout`; the marker, ``environment_context["split"] ==
"heldout"``, is a row's: :func:`spectrum_rft.rollouts.dataset.is_heldout`; no epoch, never a training band). The
experiment's question on them: does memory use rise over training on bands the model has never seen, more than
in the control arm?

Where a held-out rollout goes on the x-axis: the same held-out rows are scored at every evaluation pass, so the
row carries no epoch. A scored held-out rollout is placed at the training group (epoch) in progress when it was
scored: the last group whose first training rollout was created at or before the held-out rollout's
``created_at`` (-1: before the first training rollout, the untrained model). Without timestamps (on a held-out
rollout, or on every training rollout of a group) the held-out rollouts are one group, ``None``, and a note says so.

Means and standard errors are over bands (a band's rollouts averaged first), as in the model table. The paired
treatment-vs-control difference is taken at one evaluation group, the last both runs reached (two jobs stopped
at different stages would otherwise mix stages): :func:`compare`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from spectrum_rft.common.stats import linear_fit, mean, standard_error

from .validate import Rollout

HELDOUT_METRICS = ("score", "memory_gain", "dormant_recall", "beyond_current")
BEFORE_TRAINING = -1


def value(r: Rollout, metric: str) -> float | None:
    """A held-out rollout's figure: the score, else eval's reading of the metric (the model table's)."""
    return r.score if metric == "score" else dict(r.table).get(metric)


def _ts(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def place(train: Sequence[tuple[int, Rollout]],
          held: Sequence[Rollout]) -> tuple[list[tuple[int | None, Rollout]], str | None]:
    """Each held-out rollout with the training group in progress when it was scored (module docstring); a note
    when timestamps are missing."""
    starts: dict[int, float] = {}
    for x, r in train:
        t = _ts(r.created_at)
        if t is None:
            return [(None, r) for r in held], "training rows without created_at: held-out rows form one group"
        starts[x] = min(t, starts.get(x, t))
    order = sorted(starts.items(), key=lambda kv: (kv[1], kv[0]))
    out: list[tuple[int | None, Rollout]] = []
    for r in held:
        t = _ts(r.created_at)
        if t is None:
            return [(None, r) for r in held], "held-out rows without created_at: they form one group"
        x = BEFORE_TRAINING
        for gx, st in order:
            if st <= t:
                x = gx
        out.append((x, r))
    return out, None


def _band_means(rows: Sequence[Rollout], metric: str) -> dict[str, float]:
    acc: dict[str, list[float]] = {}
    for r in rows:
        v = value(r, metric)
        if v is not None:
            acc.setdefault(r.fingerprint or f"row:{r.row_id}", []).append(v)
    return {k: m for k, v in acc.items() if (m := mean(v)) is not None}  # v is never empty: m is never None


def analyze(name: str, train_points: Sequence[tuple[int, Rollout]],
            placed: Sequence[tuple[int | None, Rollout]], note: str | None) -> dict[str, Any]:
    """One run's held-out figures per group (``placed``: :func:`place`'s), their trends, and the check that no
    held-out band was trained on."""
    held = [r for _, r in placed]
    groups = _groups(placed)
    per = []
    for x in sorted(groups, key=lambda k: (k is None, k if k is not None else 0)):
        rs = groups[x]
        row: dict[str, Any] = {"x": x, "rollouts": len(rs), "bands": len({r.fingerprint or r.row_id for r in rs})}
        for m in HELDOUT_METRICS:
            vals = list(_band_means(rs, m).values())
            row[m], row[f"{m}_se"], row[f"{m}_n"] = mean(vals), standard_error(vals), len(vals)
        per.append(row)
    trend = {}
    for m in HELDOUT_METRICS:
        pairs = [(p["x"], p[m]) for p in per if p["x"] is not None and p[m] is not None]
        fit = linear_fit([a for a, _ in pairs], [b for _, b in pairs]) if pairs else None
        trend[m] = None if fit is None else {"slope": fit.slope, "r2": fit.r2, "points": fit.n}
    return {"run": name, "rollouts": len(held), "bands": len({r.fingerprint or r.row_id for r in held}),
            "per_epoch": per, "trend": trend, "note": note,
            "checks": [never_trained_on([r for _, r in train_points], held)]}


def _groups(placed: Sequence[tuple[int | None, Rollout]]) -> dict[int | None, list[Rollout]]:
    out: dict[int | None, list[Rollout]] = {}
    for x, r in placed:
        out.setdefault(x, []).append(r)
    return out


def never_trained_on(train: Sequence[Rollout], held: Sequence[Rollout]) -> dict[str, Any]:
    """No held-out band is a training band (fingerprints); missing fingerprints cannot pass."""
    name = "held-out bands never trained on"
    missing = [r for r in [*train, *held] if r.fingerprint is None]
    if missing:
        return {"name": name, "ok": False, "detail": f"{len(missing)} rollouts carry no band_fingerprint (first: "
                                                     f"{missing[0].where}): cannot verify"}
    trained = {r.fingerprint for r in train}
    held_fps = {r.fingerprint for r in held}
    both = sorted(held_fps & trained)  # type: ignore[type-var]
    if both:
        return {"name": name, "ok": False, "detail": f"{len(both)} of {len(held_fps)} held-out bands are training "
                                                     f"bands (e.g. {both[0]})"}
    return {"name": name, "ok": True, "detail": f"{len(held_fps)} held-out bands, none among {len(trained)} "
                                                "training bands"}


def compare(treat: dict, ctrl: dict, t_placed: Sequence[tuple[int | None, Rollout]],
            c_placed: Sequence[tuple[int | None, Rollout]]) -> dict[str, Any]:
    """Treatment vs control on held-out bands: per group, both means and the difference; both slopes and the
    difference; and the difference paired over the held-out bands both runs saw (same eval salt: same bands) at
    ``paired_at``, the last evaluation group both runs reached (None: the held-out rows are one group; no band
    paired when the runs share no group), so a job stopped earlier is never compared with a later stage of the
    other."""
    c_by = {p["x"]: p for p in ctrl["per_epoch"]}
    per = []
    for p in treat["per_epoch"]:
        c = c_by.get(p["x"])
        if c is None:
            continue
        per.append({"x": p["x"], **{m: {"treatment": p[m], "control": c[m],
                                        "difference": None if p[m] is None or c[m] is None else p[m] - c[m]}
                                    for m in HELDOUT_METRICS}})
    slopes = {}
    for m in HELDOUT_METRICS:
        ts, cs = treat["trend"][m], ctrl["trend"][m]
        slopes[m] = {"treatment": ts and ts["slope"], "control": cs and cs["slope"],
                     "difference": ts["slope"] - cs["slope"] if ts and cs else None}
    tg, cg = _groups(t_placed), _groups(c_placed)
    shared = set(tg) & set(cg)
    at = max((x for x in shared if x is not None), default=None)
    paired = {}
    for m in HELDOUT_METRICS:
        tb, cb = (_band_means(tg[at], m), _band_means(cg[at], m)) if at in shared else ({}, {})
        diffs = [tb[k] - cb[k] for k in sorted(set(tb) & set(cb))]
        paired[m] = {"bands": len(diffs), "mean_difference": mean(diffs), "se": standard_error(diffs)}
    return {"treatment": treat["run"], "control": ctrl["run"], "per_epoch": per, "slopes": slopes,
            "paired_at": at, "paired": paired}
