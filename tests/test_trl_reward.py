"""The GRPO reward on the group sampler's path (no TRL environment): each completion is judged by a fresh env
of its row, and that env must be the one the model was shown: the same band, the same scan, and the same
scans played before it (``echo_history``), so the echo the metrics compare with (echo_copy, echo_kept,
carry_rate) is the echo in the prompt."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def tokenizer():
    from spectrum_rft.training.models import resolve_model_dir
    from spectrum_rft.training.trl_common import load_tokenizer

    model_dir, _ = resolve_model_dir("smollm2", os.path.expanduser("~/.cache/spectrum-rft"))
    return load_tokenizer(model_dir)


@pytest.mark.parametrize("history", ["accumulate", "accumulate-12", "memoryless"])
def test_a_report_that_copies_the_echo_it_was_shown_copies_all_of_it(tokenizer, tmp_path, history):
    from spectrum_rft.task.scan_format import parse_scan
    from spectrum_rft.training.spectrum.trl_data import grpo_rows
    from spectrum_rft.training.spectrum.trl_run import make_reward

    rows = [r for r in grpo_rows(40, prompt="weak", memory_mode="scaffold", salt="judge", prefix="j", episode="scan",
                                 scan_in_prompt=True, echo_history=history) if r["scan"] >= 3]
    echoes = [parse_scan(r["prompt"][-1]["content"]).echo for r in rows]
    rows, echoes = zip(*[(r, e) for r, e in zip(rows, echoes) if e])
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}  # what TRL hands a reward function
    completions = [[{"role": "assistant", "content": "",
                     "tool_calls": [{"type": "function", "function": {"name": "submit_report",
                                                                      "arguments": {"center_freqs": list(e)}}}]}]
                   for e in echoes]
    reward = make_reward(tmp_path / "rollouts.jsonl", tokenizer)
    rewards = reward(completions=completions, completion_ids=[[] for _ in rows], **columns)
    recorded = [json.loads(x) for x in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(recorded) == len(rows) >= 5 and len(rewards) == len(rows)
    assert [r["echo_copy"] for r in recorded] == [1.0] * len(rows), [r["echo_copy"] for r in recorded]
    assert [r["echo_kept"] for r in recorded] == [len(e) for e in echoes]
