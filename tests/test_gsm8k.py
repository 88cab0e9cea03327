"""GSM8K answer extraction and exact-match scoring (spectrum_gsm8k)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from spectrum_rft.training import gsm8k as gsm


@pytest.mark.parametrize("raw, want", [
    ("18", "18"), ("1,000", "1000"), ("18.", "18"), ("18.0", "18"), ("18.00", "18"), ("$18", "18"),
    ("-5", "-5"), ("0.50", "0.5"), ("3.25", "3.25"), (" 42 ", "42"), ("-0", "0"), ("1,234,567.0", "1234567"),
    (".5", "0.5"),
])
def test_normalize(raw, want):
    assert gsm.normalize(raw) == want


@pytest.mark.parametrize("raw", ["", "abc", "1/2", "1e5", "--3", "3-", None, 18, "1.2.3", "nan", "inf", "#"])
def test_normalize_rejects(raw):
    assert gsm.normalize(raw) is None


@pytest.mark.parametrize("text, want", [
    ("so 9 * 2 = 18\n#### 18", "18"),
    ("#### 5\nwait, actually\n#### 7", "7"),  # the last ####
    ("#### $1,200.", "1200"),
    ("#### The answer is 42 apples (not 41)", "42"),  # first number after the last ####
    ("the answer is \\boxed{72}", "72"),
    ("\\boxed{3} then \\boxed{1,000}", "1000"),  # last boxed
    ("\\boxed{\\frac{1}{2}}", "1"),  # not a plain number: first number inside the box
    ("#### no number here \\boxed{9}", "9"),  # #### without a number falls back to \\boxed
    ("18", None),  # a bare number is not an answer
    ("", None),
    ("\\boxed{unclosed", None),
    (None, None),
])
def test_extract_answer(text, want):
    assert gsm.extract_answer(text) == want


def test_score_exact_match():
    item = {"question": "q", "answer": "work...\n#### 1,000"}
    assert gsm.gold_answer(item) == "1000"
    assert gsm.score("so #### 1000.0", item) == (1.0, "1000")
    assert gsm.score("\\boxed{1000}", item) == (1.0, "1000")
    assert gsm.score("#### 999", item) == (0.0, "999")
    assert gsm.score("I don't know", item) == (0.0, None)


def test_gold_answer_requires_a_number():
    with pytest.raises(ValueError):
        gsm.gold_answer({"question": "q", "answer": "#### none"})


def test_real_data_parses(tmp_path):
    """Every gold answer of the shared GSM8K files parses (skipped when ../shared is absent)."""
    d = gsm.default_data_dir()
    if not (d / "test.jsonl").is_file():
        pytest.skip("../shared/data/gsm8k not present")
    for split in ("train", "test"):
        items = gsm.load_items(d, split)
        assert len(items) > 1000
        assert all(gsm.gold_answer(it) is not None for it in items)
        assert items[0]["id"] == f"gsm8k-{split}-0"


def test_load_items_ids_and_limit(tmp_path):
    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(5)]
    (tmp_path / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    items = gsm.load_items(tmp_path, "test", limit=3)
    assert [it["id"] for it in items] == ["gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-2"]
    assert gsm.item_sha256(items[0]) != gsm.item_sha256(items[1])
    assert gsm.item_sha256(items[0]) == gsm.item_sha256(dict(items[0], id="other"))  # content, not id


# ---- property tests ---------------------------------------------------------------------------------

ints = st.integers(-10**12, 10**12)


@settings(max_examples=200, deadline=None)
@given(ints)
def test_property_integers_round_trip_in_every_spelling(n):
    want = str(n)
    assert gsm.normalize(str(n)) == want
    assert gsm.normalize(f"{n:,}") == want
    assert gsm.normalize(f"{n}.0") == want
    assert gsm.normalize(f"{n}.") == want
    assert gsm.extract_answer(f"blah\n#### {n:,}") == want
    assert gsm.extract_answer(f"so \\boxed{{{n}}}") == want


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_property_normalize_is_idempotent_and_total(s):
    got = gsm.normalize(s)  # never raises
    assert got is None or gsm.normalize(got) == got


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_property_extract_never_raises_and_is_normal(s):
    got = gsm.extract_answer(s)
    assert got is None or gsm.normalize(got) == got


@settings(max_examples=100, deadline=None)
@given(st.decimals(min_value=-10**6, max_value=10**6, places=3, allow_nan=False, allow_infinity=False))
def test_property_decimal_answers_match_their_value(d):
    got = gsm.normalize(str(d))
    assert got is not None
    from decimal import Decimal

    assert Decimal(got) == d
    assert not got.endswith(".") and (("." not in got) or not got.endswith("0"))
