"""The scripted policies served as litellm models (spectrum/<policy>): real litellm calls, messages in,
tool calls out."""

import asyncio
import json
import os
import subprocess
import sys

import litellm
import pytest

from spectrum_rft.baselines import policy_models as spectrum_models
from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows
from spectrum_rft.rollouts.scripted import row_metadata
from spectrum_rft.task.environment import EnvConfig, SpectrumEnv, env_for_row


@pytest.fixture(autouse=True, scope="module")
def registered():
    spectrum_models.register()
    spectrum_models.register()  # idempotent
    assert sum(p["provider"] == "spectrum" for p in litellm.custom_provider_map) == 1


def ask(model, messages, tools, **kwargs):
    r = asyncio.run(litellm.acompletion(model=model, messages=messages, tools=tools, **kwargs))
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


def test_oracle_is_privileged_through_the_row_metadata():
    """The oracle is told its row by the call's litellm metadata (both transports pass it) and rebuilds
    that row's env: no registry, and the dataset adapter builds no env."""
    rows = dataset_adapter(make_rows(1, prefix="oracle-test"))
    row_id, info = rows[0].input_metadata.row_id, rows[0].input_metadata.dataset_info
    env, seed = env_for_row(row_id, info)
    env.reset(seed)
    msgs = [{"role": "user", "content": env.observation()["prompt"]}]
    _, calls = ask("spectrum/oracle", msgs, env.tools(), metadata=row_metadata(row_id, info))
    assert calls[0][1]["center_freqs"] == [c for c, _ in env.truth()]
    # without the metadata: a plain-text answer that says so, no tool call
    text, calls = ask("spectrum/oracle", msgs, env.tools())
    assert calls == [] and "metadata" in text and "spectrum_row" in text
    text, calls = ask("spectrum/oracle", msgs, env.tools(), metadata={"other": 1})
    assert calls == [] and "metadata" in text
    # metadata naming another row: the scan shown is not that row's, so no truth is handed out
    text, calls = ask("spectrum/oracle", msgs, env.tools(),
                      metadata=row_metadata("someone-else", {"environment_context": {}}))
    assert calls == [] and "not scan 1" in text
    # other policies ignore the metadata
    _, mem = ask("spectrum/memoryless", msgs, env.tools(), metadata=row_metadata(row_id, info))
    _, mem2 = ask("spectrum/memoryless", msgs, env.tools())
    assert mem == mem2


def test_oracle_on_later_scans_and_the_notepad_path():
    info = {"environment_context": {**EnvConfig(memory_mode="icl_notepad").to_dict(), "seed": 77}}
    env, seed = env_for_row("r-77", info)
    env.reset(seed)
    assert env.call_tool("submit_report", {"center_freqs": [10.0], "notepad_update": "10.0"}, first=True,
                         last=True).advanced
    msgs = [{"role": "user", "content": env.observation()["prompt"]}]
    assert "Your notepad: 10.0" in msgs[0]["content"]
    _, calls = ask("spectrum/oracle", msgs, env.tools(), metadata=row_metadata("r-77", info))
    assert calls[0][1]["center_freqs"] == [c for c, _ in env.truth()] and "notepad_update" in calls[0][1]


def test_prepare_registers_only_for_spectrum_models(monkeypatch):
    monkeypatch.setattr(litellm, "custom_provider_map", [])
    spectrum_models.prepare({"model": "openai/gpt-4o-mini"})
    spectrum_models.prepare({})
    assert litellm.custom_provider_map == []
    spectrum_models.prepare({"model": "spectrum/accumulate"})
    spectrum_models.prepare({"model": "spectrum/oracle", "temperature": 0})
    assert [p["provider"] for p in litellm.custom_provider_map] == ["spectrum"]


def test_importing_registers_nothing():
    code = ("import litellm, spectrum_rft.baselines.policy_models, spectrum_rft.rollouts.dataset\n"
            "assert not any(p.get('provider') == 'spectrum' for p in litellm.custom_provider_map)\n")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})


def test_unknown_policy_fails_loudly():
    with pytest.raises(Exception, match="unknown policy"):
        ask("spectrum/telepathy", [{"role": "user", "content": "hi"}], None)
