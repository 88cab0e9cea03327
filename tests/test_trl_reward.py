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


def test_rejudge_rewrites_the_echo_metrics_of_a_record_judged_the_old_way(tmp_path):
    """scripts/rejudge_rollouts.py: a record whose echo metrics were judged against the memoryless prefix (the
    bug) gets those of the prefix the model was shown; scores are unchanged and checked; the run is untouched."""
    import dataclasses
    import importlib.util
    from pathlib import Path

    from spectrum_rft.task.scan_format import parse_scan
    from spectrum_rft.training.spectrum.trl_env import judge
    from spectrum_rft.training.spectrum.trl_run import GrpoConfig, training_rows

    cfg = GrpoConfig(steps=3, prompts=4, sampler="group", echo_history="accumulate", salt="rejudge", seed=7)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({**dataclasses.asdict(cfg), "memory_mode": cfg.mode}))
    records, shown = [], []
    for row in training_rows(cfg):
        echo = parse_scan(row["prompt"][-1]["content"]).echo or [1.0]
        shown.append(len(echo))
        report = echo[:1]  # the oldest centre the echo holds: 1 of len(echo) copied
        message = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "submit_report", "arguments": {"center_freqs": report}}}]}
        old = judge({k: row[k] for k in ("row_id", "scan", "environment_context")}, message).metrics()
        records.append({"row_id": row["row_id"], "scan": row["scan"], "step": 0, "reward": old["score"],
                        "score": old["score"], "echo_copy": old["echo_copy"], "carry_rate": old["carry_rate"],
                        "calls": [{"name": "submit_report", "arguments": {"center_freqs": report}}]})
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    before = (run / "rollouts.jsonl").read_text()
    spec = importlib.util.spec_from_file_location("rejudge", Path(__file__).resolve().parents[1] / "scripts" /
                                                  "rejudge_rollouts.py")
    rejudge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rejudge)
    n, changed = rejudge.rejudge(run, tmp_path / "out")
    fixed = [json.loads(x) for x in (tmp_path / "out" / "rollouts.jsonl").read_text().splitlines()]
    assert n == 12 and changed > 0 and (run / "rollouts.jsonl").read_text() == before
    copied = [(r["echo_copy"], k) for r, k in zip(fixed, shown) if r["echo_copy"] is not None]
    assert len(copied) >= 8 and all(c == pytest.approx(1 / k) for c, k in copied)  # 1 of the echo it was shown
    assert [r["score"] for r in fixed] == [r["score"] for r in records]
    records[0]["score"] += 0.5  # not this run's rows: refused
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(SystemExit, match="not the rows this run trained on"):
        rejudge.rejudge(run, tmp_path / "out2")
