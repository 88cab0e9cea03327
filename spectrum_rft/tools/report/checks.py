"""Integrity checks of a run: GRPO group integrity (one band per row, different bands per row) and
freshness (no band in two epochs)."""

from __future__ import annotations

from typing import Sequence

from .validate import Rollout


def _verdict(unverifiable: str | None, offenders: dict[str, set[str]], what: str, ok_detail: str) -> dict:
    """One check's outcome: unverifiable, failed on ``offenders`` (shown with one example), or passed."""
    if unverifiable:
        return {"ok": False, "detail": unverifiable}
    if offenders:
        ex = next(iter(offenders))
        return {"ok": False, "detail": f"{len(offenders)} {what} (e.g. {ex}: {', '.join(sorted(offenders[ex])[:3])})"}
    return {"ok": True, "detail": ok_detail}


def check_integrity(rollouts: Sequence[Rollout]) -> list[dict]:
    """Group integrity (every rollout of a row shares one band; different rows have different bands)."""
    missing = [r for r in rollouts if r.fingerprint is None]
    by_row: dict[str, set[str]] = {}
    rollouts_per_row: dict[str, int] = {}
    by_fp: dict[str, set[str]] = {}
    for r in rollouts:
        rollouts_per_row[r.row_id] = rollouts_per_row.get(r.row_id, 0) + 1
        if r.fingerprint is not None:
            by_row.setdefault(r.row_id, set()).add(r.fingerprint)
            by_fp.setdefault(r.fingerprint, set()).add(r.row_id)
    unverifiable = (f"{len(missing)} of {len(rollouts)} rollouts carry no band_fingerprint (first: "
                    f"{missing[0].where}): cannot verify") if missing else None
    split = {k: v for k, v in by_row.items() if len(v) > 1}
    counts = sorted(set(rollouts_per_row.values()))
    per_row = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    same = _verdict(unverifiable, split, "rows saw several bands",
                    f"{len(by_row)} rows, {per_row} rollout(s) each" + (": trivially true" if counts == [1] else ""))
    shared = {k: v for k, v in by_fp.items() if len(v) > 1}
    differ = _verdict(unverifiable, shared, "bands shared by different rows",
                      f"{len(by_fp)} distinct bands for {len(by_row)} rows")
    return [{"name": "group integrity (rollouts of a row share one band)", **same},
            {"name": "group integrity (rows differ)", **differ}]


def check_freshness(points: Sequence[tuple[int, Rollout]], axis: str) -> dict:
    """No band fingerprint in more than one epoch (group)."""
    name = f"freshness (no band repeats across {axis}s)"
    missing = [r for _, r in points if r.fingerprint is None]
    if missing:
        return {"name": name, "ok": False, "detail": f"{len(missing)} rollouts carry no band_fingerprint: "
                                                     "cannot verify"}
    where: dict[str, set[int]] = {}
    for x, r in points:
        where.setdefault(r.fingerprint, set()).add(x)  # type: ignore[arg-type]
    xs = {x for x, _ in points}
    repeats = {k: v for k, v in where.items() if len(v) > 1}
    if repeats:
        ex = next(iter(repeats))
        return {"name": name, "ok": False,
                "detail": f"{len(repeats)} of {len(where)} bands repeat across {axis}s (e.g. {ex} in "
                          f"{axis}s {', '.join(map(str, sorted(repeats[ex])[:5]))})"}
    return {"name": name, "ok": True, "detail": f"{len(where)} bands, each in one of {len(xs)} {axis}s"}
