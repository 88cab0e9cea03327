"""Scan episodes of the TRL adapter and the datasets built on them (fast: no model is run).

* a scan episode plays scans 1..k-1 with the memoryless policy and gives the model scan k alone; the
  reward is scan k's env score, calls after it are refused, the memoryless reference is that policy's
  score on the same scan;
* memory pays in this shape with the real echo and not with the scrambled one (why the evidence run
  trains on it);
* an SFT conversation's prompt is byte for byte what GRPO renders (TRL passes the tool methods, SFT the
  JSON schemas), and its reports are the memoryless policy's.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.task.scan_format import parse_scan
from spectrum_rft.training.spectrum.trl_data import episode_for, grpo_rows, scan_of_row, sft_conversation, tool_schemas_of
from spectrum_rft.training.spectrum.trl_env import SpectrumToolEnv, memoryless_report, spectrum_reward


def _rows(n, mode="scaffold", salt="t"):
    return grpo_rows(n, prompt="weak", memory_mode=mode, salt=salt)


def test_rows_are_fresh_bands_with_a_stable_scan():
    rows = _rows(40)
    assert len({r["row_id"] for r in rows}) == 40
    assert all(1 <= r["scan"] <= 12 for r in rows) and len({r["scan"] for r in rows}) > 6
    assert [r["scan"] for r in rows] == [r["scan"] for r in _rows(40)]  # reproducible
    assert rows[0]["prompt"][1] == {"role": "user", "content": ""}  # TRL appends reset()'s text here
    assert len({scan_of_row(f"row-{i}", "", 12) for i in range(60)}) == 12  # every scan of the episode occurs
    assert all(r["scan"] == 0 for r in grpo_rows(3, prompt="explicit", memory_mode="icl"))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 12), st.sampled_from(["none", "scaffold", "scrambled"]))
def test_scan_episode_is_scan_k_of_the_row(i, k, mode):
    row = {**_rows(1, mode, salt=f"h{i}")[0], "scan": k}
    env = SpectrumToolEnv()
    obs = env.reset(**row)
    scan = parse_scan(obs)
    assert scan.scan == k
    assert (scan.echo is not None) == (mode != "none" and k > 1)
    assert not env.done
    text = env.submit_report(**memoryless_report(obs))
    assert text.startswith(f"Scan {k} recorded.") and f"Scan {k + 1}/" not in text  # no next scan
    assert env.done
    assert env.submit_report(center_freqs=[1.0]).startswith("Error: this rollout ended") or k == 12
    m = env.metrics()
    assert m["scan"] == k and m["scans_skipped"] == 0 and m["per_scan_reward"] == [m["score"]]
    assert m["gain_vs_memoryless"] == 0.0 and m["score"] == m["memoryless_reward"]  # it *is* the memoryless report
    assert (m["late_mean"] is not None) == (k > 6) and (m["early_mean"] is not None) == (k <= 6)


def test_a_scan_never_reported_is_skipped_and_bad_input_is_refused():
    env = SpectrumToolEnv()
    env.reset(**{**_rows(1)[0], "scan": 5})
    assert env.submit_report(center_freqs=["nan"]).startswith("Error")
    assert env.submit_report(center_freqs=float("nan")).startswith("Error")
    assert not env.done
    m = env.metrics()
    assert m["scans_skipped"] == 1 and m["score"] == 0.0 and m["gain_vs_memoryless"] == -m["memoryless_reward"]
    assert m["faults"]
    for _ in range(2):  # the call budget (4) closes the scan as skipped
        env.submit_report(center_freqs=[-5.0])
    assert env.done and env.metrics()["scans_skipped"] == 1


def test_refuses_scan_episodes_where_memory_is_not_in_the_scan_text():
    with pytest.raises(ValueError, match="scan episodes need"):
        SpectrumToolEnv().reset(**{**grpo_rows(1, prompt="explicit", memory_mode="icl")[0], "scan": 3})
    with pytest.raises(ValueError, match="leak"):
        episode_for("scaffold", "full")
    with pytest.raises(ValueError, match="one scan at a time"):
        episode_for("notepad", "scan")
    with pytest.raises(ValueError, match="scan must be"):
        SpectrumToolEnv().reset(**{**_rows(1)[0], "scan": 13})


def _carry_echo_gain(mode: str, n: int = 66) -> float:
    gains = []
    for row in _rows(n, mode, salt="carry"):
        row = {**row, "scan": 2 + len(gains) % 11}
        env = SpectrumToolEnv()
        obs = env.reset(**row)
        centres = sorted(set(memoryless_report(obs)["center_freqs"]) | set(parse_scan(obs).echo or []))[:16]
        env.submit_report(center_freqs=centres)
        gains.append(env.metrics()["gain_vs_memoryless"])
    return sum(gains) / len(gains)


def test_memory_pays_per_scan_with_the_real_echo_only():
    """Reporting the current peaks plus the echo beats memoryless by a lot with the real echo and by
    about nothing with the scrambled one: the per-scan task has the contrast the evidence run tests."""
    real, scrambled = _carry_echo_gain("scaffold"), _carry_echo_gain("scrambled")
    assert real > 0.08 and abs(scrambled) < 0.04 and real > scrambled + 0.06, (real, scrambled)


def test_reward_function_logs_the_batch_memory_gain():
    rows = _rows(12)
    envs, logged = [], {}
    for r in rows:
        env = SpectrumToolEnv()
        obs = env.reset(**r)
        env.submit_report(**memoryless_report(obs))
        envs.append(env)
    rewards = spectrum_reward(envs, log_metric=lambda k, v: logged.__setitem__(k, v))
    assert rewards == [e.metrics()["score"] for e in envs]
    late = [e.metrics()["score"] for e in envs if e.metrics()["scan"] > 6]
    early = [e.metrics()["score"] for e in envs if e.metrics()["scan"] <= 6]
    assert logged["spectrum/memory_gain"] == pytest.approx(sum(late) / len(late) - sum(early) / len(early))
    assert logged["spectrum/gain_vs_memoryless"] == 0.0 and logged["spectrum/scans_skipped"] == 0.0


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from spectrum_rft.training.chat_template import with_tool_template
    from spectrum_rft.training.models import resolve_model_dir

    model_dir, _ = resolve_model_dir("smollm2", "~/.cache/spectrum-rft")
    return with_tool_template(AutoTokenizer.from_pretrained(model_dir))


@pytest.mark.parametrize("mode,prompt", [("none", "weak"), ("scaffold", "weak"), ("icl", "explicit")])
def test_sft_conversation_is_what_grpo_renders(tokenizer, mode, prompt):
    row = grpo_rows(1, prompt=prompt, memory_mode=mode, salt="sft")[0]
    conv = sft_conversation(row)
    msgs = conv["messages"]
    # GRPO: TRL appends reset()'s text to the last prompt message and passes the env's tool methods
    env = SpectrumToolEnv()
    obs = env.reset(**row)
    grpo_prompt = row["prompt"][:-1] + [{**row["prompt"][-1], "content": row["prompt"][-1]["content"] + obs}]
    methods = [getattr(env, n) for n in sorted(["submit_report"])]
    grpo_text = tokenizer.apply_chat_template(grpo_prompt, tools=methods, tokenize=False, add_generation_prompt=True)
    sft_text = tokenizer.apply_chat_template(msgs[:2], tools=json.loads(conv["tools"]), tokenize=False,
                                             add_generation_prompt=True)
    assert sft_text == grpo_text
    assert json.loads(conv["tools"]) == tool_schemas_of(env)
    calls = [m for m in msgs if m["role"] == "assistant" and m.get("tool_calls")]
    tools = [m for m in msgs if m["role"] == "tool"]
    assert len(calls) == len(tools) == (12 if mode == "icl" else 1)
    assert calls[0]["tool_calls"][0]["function"]["arguments"] == memoryless_report(obs)
    assert msgs[-1] == {"role": "assistant", "content": "Done."}
    full = tokenizer.apply_chat_template(msgs, tools=json.loads(conv["tools"]), tokenize=False)
    assert '<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": [' in full
    assert 0.0 < conv["score"] < 0.5
