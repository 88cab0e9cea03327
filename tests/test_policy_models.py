"""The scripted policies served as litellm models (spectrum/<policy>): real litellm calls, messages in,
tool calls out."""

import asyncio
import json

import litellm
import pytest

from spectrum_rft.baselines import models as spectrum_models
from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows
from spectrum_rft.task.environment import EnvConfig, SpectrumEnv, env_for_row


@pytest.fixture(autouse=True, scope="module")
def registered():
    spectrum_models.register()
    spectrum_models.register()  # idempotent
    assert sum(p["provider"] == "spectrum" for p in litellm.custom_provider_map) == 1


def ask(model, messages, tools):
    r = asyncio.run(litellm.acompletion(model=model, messages=messages, tools=tools))
    m = r.choices[0].message
    return m.content, [(tc.function.name, json.loads(tc.function.arguments)) for tc in (m.tool_calls or [])]


def test_accumulate_uses_the_scaffold_echo():
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="scaffold"))
    env.reset(4)
    env.step({"center_freqs": [123.4]})
    msgs = [{"role": "system", "content": env.system_prompt()}, {"role": "user", "content": env.observation()["prompt"]}]
    _, calls = ask("spectrum/accumulate", msgs, env.tools())
    assert [c[0] for c in calls] == ["submit_report"]
    assert 123.4 in calls[0][1]["center_freqs"]
    _, mem = ask("spectrum/memoryless", msgs, env.tools())
    assert 123.4 not in mem[0][1]["center_freqs"]


def test_notepad_mode_reads_then_writes_and_reports():
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="notepad"))
    env.reset(4)
    msgs = [{"role": "user", "content": env.observation()["prompt"]}]
    _, calls = ask("spectrum/accumulate", msgs, env.tools())
    assert calls == [("notepad_read", {})]
    msgs += [{"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "notepad_read", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "77.0, 301.5"}]
    _, calls = ask("spectrum/accumulate", msgs, env.tools())
    assert [c[0] for c in calls] == ["notepad_write", "submit_report"]
    for remembered in (77.0, 301.5):  # kept (possibly averaged with a nearby fresh peak)
        assert any(abs(c - remembered) <= 4.0 for c in calls[1][1]["center_freqs"])
    assert calls[0][1]["text"] == ", ".join(f"{c:.1f}" for c in calls[1][1]["center_freqs"])


def test_icl_notepad_fills_notepad_update_and_an_acknowledged_scan_gets_text():
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="icl_notepad"))
    env.reset(4)
    msgs = [{"role": "user", "content": env.observation()["prompt"]}]
    _, calls = ask("spectrum/accumulate", msgs, env.tools())
    assert "notepad_update" in calls[0][1]
    msgs += [{"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "submit_report", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "Scan 1 recorded."}]
    text, calls = ask("spectrum/accumulate", msgs, env.tools())
    assert calls == [] and text


def test_oracle_is_privileged_through_the_registry():
    rows = dataset_adapter(make_rows(1, prefix="oracle-test"))
    env, seed = env_for_row(rows[0].input_metadata.row_id, rows[0].input_metadata.dataset_info)
    env.reset(seed)
    _, calls = ask("spectrum/oracle", [{"role": "user", "content": env.observation()["prompt"]}], env.tools())
    assert calls[0][1]["center_freqs"] == [c for c, _ in env.truth()]
    unknown = SpectrumEnv(EnvConfig())
    unknown.reset(999_999)
    text, calls = ask("spectrum/oracle", [{"role": "user", "content": unknown.observation()["prompt"]}], unknown.tools())
    assert calls == [] and "registry" in text


def test_unknown_policy_fails_loudly():
    with pytest.raises(Exception, match="unknown policy"):
        ask("spectrum/telepathy", [{"role": "user", "content": "hi"}], None)
