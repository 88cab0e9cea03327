"""Pure scoring for the spectrum task: exact interval arithmetic, IoUs, rewards and episode metrics.

No I/O and no randomness. Intervals are ``(lo, hi)`` float pairs in MHz; a *merged* list is sorted and
disjoint. Everything is exact (no frequency bins), so a score can be checked by hand. The last section
holds the reference definitions (the IoUs through complement lists) that the tests check the scoring
path against.

Rewards are objects (:class:`Reward`, one entry of :data:`REWARD_TABLE` each: its scoring function, the
sentence the system prompt says about it, its audit bars), selected by name (``REWARDS``); a name that is
not there is an error, never a fallback. A new reward is one entry (``tests/test_reward_objects.py`` runs a
test-only one through every path):

* ``occ_iou``   occupied-spectrum IoU of the report against *all* transmitters (dormant ones included):
                the original experiment's reward. Rewards recalling dormant transmitters.
* ``avail_iou`` CLBench's native metric: IoU of the complements (the free spectrum) inside the band;
                1.0 when both complements are empty. Barely sensitive to memory on a sparse band.
* ``match_iou`` the Jaccard index over transmitters: ``m / (r + t - m)`` with ``r`` reported centres, ``t``
                transmitters and ``m`` the size of a maximum matching of centres to transmitters, a centre
                matching a transmitter whose occupied interval holds it (each at most once). A guess that
                finds nothing, a duplicate, or a jitter-hedging copy of a peak is one more unmatched centre.
* ``default``   an alias for the reward the reward audit (``spectrum-rft audit``) certifies, resolved when a
                config is made so that rows and runs record the definition: ``default-v2`` = ``match_iou``
                (on the ``default-v2`` preset, 720 MHz), ``default-v1`` = ``occ_iou`` (the earlier default,
                on the 480 MHz ``default-v1`` preset). Why the change: docs/ENVIRONMENT.md, "Reward audit".

Why ``match_iou`` resists padding where ``occ_iou`` does not (both are symmetric overlap scores): one
more region raises a score ``J = m / u`` exactly when its chance ``p`` of finding something new satisfies
``p / (1 - p) > J``. Under ``occ_iou`` a random 8 MHz region finds spectrum at the band's occupancy density
(0.2 on 480 MHz, above the memoryless 0.14), and a copy of a peak moved a few MHz finds ~0.37 of its width
(the peak jitter), so both pay. Under ``match_iou`` a copy of a peak finds nothing new unless the peak
itself missed, and a random centre finds a transmitter with chance ~0.12 on 720 MHz, below the memoryless
0.16: every memory-free padding costs.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from spectrum_rft.common.names import resolve_name
from spectrum_rft.common.stats import halves, mean_or

Interval = tuple[float, float]
EPS = 1e-9  # MHz: a union (or free spectrum) shorter than this counts as empty

# --------------------------------------------------------------------------------------------------
# Interval arithmetic
# --------------------------------------------------------------------------------------------------


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint union of ``intervals`` (touching intervals are joined; empty ones dropped)."""
    out: list[list[float]] = []
    for lo, hi in sorted(intervals):
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


def total(merged: Sequence[Interval]) -> float:
    return sum(b - a for a, b in merged)


def intersection(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Length of the intersection of two merged lists (two-pointer sweep)."""
    i = j = 0
    na, nb = len(a), len(b)
    acc = 0.0
    while i < na and j < nb:
        alo, ahi = a[i]
        blo, bhi = b[j]
        lo = alo if alo > blo else blo
        hi = ahi if ahi < bhi else bhi
        if hi > lo:
            acc += hi - lo
        if ahi < bhi:
            i += 1
        else:
            j += 1
    return acc


def iou_from_lengths(inter: float, union: float) -> float:
    """An IoU from its two lengths: ``inter / union`` clipped to [0, 1]; 1.0 when the union is empty
    (nothing to find, nothing claimed)."""
    if union <= EPS:
        return 1.0
    return min(1.0, max(0.0, inter / union))


# --------------------------------------------------------------------------------------------------
# Per-scan scores
# --------------------------------------------------------------------------------------------------


def match_count(centres: Sequence[float], truth: Sequence[Interval]) -> int:
    """Size of a maximum matching of reported centres to transmitters (``(lo, hi)`` occupied intervals), a
    centre matching a transmitter whose closed interval holds it, each used at most once.

    Points against intervals on a line: taking the transmitters by their upper edge and giving each the
    lowest free centre inside it is optimal (the exchange argument of interval scheduling), in
    ``O((r + t) log r)``. On presets whose transmitters are further apart than their width a centre lies
    in at most one interval and this is simply the number of transmitters holding a centre.
    """
    cs = sorted(centres)
    if not cs or not truth:
        return 0
    taken = [False] * len(cs)
    nxt = list(range(len(cs) + 1))  # nxt[i]: the first untaken index >= i (path-halving union-find)

    def first_free(i: int) -> int:
        while nxt[i] != i:
            nxt[i] = nxt[nxt[i]]
            i = nxt[i]
        return i

    m = 0
    for lo, hi in sorted(truth, key=lambda iv: (iv[1], iv[0])):
        i = first_free(bisect_left(cs, lo))
        if i < len(cs) and cs[i] <= hi:
            taken[i] = True
            nxt[i] = i + 1
            m += 1
    return m


def match_iou(centres: Sequence[float], truth: Sequence[Interval]) -> float:
    """Jaccard index over transmitters (``match_iou``): ``m / (r + t - m)``; 1.0 when nothing is there and
    nothing is reported."""
    r, t = len(centres), len(truth)
    if r + t == 0:
        return 1.0
    m = match_count(centres, truth)
    return m / (r + t - m)


@dataclass(frozen=True, slots=True)
class ScanScore:
    """Every score of one report: the three overlap measures (recorded for every report, whatever the reward)
    and, for a reward that reads more, the reported centres and the transmitters' occupied intervals."""

    occ: float
    avail: float
    match: float = 0.0
    centres: Sequence[float] = ()  # the caller's sequences, not copies: scoring is the env's hot path
    truth: Sequence[Interval] = ()

    def reward(self, name: str) -> float:
        """The score of reward ``name`` (an alias resolved: :func:`resolve_reward`)."""
        return reward_of(name).score(self)


def score_scan(report_merged: Sequence[Interval], truth_merged: Sequence[Interval], band: Interval, *,
               centres: Sequence[float], truth: Sequence[Interval]) -> ScanScore:
    """Every score of one report: both IoUs from lengths alone (both lists merged and clipped to the band),
    and ``match_iou`` from the reported ``centres`` and the transmitters' intervals ``truth`` (one each).

    With ``I = |R & T|``, the free spectra intersect in ``B - |R| - |T| + I`` and unite in ``B - I``,
    so the available-IoU needs no complement lists (same value as :func:`avail_iou`).
    """
    inter = intersection(report_merged, truth_merged)
    r, t = total(report_merged), total(truth_merged)
    union = r + t - inter
    width = band[1] - band[0]
    return ScanScore(iou_from_lengths(inter, union), iou_from_lengths(width - union, width - inter),
                     match_iou(centres, truth), centres, truth)


@dataclass(frozen=True)
class AuditBars:
    """What ``spectrum-rft audit`` holds a reward to (``baselines.audit.audit_checks``): the memoryless
    report scores at most ``memoryless_max``; accumulation beats it by ``memory_bar`` x; no memory-free
    policy beats it by more than ``free_bar`` x (the aim: ``free_aim`` x); the privileged oracle scores 1."""

    memoryless_max: float = 0.2
    memory_bar: float = 3.0
    free_bar: float = 1.25
    free_aim: float = 1.05


@dataclass(frozen=True)
class Reward:
    """One reward (the module docstring describes the built-in ones)."""

    name: str
    score: Callable[[ScanScore], float]  # a report's reward from its scores, in [0, 1]
    prompt: str = ""  # what the system prompt adds about how a report is scored ("" for nothing)
    audit: AuditBars = AuditBars()


# The definitions, then the versioned names of the default (an alias never changes meaning once released;
# ``default`` moves to the newest version).
REWARD_TABLE: dict[str, Reward] = {r.name: r for r in (
    Reward("occ_iou", lambda s: s.occ),
    Reward("avail_iou", lambda s: s.avail),
    Reward("match_iou", lambda s: s.match,
           prompt="Each transmitter counts once, when a reported centre lies within its occupied region; every "
                  "other reported centre (a guess, or a second one on the same transmitter) lowers the score."),
)}
REWARD_DEFINITIONS: tuple[str, ...] = tuple(REWARD_TABLE)  # the built-in definitions' names
REWARD_ALIASES = {"default": "match_iou", "default-v2": "match_iou", "default-v1": "occ_iou"}
REWARDS = (*REWARD_ALIASES, *REWARD_DEFINITIONS)


def resolve_reward(name: str) -> str:
    """The definition a reward name stands for (``default`` -> ``match_iou``); an error for unknown names."""
    return resolve_name("reward", name, REWARD_TABLE, REWARD_ALIASES)


def reward_of(name: str) -> Reward:
    """The reward a name stands for (an alias resolved); a one-line ValueError naming the choices otherwise."""
    return REWARD_TABLE[resolve_reward(name)]


check_reward = resolve_reward  # the earlier name, kept for callers and the design card's spectrum_reward


def report_intervals(centres: Sequence[float], widths: Sequence[float], band: Interval) -> list[Interval]:
    """``regions`` clipped to the band and merged (the hot path of scoring a report)."""
    blo, bhi = band
    return merge([(max(c - 0.5 * w, blo), min(c + 0.5 * w, bhi)) for c, w in zip(centres, widths)])


def coverage(intervals: Sequence[Interval], merged: Sequence[Interval]) -> list[float]:
    """Covered fraction of each of ``intervals`` (sorted by start, possibly overlapping) by a merged
    list, in one forward sweep."""
    out = []
    j0 = 0
    m = len(merged)
    for lo, hi in intervals:
        while j0 < m and merged[j0][1] <= lo:
            j0 += 1
        acc = 0.0
        j = j0
        while j < m and merged[j][0] < hi:
            a, b = merged[j]
            a = a if a > lo else lo
            b = b if b < hi else hi
            if b > a:
                acc += b - a
            j += 1
        out.append(acc / (hi - lo) if hi > lo else 0.0)
    return out


# --------------------------------------------------------------------------------------------------
# Episode metrics
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class ScanRecord:
    """What the environment recorded for one scan (the authoritative per-scan data), built by keyword."""

    scan: int  # 1-based
    reward: float
    occ: float
    avail: float
    skipped: bool
    report_size: int
    dormant_eligible: int  # transmitters seen in an earlier scan and dormant now
    dormant_covered: int  # ... of which the report covers >= half
    carry_prev: int  # regions in the previous report
    carry_kept: int  # ... of which this report keeps (within the carry tolerance)
    echo_shown: int = 0  # centres of the memory echo shown with this scan (scaffold: the true previous report;
    #                      scrambled: seeded random centres): the same quantity in both arms
    echo_kept: int = 0  # ... of which this report reproduces (within the carry tolerance, half a width)
    match: float = 0.0  # match_iou of the report (whatever the reward; a diagnostic beside occ and avail)
    current_part: float = 0.0  # the reward of the report's centres near a current peak alone (see beyond_current)
    peaks_added: int = 0  # the report's centres on one of this scan's peaks that the echo did not hold: what it added
    echo_kept_beyond: int = 0  # echoed centres the report reproduces that lie off every current peak (> half a width): kept from memory alone

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


# Every episode metric, once, with what it means: what episode_metrics returns, in its order. The tables, logs and
# reports of the other layers show a selection of these (metric_names checks each name against this list).
EPISODE_METRICS: dict[str, str] = {
    "score": "the mean per-scan reward over every scan (skipped ones score an empty report): the reward",
    "mean_occ": "mean occupied-spectrum IoU (diagnostic)",
    "mean_avail": "mean available-spectrum IoU, CLBench's metric (diagnostic)",
    "mean_match": "mean match_iou (diagnostic)",
    "beyond_current": "mean reward beyond what the report's centres at the scan's own peaks earn: memory's part",
    "early_mean": "mean reward over the first half of the scans",
    "late_mean": "mean reward over the second half of the scans",
    "memory_gain": "late_mean - early_mean (tracked, never rewarded)",
    "scans_completed": "scans the model reported",
    "scans_skipped": "scans scored as an empty report (no valid report in the call budget, or a failed model call)",
    "dormant_recall": "share of transmitters seen before and dormant now that the report covers",
    "carry_rate": "share of the previous report's regions the report keeps",
    "echo_copy": "share of the echoed centres the report reproduces",
    "report_size": "mean number of reported centres",
}


def metric_names(*names: str) -> tuple[str, ...]:
    """``names``, each checked against :data:`EPISODE_METRICS` (a ValueError for one that is not an episode metric):
    how another layer declares the metrics it shows."""
    unknown = [n for n in names if n not in EPISODE_METRICS]
    if unknown:
        raise ValueError(f"not episode metrics: {', '.join(unknown)}; see spectrum_rft.task.reward.EPISODE_METRICS")
    return names


def episode_metrics(records: Sequence[ScanRecord]) -> dict:
    """Aggregate per-scan records (one per scan of the episode, skipped ones included) into metrics.

    The environment pads an unfinished episode with skipped empty reports before calling this, so every
    mean is over all scans and abstaining never raises a score.
    """
    rewards = [r.reward for r in records]
    early, late = halves(rewards)
    eligible = sum(r.dormant_eligible for r in records)
    prev = sum(r.carry_prev for r in records)
    shown = sum(r.echo_shown for r in records)
    return {
        "score": mean_or(rewards, 0.0),
        "mean_occ": mean_or([r.occ for r in records], 0.0),
        "mean_avail": mean_or([r.avail for r in records], 0.0),
        "mean_match": mean_or([r.match for r in records], 0.0),
        # what a report earns beyond its centres at the scan's own peaks: memory's part (or a guess's); 0 for
        # the memoryless report by construction
        "beyond_current": mean_or([r.reward - r.current_part for r in records], 0.0),
        "early_mean": early,
        "late_mean": late,
        "memory_gain": (late - early) if early is not None and late is not None else None,
        "scans_completed": sum(1 for r in records if not r.skipped),
        "scans_skipped": sum(1 for r in records if r.skipped),
        "dormant_recall": (sum(r.dormant_covered for r in records) / eligible) if eligible else None,
        "carry_rate": (sum(r.carry_kept for r in records) / prev) if prev else None,
        "echo_copy": (sum(r.echo_kept for r in records) / shown) if shown else None,
        "report_size": mean_or([r.report_size for r in records], 0.0),
    }


def is_finite_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# --------------------------------------------------------------------------------------------------
# The reference definitions: the IoUs written the obvious way (interval and complement lists). The scoring
# path (:func:`score_scan`, :func:`report_intervals`) computes the same values from lengths alone;
# tests/test_reward.py checks it against these. Public through ``spectrum_reward`` (the design card).
# --------------------------------------------------------------------------------------------------


def regions(centres: Sequence[float], widths: Sequence[float] | float) -> list[Interval]:
    """Turn centres and widths (one width or one per centre) into ``(lo, hi)`` intervals."""
    if isinstance(widths, (int, float)):
        h = 0.5 * float(widths)
        return [(c - h, c + h) for c in centres]
    return [(c - 0.5 * w, c + 0.5 * w) for c, w in zip(centres, widths, strict=True)]


def clip(merged: Sequence[Interval], lo: float, hi: float) -> list[Interval]:
    """Restrict a merged list to ``[lo, hi]``."""
    out = []
    for a, b in merged:
        a2, b2 = max(a, lo), min(b, hi)
        if b2 > a2:
            out.append((a2, b2))
    return out


def complement(merged: Sequence[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of ``[lo, hi]`` not covered by a merged list."""
    out = []
    cur = lo
    for a, b in merged:
        if a > cur:
            out.append((cur, min(a, hi)))
        cur = max(cur, b)
        if cur >= hi:
            break
    if cur < hi:
        out.append((cur, hi))
    return [(a, b) for a, b in out if b > a]


def iou(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """IoU of two merged lists; 1.0 when both are empty (nothing to find, nothing claimed)."""
    inter = intersection(a, b)
    return iou_from_lengths(inter, total(a) + total(b) - inter)


def occ_iou(report: Sequence[Interval], truth: Sequence[Interval], band: Interval) -> float:
    """Occupied-spectrum IoU: report vs all transmitters, both clipped to the band."""
    return iou(clip(merge(report), *band), clip(merge(truth), *band))


def avail_iou(report: Sequence[Interval], truth: Sequence[Interval], band: Interval) -> float:
    """Available-spectrum IoU (CLBench): IoU of the complements inside the band."""
    lo, hi = band
    r = complement(clip(merge(report), lo, hi), lo, hi)
    t = complement(clip(merge(truth), lo, hi), lo, hi)
    return iou(r, t)
