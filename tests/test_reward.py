"""Interval arithmetic and IoUs: hand-computed cases and hypothesis properties."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.task import reward as sr

BAND = (0.0, 100.0)

coord = st.floats(min_value=-20, max_value=120, allow_nan=False, allow_infinity=False)
interval = st.tuples(coord, coord).map(lambda t: (min(t), max(t)))
intervals = st.lists(interval, max_size=12)


def brute_length(ivs, lo=-50.0, hi=150.0, step=0.01):
    """Reference measure on a fine grid (only for property checks, with a tolerance)."""
    n = int((hi - lo) / step)
    return sum(step for k in range(n) if any(a <= lo + (k + 0.5) * step < b for a, b in ivs))


def test_hand_computed_occ_iou():
    truth = [(10.0, 18.0), (40.0, 48.0)]  # 16 MHz occupied
    report = [(14.0, 22.0)]  # overlaps 4 MHz of the first
    # union = 16 + 8 - 4 = 20
    assert sr.occ_iou(report, truth, BAND) == pytest.approx(4 / 20)
    assert sr.occ_iou(truth, truth, BAND) == 1.0
    assert sr.occ_iou([], truth, BAND) == 0.0


def test_hand_computed_avail_iou():
    truth = [(10.0, 18.0), (40.0, 48.0)]  # free = 84
    report = [(14.0, 22.0)]  # report's free = 92; free-intersection = 100 - 20 = 80; free-union = 100 - 4 = 96
    assert sr.avail_iou(report, truth, BAND) == pytest.approx(80 / 96)
    assert sr.avail_iou([], [], BAND) == 1.0
    assert sr.avail_iou([BAND], [BAND], BAND) == 1.0  # both complements empty


def test_merge_clip_complement_cases():
    assert sr.merge([(5, 10), (0, 3), (2, 6), (20, 20)]) == [(0, 10)]
    assert sr.merge([(0, 1), (1, 2)]) == [(0, 2)]  # touching intervals join
    assert sr.clip([(-5, 5), (95, 105)], 0, 100) == [(0, 5), (95, 100)]
    assert sr.complement([(0, 5), (95, 100)], 0, 100) == [(5, 95)]
    assert sr.complement([], 0, 100) == [(0, 100)]
    assert sr.intersection([(0, 10), (20, 30)], [(5, 25)]) == 10


def test_episode_metrics_halves_and_gain():
    recs = [sr.ScanRecord(scan=i + 1, reward=r, occ=r, avail=0.5, skipped=False, report_size=1, dormant_eligible=0,
                          dormant_covered=0, carry_prev=0, carry_kept=0) for i, r in enumerate([0.1, 0.2, 0.3, 0.5, 0.7])]
    m = sr.episode_metrics(recs)
    assert m["early_mean"] == pytest.approx(0.15) and m["late_mean"] == pytest.approx(0.6)
    assert m["memory_gain"] == pytest.approx(0.45)
    assert m["score"] == pytest.approx(sum([0.1, 0.2, 0.3, 0.5, 0.7]) / 5)
    one = sr.episode_metrics(recs[:1])
    assert one["memory_gain"] is None and one["early_mean"] is None


def test_halves_are_the_common_means():
    """The early/late halves come from common.stats (the one mean: exact summation, the middle value of an
    odd count in neither half); an episode with no scans scores 0."""
    from spectrum_rft.common.stats import halves, mean  # noqa: PLC0415

    xs = [0.1, 0.2, 0.3, 0.5, 0.7]
    assert halves(xs) == (mean(xs[:2]), mean(xs[-2:])) and halves([1.0]) == (None, None)
    assert sr.halves is halves
    assert sr.episode_metrics([])["score"] == 0.0 and sr.episode_metrics([])["report_size"] == 0.0


def test_the_scoring_path_equals_the_reference_definitions_on_edge_cases():
    """score_scan (lengths alone) against occ_iou/avail_iou (the reference): empty, whole band, disjoint."""
    for report, truth in [([], []), ([BAND], [BAND]), ([(0, 10)], [(50, 60)]), ([], [(10, 20)]), ([BAND], [])]:
        sc = sr.score_scan(sr.merge(report), sr.merge(truth), BAND, centres=[], truth=truth)
        assert (sc.occ, sc.avail) == (sr.occ_iou(report, truth, BAND), sr.avail_iou(report, truth, BAND))
        assert sc.match == (1.0 if not truth else 0.0)


def test_reward_names_resolve_to_their_definitions():
    """``default`` moves with the versions, each version keeps its meaning, a definition is itself."""
    assert sr.check_reward("default") == sr.resolve_reward("default-v2") == "match_iou"
    assert sr.resolve_reward("default-v1") == "occ_iou"
    assert all(sr.resolve_reward(n) == n for n in sr.REWARD_DEFINITIONS)
    for bad in ("occ", "", None, 3, ["default"]):
        with pytest.raises(ValueError, match="unknown reward|must be a name"):
            sr.check_reward(bad)
    sc = sr.ScanScore(0.1, 0.2, 0.3)
    assert (sc.reward("default"), sc.reward("default-v1"), sc.reward("avail_iou")) == (0.3, 0.1, 0.2)


def test_hand_computed_match_iou():
    truth = [(10.0, 18.0), (40.0, 48.0), (60.0, 68.0)]
    # 15 finds the first, 16 is a second centre on it, 44 finds the second, 90 finds nothing: m = 2 of 4 + 3 - 2
    assert sr.match_count([15.0, 16.0, 44.0, 90.0], truth) == 2
    assert sr.match_iou([15.0, 16.0, 44.0, 90.0], truth) == pytest.approx(2 / 5)
    assert sr.match_iou([14.0, 44.0, 64.0], truth) == 1.0
    assert sr.match_iou([18.0, 40.0], truth) == pytest.approx(2 / 3)  # the edges are inside (closed)
    assert sr.match_iou([], truth) == 0.0 and sr.match_iou([], []) == 1.0 and sr.match_iou([5.0], []) == 0.0
    # overlapping transmitters (a variable-width preset): one centre serves one transmitter only
    assert sr.match_count([12.0], [(10.0, 20.0), (11.0, 13.0)]) == 1
    assert sr.match_count([12.0, 19.0], [(10.0, 20.0), (11.0, 13.0)]) == 2  # the greedy finds the better pairing


@given(intervals)
def test_merge_is_sorted_disjoint_and_preserves_measure(ivs):
    m = sr.merge(ivs)
    assert all(a < b for a, b in m)
    assert all(m[i][1] < m[i + 1][0] for i in range(len(m) - 1))
    assert sr.merge(m) == m
    assert sr.total(m) <= sum(b - a for a, b in ivs if b > a) + 1e-9


@settings(max_examples=40, deadline=None)
@given(intervals)
def test_merge_measure_matches_grid(ivs):
    assert sr.total(sr.merge(ivs)) == pytest.approx(brute_length(ivs), abs=0.02 * (len(ivs) + 1))


@given(intervals, intervals)
def test_iou_bounds_symmetry_identity(a, b):
    ma, mb = sr.merge(a), sr.merge(b)
    v = sr.iou(ma, mb)
    assert 0.0 <= v <= 1.0
    assert v == pytest.approx(sr.iou(mb, ma))
    assert sr.iou(ma, ma) == 1.0
    assert 0.0 <= sr.occ_iou(a, b, BAND) <= 1.0
    assert 0.0 <= sr.avail_iou(a, b, BAND) <= 1.0


grid = st.integers(-160, 960).map(lambda k: k / 8)  # exact in binary: no cancellation noise
grid_intervals = st.lists(st.tuples(grid, grid).map(lambda t: (min(t), max(t))), max_size=12)


@given(grid_intervals, grid_intervals)
def test_score_scan_matches_the_complement_definitions(report, truth):
    r = sr.clip(sr.merge(report), *BAND)
    t = sr.clip(sr.merge(truth), *BAND)
    sc = sr.score_scan(r, t, BAND, centres=[], truth=truth)
    assert sc.occ == pytest.approx(sr.occ_iou(report, truth, BAND), abs=1e-9)
    assert sc.avail == pytest.approx(sr.avail_iou(report, truth, BAND), abs=1e-9)


@given(st.lists(st.tuples(coord, st.floats(0.1, 30)), max_size=16))
def test_report_intervals_equals_regions_clip_merge(pairs):
    cs, ws = [c for c, _ in pairs], [w for _, w in pairs]
    fast = sr.report_intervals(cs, ws, BAND)
    slow = sr.merge(sr.clip(sr.merge(sr.regions(cs, ws)), *BAND))
    assert len(fast) == len(slow)
    for (a, b), (c, d) in zip(fast, slow):
        assert a == pytest.approx(c) and b == pytest.approx(d)


@given(st.lists(interval, max_size=8), intervals)
def test_coverage_sweep_equals_pointwise(targets, report):
    m = sr.merge(report)
    targets = sorted(targets)
    got = sr.coverage(targets, m)
    for (lo, hi), g in zip(targets, got):
        want = sr.intersection([(lo, hi)], m) / (hi - lo) if hi > lo else 0.0  # the direct definition
        assert g == pytest.approx(want, abs=1e-9)
        assert 0.0 <= g <= 1.0 + 1e-12


def test_is_finite_number():
    assert sr.is_finite_number(1) and sr.is_finite_number(2.5)
    for bad in (math.nan, math.inf, -math.inf, True, "1", None, [1]):
        assert not sr.is_finite_number(bad)


# --------------------------------------------------------------------------------------------------
# match_iou: a maximum matching (checked against brute force) and the padding rule
# --------------------------------------------------------------------------------------------------

small = st.integers(0, 40).map(lambda k: k / 2)
truth_ivs = st.lists(st.tuples(small, st.integers(0, 12).map(lambda k: k / 2)).map(lambda t: (t[0], t[0] + t[1])),
                     max_size=6)


def brute_matching(centres, truth):
    """The maximum matching by augmenting paths (Kuhn's algorithm): the reference for the greedy."""
    owner: dict[int, int] = {}

    def augment(t, seen):
        for i, c in enumerate(centres):
            if truth[t][0] <= c <= truth[t][1] and i not in seen:
                seen.add(i)
                if i not in owner or augment(owner[i], seen):
                    owner[i] = t
                    return True
        return False

    return sum(augment(t, set()) for t in range(len(truth)))


@settings(max_examples=300)
@given(st.lists(small, max_size=8), truth_ivs)
def test_match_count_is_a_maximum_matching(centres, truth):
    m = sr.match_count(centres, truth)
    assert m == brute_matching(centres, truth)
    assert 0 <= m <= min(len(centres), len(truth))
    assert sr.match_count(list(reversed(centres)), list(reversed(truth))) == m  # order does not matter
    v = sr.match_iou(centres, truth)
    assert 0.0 <= v <= 1.0


# Transmitters as the presets draw them: 8 MHz wide, >= 10 MHz apart (no centre lies in two of them).
band_truth = st.lists(st.integers(0, 60), min_size=1, max_size=14, unique=True).map(
    lambda ks: [(10.0 * k + 4.0, 10.0 * k + 12.0) for k in sorted(ks)])


def _free(truth, x):
    return not any(lo <= x <= hi for lo, hi in truth)


@settings(max_examples=200)
@given(band_truth, st.lists(st.floats(0, 620, allow_nan=False), max_size=10), st.floats(0, 620, allow_nan=False))
def test_padding_rule_a_centre_that_finds_nothing_new_never_raises_match_iou(truth, centres, extra):
    """The padding rule: a further centre raises the score only by finding a transmitter no other centre
    found. A guess that lands on nothing, a duplicate of a reported centre, or a second centre on a found
    transmitter strictly lowers it."""
    before = sr.match_iou(centres, truth)
    found_before = sr.match_count(centres, truth)
    after = sr.match_iou(centres + [extra], truth)
    if sr.match_count(centres + [extra], truth) == found_before:
        assert after < before or before == 0.0 == after
    else:
        assert after > before
    if centres:
        assert sr.match_iou(centres + [centres[0]], truth) < before or before == 0.0


@settings(max_examples=200)
@given(band_truth, st.lists(st.floats(0, 620, allow_nan=False), max_size=10), st.floats(0.0, 1.0))
def test_padding_pays_exactly_when_its_hit_chance_beats_the_score(truth, centres, p):
    """The arithmetic behind the audit: one more centre that finds a new transmitter with chance ``p``
    raises the expected score exactly when ``p / (1 - p) > m / (u + 1)`` (the score before is J = m / u: a
    hit gives (m + 1) / u, a miss m / (u + 1); so roughly when the odds of a hit beat the score, a little
    sooner). Hypothesis found the earlier claim, ``p / (1 - p) > J``, wrong: m = 1, u = 11, p = 0.078."""
    m = sr.match_count(centres, truth)
    u = len(centres) + len(truth) - m
    before = m / u
    expected = p * (m + 1) / u + (1 - p) * m / (u + 1)  # a hit adds to m and leaves u; a miss adds to u
    if p < 1.0 and abs(p / (1 - p) - m / (u + 1)) > 1e-9:
        assert (expected > before) == (p / (1 - p) > m / (u + 1))
    # a real hit (a free transmitter's centre) and a real miss move the score as the two branches say
    free = [(lo + hi) / 2 for lo, hi in truth if all(not lo <= c <= hi for c in centres)]
    if free:
        assert sr.match_iou(centres + [free[0]], truth) == pytest.approx((m + 1) / u)
    miss = next((x for x in (-100.0, 1000.0) if _free(truth, x)), None)
    assert sr.match_iou(centres + [miss], truth) == pytest.approx(m / (u + 1))


def test_one_list_of_episode_metrics():
    """EPISODE_METRICS names exactly what episode_metrics returns, in order; every other layer's list is a
    selection checked against it (metric_names), and a name that is not there is an error."""
    rec = sr.ScanRecord(scan=1, reward=0.5, occ=0.5, avail=0.5, skipped=False, report_size=1, dormant_eligible=0,
                        dormant_covered=0, carry_prev=0, carry_kept=0)
    assert list(sr.episode_metrics([rec, rec])) == list(sr.EPISODE_METRICS)
    from spectrum_rft.tools.evaluation.summary import METRICS
    from spectrum_rft.tools.report.validate import TABLE_METRICS
    from spectrum_rft.training.spectrum.trl_env import LOGGED_METRICS

    assert set(METRICS) | set(TABLE_METRICS) <= set(sr.EPISODE_METRICS)
    assert set(LOGGED_METRICS) - set(sr.EPISODE_METRICS) == {"gain_vs_memoryless"}  # the scan episode's own
    with pytest.raises(ValueError, match="not episode metrics: memory_gian"):
        sr.metric_names("score", "memory_gian")
