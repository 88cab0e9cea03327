"""Analysis: the x-axis of every rollout, per-epoch means, trends, early/late halves, treatment vs control,
and the whole report as one JSON-able dict."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Sequence

from spectrum_rft.common.stats import first_last, linear_fit, mean, standard_error
from spectrum_rft.rollouts.failures import no_result
from spectrum_rft.task.memory import CONTROL_ECHO

from .heldout import analyze as analyze_heldout, compare as compare_heldout, place
from .checks import check_freshness, check_integrity
from .load import Loaded, dedupe, split_by_model
from .table import build_table
from .validate import METRICS, OPTIONAL_METRICS, ReportError, Rollout


def assign_x(rollouts: Sequence[Rollout], group_by: str) -> list[tuple[int, Rollout]]:
    """The x-axis value of every rollout under ``group_by``."""
    if group_by == "epoch":
        missing = [r.where for r in rollouts if r.epoch is None]
        if missing:
            raise ReportError(f"{len(missing)} rows have no environment_context.epoch (first: {missing[0]}); "
                              "use --group-by input|run-id|order:K")
        return [(r.epoch, r) for r in rollouts]  # type: ignore[misc]
    if group_by == "input":
        return [(r.input_index, r) for r in rollouts]
    if group_by == "run-id":
        first: dict[str, tuple[str, int]] = {}
        for r in rollouts:
            key = r.run_id or "(none)"
            cand = (r.created_at or "", r.seq)
            if key not in first or cand < first[key]:
                first[key] = cand
        rank = {k: i for i, k in enumerate(sorted(first, key=lambda k: first[k]))}
        return [(rank[r.run_id or "(none)"], r) for r in rollouts]
    m = re.fullmatch(r"order:(\d+)", group_by)
    if m:
        k = int(m.group(1))
        if k < 1:
            raise ReportError("--group-by order:K needs K >= 1")
        ordered = sorted(rollouts, key=lambda r: (_ts(r.created_at), r.input_index, r.seq))
        n = len(ordered)
        return [(min(k - 1, i * k // n), r) for i, r in enumerate(ordered)]
    raise ReportError(f"unknown --group-by {group_by!r}")


def _ts(s: str | None) -> float:
    if not s:
        return 0.0
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def run_failure(rollouts: Sequence[Rollout]) -> str | None:
    """Why a run's numbers are no result (:func:`~spectrum_rft.rollouts.failures.no_result`: every rollout
    errored, or most scans were skipped because the model's requests failed), or None."""
    causes = [r.cause for r in rollouts if r.cause]
    return no_result(len(rollouts), sum(r.errored for r in rollouts), scans=sum(r.scans for r in rollouts),
                     skipped=sum(r.skipped for r in rollouts),
                     skipped_by_model=sum(r.skipped_by_model for r in rollouts),
                     cause=max(causes, key=causes.count) if causes else None)


def analyze_run(name: str, rollouts: Sequence[Rollout], group_by: str) -> dict:
    """A run's per-epoch means, trends, halves and checks; a failed run (:func:`run_failure`) has ``failed`` and
    no figure (empty reports' scores are no result)."""
    failed = run_failure(rollouts)
    if failed:
        axis = {"epoch": "epoch", "input": "input", "run-id": "run"}.get(group_by, "bucket")
        return {"run": name, "axis": axis, "rollouts": len(rollouts), "failed": failed,
                "overall": {m: None for m in METRICS}, "rows": len({r.row_id for r in rollouts}),
                "errored": sum(r.errored for r in rollouts),
                "memory_mode": ",".join(sorted({r.memory_mode or "?" for r in rollouts})),
                "prompt": ",".join(sorted({r.prompt or "?" for r in rollouts})), "per_epoch": [],
                "halves": {"early": [], "late": [], "metrics": {}}, "trend": {m: None for m in METRICS},
                "checks": check_integrity(rollouts)}
    points = assign_x(rollouts, group_by)
    axis = {"epoch": "epoch", "input": "input", "run-id": "run"}.get(group_by, "bucket")
    groups: dict[int, list[Rollout]] = {}
    for x, r in points:
        groups.setdefault(x, []).append(r)
    per: list[dict[str, Any]] = []  # the report's per-epoch rows (JSON): the axis's int, counts, means or None
    for x in sorted(groups):
        rs = groups[x]
        scores = [r.score for r in rs]
        row = {axis: x, "rollouts": len(rs), "rows": len({r.row_id for r in rs}),
               "errored": sum(r.errored for r in rs), "score": mean(scores), "score_se": standard_error(scores)}
        for m in OPTIONAL_METRICS:
            vals = [r.values[m] for r in rs if r.values[m] is not None]
            row[m] = mean(vals)
            row[f"{m}_n"] = len(vals)
        per.append(row)
    xs = [p[axis] for p in per]
    trend, halves = {}, {}
    h = len(per) // 2
    for m in METRICS:
        pairs = [(p[axis], p[m]) for p in per if p[m] is not None]
        fit = linear_fit([a for a, _ in pairs], [b for _, b in pairs]) if pairs else None
        trend[m] = None if fit is None else {"slope": fit.slope, "intercept": fit.intercept, "r2": fit.r2,
                                            "points": fit.n}
        if h >= 1:
            early, late = first_last([p[m] for p in per], h)
            halves[m] = {"early": early, "late": late,
                         "delta": (late - early) if early is not None and late is not None else None}
    modes = sorted({r.memory_mode or "?" for r in rollouts})
    prompts = sorted({r.prompt or "?" for r in rollouts})
    checks = check_integrity(rollouts) + [check_freshness(points, axis)]
    overall = {m: mean(r.score if m == "score" else r.values[m] for r in rollouts) for m in METRICS}
    return {
        "run": name, "axis": axis, "rollouts": len(rollouts), "overall": overall, "rows": len({r.row_id for r in rollouts}),
        "errored": sum(r.errored for r in rollouts), "memory_mode": ",".join(modes), "prompt": ",".join(prompts),
        "per_epoch": per, "halves": {"early": xs[:h], "late": xs[-h:] if h else [], "metrics": halves},
        "trend": trend, "checks": checks, "failed": None,
    }


def compare(treat: dict, ctrl: dict, t_rows: Sequence[Rollout], c_rows: Sequence[Rollout]) -> dict:
    """Treatment vs control: slopes, late-minus-early changes and their differences, per-epoch gaps, and a
    paired score difference over bands both runs saw (same salt and prefix give the same bands)."""
    axis = treat["axis"]
    cmp: dict[str, Any] = {"treatment": treat["run"], "control": ctrl["run"], "metrics": {}}
    for m in METRICS:
        ts, cs = treat["trend"].get(m), ctrl["trend"].get(m)
        th, ch = treat["halves"]["metrics"].get(m, {}), ctrl["halves"]["metrics"].get(m, {})
        td, cd = th.get("delta"), ch.get("delta")
        cmp["metrics"][m] = {
            "treatment_mean": treat["overall"][m], "control_mean": ctrl["overall"][m],
            "treatment_slope": ts and ts["slope"], "control_slope": cs and cs["slope"],
            "slope_difference": (ts["slope"] - cs["slope"]) if ts and cs else None,
            "treatment_delta": td, "control_delta": cd,
            "delta_difference": (td - cd) if td is not None and cd is not None else None,
        }
    c_by = {p[axis]: p for p in ctrl["per_epoch"]}
    cmp["per_epoch"] = [{axis: p[axis], "treatment": p["score"], "control": c_by[p[axis]]["score"],
                         "difference": p["score"] - c_by[p[axis]]["score"]}
                        for p in treat["per_epoch"] if p[axis] in c_by]

    def by_band(rows: Sequence[Rollout]) -> dict[str, float]:
        acc: dict[str, list[float]] = {}
        for r in rows:
            if r.fingerprint:
                acc.setdefault(r.fingerprint, []).append(r.score)
        return {k: m for k, v in acc.items() if (m := mean(v)) is not None}  # v is never empty: m is never None

    tb, cb = by_band(t_rows), by_band(c_rows)
    shared = sorted(set(tb) & set(cb))
    diffs = [tb[k] - cb[k] for k in shared]
    cmp["paired"] = {"shared_bands": len(shared), "mean_difference": mean(diffs), "se": standard_error(diffs)}
    return cmp


def pick_pairs(runs: dict[str, dict], control: str | None) -> list[tuple[str, str]]:
    """(treatment, control) pairs: every other run against ``--control``; without it, two runs are compared
    with the scrambled-memory run (if exactly one) as the control, else the second run."""
    names = list(runs)
    if control is not None:
        if control not in runs:
            raise ReportError(f"--control {control!r} is not a run (runs: {', '.join(names)})")
        return [(n, control) for n in names if n != control]
    if len(names) != 2:
        return []
    scrambled = [n for n in names if runs[n]["memory_mode"] == CONTROL_ECHO]
    if len(scrambled) == 1:
        return [(next(n for n in names if n not in scrambled), scrambled[0])]
    return [(names[0], names[1])]


def _heldout(analyzed: dict[str, dict], rows: dict[str, list[Rollout]], held: dict[str, list[Rollout]], group_by: str,
             pairs: list[tuple[str, str]], notes: list[str]) -> dict[str, Any]:
    """The held-out figures of every run that has them (:mod:`.heldout`: the evaluation rows of a launch, placed at the
    training group in progress when they were scored), and treatment vs control on them."""
    out: dict[str, Any] = {"runs": [], "comparisons": []}
    by, placed = {}, {}
    for name, hs in held.items():
        if analyzed[name]["failed"]:
            continue
        train = assign_x(rows[name], group_by)
        placed[name], note = place(train, hs)
        by[name] = analyze_heldout(name, train, placed[name], note) | {"axis": analyzed[name]["axis"]}
        if note:
            notes.append(f"run {name}: {note}")
        out["runs"].append(by[name])
    out["comparisons"] = [compare_heldout(by[t], by[c], placed[t], placed[c]) for t, c in pairs
                          if t in by and c in by]
    return out


def build_report(runs: dict[str, Loaded], group_by: str, control: str | None, notes: list[str]) -> dict:
    notes = list(notes)
    runs = split_by_model(runs, notes)
    analyzed, rows, held = {}, {}, {}
    for name, ld in runs.items():
        dedupe(ld)
        if not ld.rollouts:
            raise ReportError(f"run {name}: no scored rows (unscored: {ld.incomplete}, malformed: {len(ld.errors)})")
        train = [r for r in ld.rollouts if not r.heldout]
        if train and len(train) < len(ld.rollouts):  # held-out rows beside training rows: reported apart
            held[name] = [r for r in ld.rollouts if r.heldout]
        else:
            train = ld.rollouts  # a run of held-out rows alone is read as any rows
        analyzed[name] = analyze_run(name, train, group_by)
        rows[name] = train
    report: dict[str, Any] = {"group_by": group_by, "notes": notes, "runs": list(analyzed.values())}
    pairs = pick_pairs(analyzed, control)
    for t, c in pairs:
        for name in {t, c}:
            if analyzed[name]["failed"]:
                notes.append(f"run {name} FAILED: not compared")
    report["comparisons"] = [compare(analyzed[t], analyzed[c], rows[t], rows[c]) for t, c in pairs
                             if not (analyzed[t]["failed"] or analyzed[c]["failed"])]
    report["failed"] = {name: a["failed"] for name, a in analyzed.items() if a["failed"]}
    report["skipped"] = {"incomplete": sum(ld.incomplete for ld in runs.values()),
                         "malformed": sum(len(ld.errors) for ld in runs.values()),
                         "duplicates": sum(ld.duplicates for ld in runs.values())}
    report["heldout"] = _heldout(analyzed, rows, held, group_by, pairs, notes)
    report["checks_ok"] = all(c["ok"] for r in [*analyzed.values(), *report["heldout"]["runs"]] for c in r["checks"])
    # the per-epoch analysis (trends, halves, the control comparison's slopes) only where there are epochs
    groups = {p[a["axis"]] for a in analyzed.values() for p in a["per_epoch"]}
    report["epoch_analysis"] = len(groups) >= 2
    report.update(build_table(analyzed, rows, control))
    return report
