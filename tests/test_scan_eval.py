"""``spectrum-rft scan-eval --compare``: paired differences between checkpoints evaluated on the same scans."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.training.spectrum import scan_eval as S


def _result(scores, echo=None, arm="weak-scaffold", rows=None):
    echo = echo if echo is not None else [None] * len(scores)
    rows = rows or [f"r{i}" for i in range(len(scores))]
    records = [{"row_id": r, "scan": 3, "valid": e is not None, "score": s, "gain_vs_memoryless": s - 0.1,
                "gain_valid": s - 0.1 if e is not None else None, "echo_copy": e}
               for r, s, e in zip(rows, scores, echo)]
    return {"arm": arm, "scans": len(records), "records": records}


unit = st.floats(0, 1, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(unit, unit), min_size=2, max_size=40))
def test_paired_difference_is_the_mean_and_se_of_per_scan_differences(pairs):
    base, other = _result([p[0] for p in pairs]), _result([p[1] for p in pairs])
    d = S.paired_difference(base, other)["score"]
    diffs = [o - b for b, o in pairs]
    assert d["n"] == len(pairs)
    assert math.isclose(d["mean"], math.fsum(diffs) / len(diffs), abs_tol=1e-12)
    assert math.isclose(d["se"], statistics.stdev(diffs) / math.sqrt(len(diffs)), rel_tol=1e-9, abs_tol=1e-12)


def test_pairs_by_row_not_by_position_and_skips_missing_echo():
    base = _result([0.1, 0.5, 0.2], echo=[0.5, None, 1.0], rows=["a", "b", "c"])
    other = _result([0.9, 0.2, 0.2], echo=[1.0, 0.5, None], rows=["b", "a", "c"])  # b, a swapped
    d = S.paired_difference(base, other)
    assert d["score"]["mean"] == pytest.approx(((0.2 - 0.1) + (0.9 - 0.5) + 0.0) / 3)
    assert d["echo_copy"] == {"mean": 0.0, "se": None, "n": 1}  # only row a has an echo_copy in both: 0.5 vs 0.5


def test_other_scans_or_arm_are_refused():
    with pytest.raises(S.Unpaired, match="not the same scans: 2 unmatched"):
        S.paired_difference(_result([0.1, 0.2]), _result([0.1, 0.2], rows=["r0", "x"]))
    with pytest.raises(S.Unpaired, match="arms weak-scaffold / weak-scrambled"):
        S.paired_difference(_result([0.1]), _result([0.1], arm="weak-scrambled"))


def test_compare_command(tmp_path, capsys):
    paths = []
    for name, scores in [("base", [0.1, 0.2, 0.3]), ("a", [0.2, 0.4, 0.3]), ("other", [0.1, 0.2])]:
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps({"model": name, "results": [_result(scores)]}))
        paths.append(str(p))
    assert S.main(["--compare", paths[0], paths[1]]) == 0
    out = capsys.readouterr().out
    assert "3 scans, arm weak-scaffold" in out and "score +0.100 +- 0.058 (3)" in out
    assert S.main(["--compare", paths[0], paths[2]]) == 2
    assert "not the same scans" in capsys.readouterr().err
    assert S.main(["--compare", paths[0], str(tmp_path / "missing.json")]) == 2
    with pytest.raises(SystemExit) as e:
        S.main(["--compare", paths[0]])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        S.main([])
    assert e.value.code == 2
