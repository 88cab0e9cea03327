"""``echo_history = "policy"``: the model being trained plays a scan episode's earlier scans itself (issue 40,
item 3: training in the distribution the evaluator plays, where the echo is the model's own last report)."""

from __future__ import annotations

import os

import pytest

from spectrum_rft.task.scan_format import parse_scan
from spectrum_rft.training.spectrum.trl_data import grpo_rows, own_prefix_prompt
from spectrum_rft.training.spectrum.trl_env import judge, scan_prompt


def _rows(n: int = 30, **kw) -> list[dict]:
    return grpo_rows(n, prompt="weak", memory_mode="scaffold", salt="own-prefix", prefix="own", episode="scan",
                     scan_in_prompt=True, echo_history="policy", **kw)


def test_the_echo_of_scan_k_is_the_last_report_played_before_it():
    row = next(r for r in _rows() if r["scan"] >= 4)
    k = row["scan"]
    reports = [{"center_freqs": [10.0 + 50 * s, 400.0 + s]} for s in range(1, k - 1)] + [{"center_freqs": [123.0, 456.5]}]
    scan = parse_scan(own_prefix_prompt(row, reports)[-1]["content"])
    assert scan.scan == k and scan.echo == [123.0, 456.5]
    # a turn that wrote no report (None) or one the env refuses leaves the scan skipped: the next echo is empty
    for last in (None, {"center_freqs": [float("nan")]}, {"center_freqs": "junk"}):
        scan = parse_scan(own_prefix_prompt(row, [*reports[:-1], last])[-1]["content"])
        assert scan.scan == k and scan.echo == []


def test_the_dataset_prompt_is_the_first_scan_and_a_row_without_its_prefix_is_refused():
    rows = _rows()
    assert all(parse_scan(r["prompt"][-1]["content"]).scan == 1 for r in rows)
    row = next(r for r in rows if r["scan"] >= 3)
    with pytest.raises(ValueError, match="needs prefix_reports"):
        scan_prompt(row)
    with pytest.raises(ValueError, match="needs prefix_reports"):
        own_prefix_prompt(row, [None])  # one report short


def test_the_judge_replays_the_prefix_the_model_was_shown():
    """A completion that copies the echo of its prompt copies all of it, judged with the row and its prefix."""
    row = next(r for r in _rows() if r["scan"] >= 3)
    reports = [{"center_freqs": [100.0 + 37 * s]} for s in range(1, row["scan"])]
    shown = parse_scan(own_prefix_prompt(row, reports)[-1]["content"]).echo
    message = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "submit_report", "arguments": {"center_freqs": shown}}}]}
    m = judge({**row, "prefix_reports": reports}, message).metrics()
    assert shown and m["echo_copy"] == 1.0 and m["echo_kept"] == len(shown)


def test_sft_and_the_trl_sampler_refuse_the_policy_prefix():
    from spectrum_rft.training.spectrum.trl_run import GrpoConfig, SftConfig

    with pytest.raises(ValueError, match="SFT conversations take a scripted one"):
        SftConfig(echo_history="policy").check()
    with pytest.raises(ValueError, match="pass --sampler group"):
        GrpoConfig(echo_history="policy", sampler="trl").check()
    GrpoConfig(echo_history="policy", sampler="group").check()


@pytest.fixture(scope="module")
def smollm():
    pytest.importorskip("xgrammar")
    from spectrum_rft.training.models import resolve_model_dir
    from spectrum_rft.training.trl_common import load_model, load_tokenizer

    model_dir, _ = resolve_model_dir("smollm2", os.path.expanduser("~/.cache/spectrum-rft"))
    return load_tokenizer(model_dir), load_model(model_dir)


@pytest.mark.parametrize("fast", [True, False])
def test_the_sampler_plays_the_prefix_with_the_model_and_samples_the_group_on_scan_k(smollm, fast):
    """A real SmolLM2 under the grammar: the prefix is its own greedy reports (one per earlier scan), the
    group's prompt is scan k as that prefix left it (the prompt the judge rebuilds from the row and the
    reports), every completion carries the prefix; a scan-1 row has none."""
    from types import SimpleNamespace

    from spectrum_rft.training.spectrum.trl_data import OwnPrefixSampler, scan_sampler

    tok, model = smollm
    rows = [r for r in _rows(40) if r["scan"] == 3][:1] + [r for r in _rows(40) if r["scan"] == 2][:1] + \
        [r for r in _rows(40) if r["scan"] == 1][:1]
    assert len(rows) == 3
    inner = scan_sampler(tok, "scaffold", constrained=True, max_new_tokens=40, vocab_size=model.config.vocab_size)
    sampler = OwnPrefixSampler(inner, _rows(40), tok, fast=fast)  # fast: batched plays, drafted greedy replies
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m),
                              args=SimpleNamespace(temperature=1.0, top_p=1.0, top_k=None))
    prompts = [rows[0]["prompt"]] * 2 + [rows[1]["prompt"]] * 2 + [rows[2]["prompt"]] * 2
    out = sampler(prompts, trainer)
    assert len(out["completion_ids"]) == 6 and len(out["prefix_reports"]) == 6
    for i, row in ((0, rows[0]), (2, rows[1]), (4, rows[2])):
        reports = out["prefix_reports"][i]
        assert out["prefix_reports"][i + 1] == reports and len(reports) == row["scan"] - 1
        shown = own_prefix_prompt(row, reports)
        assert out["prompt_ids"][i] == inner.prompt_ids(shown)
        text = shown[-1]["content"]
        assert parse_scan(text).scan == row["scan"]
        assert all(r is None or isinstance(r.get("center_freqs"), list) for r in reports)  # its own calls' arguments
    with pytest.raises(ValueError, match="none of its rows"):
        sampler([[{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]] * 2, trainer)


def test_the_prefixs_refusals_are_not_the_scans():
    """The model's own prefix may write reports the env refuses; those faults are its earlier scans', not the
    scan being trained: a valid report on scan k has no refusals and no faults."""
    row = next(r for r in _rows() if r["scan"] >= 5)
    bad = [{"center_freqs": [float("nan")]}] * (row["scan"] - 1)
    message = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "submit_report", "arguments": {"center_freqs": [100.0]}}}]}
    m = judge({**row, "prefix_reports": bad}, message).metrics()
    assert m["refusals"] == 0 and m["faults"] == {} and m["scans_skipped"] == 0
    junk = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "submit_report", "arguments": {"center_freqs": "junk"}}}]}
    m = judge({**row, "prefix_reports": bad}, junk).metrics()
    assert m["refusals"] == 1 and m["faults"].get("invalid_report") == 1
