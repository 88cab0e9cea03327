"""GSM8K answer extraction and exact-match scoring (spectrum_gsm8k)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from spectrum_rft.training.gsm8k import data as gsm

FIXTURE = Path(__file__).parent.parent / "fixtures" / "gsm8k"  # a tiny GSM8K-format copy (see its README.md)


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


@pytest.mark.parametrize("split, n", [("train", 16), ("test", 8)])
def test_fixture_loads_and_parses(split, n):
    """The fixture loads through --data DIR with GSM8K's ids, every gold answer parses, and every
    ``<<expression=value>>`` calculator annotation is right."""
    items = gsm.load_split(split, FIXTURE)
    assert [it["id"] for it in items] == [f"gsm8k-{split}-{i}" for i in range(n)]
    assert all(set(it) == {"id", "question", "answer"} for it in items)
    assert all(gsm.gold_answer(it) is not None for it in items)
    assert gsm.load_split(split, str(FIXTURE), limit=3) == items[:3]
    for it in items:
        for expr, value in re.findall(r"<<([0-9+\-*/(). ]+)=([^>]+)>>", it["answer"]):
            assert abs(eval(expr, {"__builtins__": {}}) - float(value)) < 1e-9, (it["id"], expr, value)


def test_default_source_is_hugging_face(monkeypatch):
    """Without a data folder the items come from datasets.load_dataset("openai/gsm8k", "main", split=...)."""
    import datasets

    calls = []
    rows = [{"question": "q0", "answer": "so\n#### 1,000"}, {"question": "q1", "answer": "#### 7"},
            {"question": "q2", "answer": "#### 2.50"}]

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return list(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    items = gsm.load_split("test")
    assert calls == [(("openai/gsm8k", "main"), {"split": "test"})]
    assert [it["id"] for it in items] == ["gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-2"]
    assert [it["question"] for it in items] == ["q0", "q1", "q2"]
    assert [gsm.gold_answer(it) for it in items] == ["1000", "7", "2.5"]
    assert gsm.load_split("train", None, limit=2) == [
        {"id": "gsm8k-train-0", "question": "q0", "answer": "so\n#### 1,000"},
        {"id": "gsm8k-train-1", "question": "q1", "answer": "#### 7"}]
    assert calls[-1] == (("openai/gsm8k", "main"), {"split": "train"})
    assert gsm.source_name(None) == "hf:openai/gsm8k/main" and gsm.source_name(FIXTURE) == "local"


def test_default_source_failure_names_data_flag(monkeypatch):
    """No network (or any other failure of the Hugging Face load): a RuntimeError that says to use --data DIR."""
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match=r"--data DIR") as err:
        gsm.load_split("train")
    assert "openai/gsm8k" in str(err.value) and "offline" in str(err.value)
    assert isinstance(err.value.__cause__, ConnectionError)


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
