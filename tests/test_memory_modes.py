"""The memory modes are objects of ``spectrum_rft.task.memory``: a new mode is one entry there.

A test-only mode, registered for one test, goes through every path that reads modes (the env's scan text,
tools and system prompt, the window the model is sent through the episode driver, the TRL adapter's tool
class and episode shapes) without a line of code outside ``task/``.
"""

from __future__ import annotations

import asyncio

import pytest

from spectrum_rft.baselines.policy_models import policy_request
from spectrum_rft.rollouts.dataset import make_rows
from spectrum_rft.rollouts.driver import drive
from spectrum_rft.rollouts.episode import InProcessEpisode
from spectrum_rft.rollouts.model_calls import CallStats, ModelCaller
from spectrum_rft.task import memory
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.memory import MEMORY_MODES, MemoryMode, memory_mode
from spectrum_rft.task.scan_format import parse_scan
from spectrum_rft.task.window import is_scan_message, report_call_ids


def last_two(prev: list[float], band: tuple[float, float], rng) -> list[float]:
    """A test-only echo rule: the two highest centres of the previous report."""
    return [round(c, 1) for c in prev[-2:]]


@pytest.fixture(params=[False, True], ids=["windowed", "history"])
def two_echo(request, monkeypatch) -> MemoryMode:
    mode = MemoryMode("test_two_echo", history=request.param, echo=last_two)
    monkeypatch.setitem(memory.MODES, mode.name, mode)
    return mode


def _play(row: dict) -> tuple[dict, list[list[dict]], list[dict]]:
    """One episode of ``row`` through the episode driver, the accumulate policy as the model; returns the
    env's result, every request's messages, and the tools the model was given."""
    sent: list[list[dict]] = []
    tools_sent: list[dict] = []
    policy = policy_request("accumulate")

    async def request(messages, tools):
        sent.append(messages)
        tools_sent[:] = tools
        return await policy(messages, tools)

    async def main():
        ep = InProcessEpisode.for_row(row["id"], {"environment_context": row["environment_context"]})
        opening = await ep.start()
        transcript = [{"role": "system", "content": opening.system_prompt}]
        await drive(ep, opening, transcript, ModelCaller(request, tries=1), CallStats())
        return await ep.finish("unfinished")

    return asyncio.run(main()), sent, tools_sent


def test_a_test_only_mode_runs_every_path_from_its_entry(two_echo):
    row = make_rows(1, memory_mode=two_echo.name, salt="modes")[0]
    cfg = EnvConfig.from_dict(row["environment_context"])
    assert cfg.memory is two_echo
    assert "Each scan repeats your previous report" in row["system_prompt"]  # the prompt reads the echo rule
    result, sent, tools = _play(row)
    assert [t["function"]["name"] for t in tools] == ["submit_report"]  # tool set "report"
    n = result["n_scans"]
    assert len(sent) == n and result["scans_skipped"] == 0 and not result["faults"]
    reports = [r["report_size"] for r in result["scan_records"]]
    for k, messages in enumerate(sent):
        scans = [m for m in messages if is_scan_message(m, report_call_ids(messages))]
        assert len(scans) == (k + 1 if two_echo.history else 1)  # the window the mode asks for
        echo = parse_scan(scans[-1]["content"]).echo
        if k == 0:
            assert echo is None
        else:  # the mode's echo rule, applied by the env to the report the model sent for the last scan
            assert echo is not None and len(echo) == min(2, reports[k - 1])
    assert result["per_scan_reward"] and result["memory_mode"] == two_echo.name


def test_the_trl_adapter_reads_the_mode(two_echo):
    from spectrum_rft.training.spectrum.trl_data import episode_for, grpo_rows
    from spectrum_rft.training.spectrum.trl_env import SpectrumToolEnv, tool_env_class

    assert tool_env_class(two_echo.name) is SpectrumToolEnv
    if two_echo.history:  # its history is the conversation: whole episodes only
        assert episode_for(two_echo.name, None) == "full"
        with pytest.raises(ValueError, match="one scan at a time"):
            episode_for(two_echo.name, "scan")
        return
    assert episode_for(two_echo.name, None) == "scan"  # its memory travels in the scan text
    row = next(r for r in grpo_rows(8, prompt="weak", memory_mode=two_echo.name, salt="modes") if r["scan"] > 2)
    env = SpectrumToolEnv()
    text = env.reset(**row)
    echo = parse_scan(text).echo
    assert echo is not None and 1 <= len(echo) <= 2  # the accumulate prefix's report, cut by the rule


def test_mode_properties_of_the_built_in_modes():
    assert MEMORY_MODES == ("none", "icl", "notepad", "scaffold", "scrambled", "icl_notepad")
    assert [m for m in MEMORY_MODES if memory_mode(m).memory_in_scan_text] == ["none", "scaffold", "scrambled"]
    assert [m for m in MEMORY_MODES if memory_mode(m).history] == ["icl"]
    assert {m: memory_mode(m).tool_set for m in MEMORY_MODES} == {
        "none": "report", "icl": "report", "notepad": "notepad", "scaffold": "report", "scrambled": "report",
        "icl_notepad": "notepad_update"}
    with pytest.raises(ValueError, match="unknown memory_mode 'nosuch'; choose one of none, icl"):
        EnvConfig(memory_mode="nosuch")
