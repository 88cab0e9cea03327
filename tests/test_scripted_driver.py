"""Scripted policies through the one episode driver (``rollouts.driver.drive_now`` with
``baselines.policies.ScriptedModel``): the audit, bench90 and the TRL data builders play them this way, and
what they get must be what the env alone gives a policy that reads every scan."""

from __future__ import annotations

import asyncio
import json

import pytest

from spectrum_rft.baselines.audit import run_episode
from spectrum_rft.baselines.policies import ScriptedModel, make_policy, oracle_report, parse_scan
from spectrum_rft.rollouts.driver import drive_now, refusals
from spectrum_rft.rollouts.episode import InProcessEpisode
from spectrum_rft.rollouts.model_calls import Reply
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.environment import SpectrumEnv
from spectrum_rft.task.seeding import seed_for_row


def env_alone(env: SpectrumEnv, name: str, seed: int, history: bool) -> dict:
    """The reference: the policy reads each observation and the env takes its report (``step``)."""
    obs, _ = env.reset(seed=seed)
    policy = make_policy(name, seed)
    while not obs["done"]:
        if policy is None:
            action = oracle_report(env.truth())
        else:
            if not history:
                policy = make_policy(name, seed + env.scan_index)
            policy.observe(parse_scan(obs["prompt"]))
            action = policy.act()
        obs, *_ = env.step(action)
    return env.metrics()


@pytest.mark.parametrize("mode", ["none", "scaffold"])
@pytest.mark.parametrize("history", [True, False])
def test_the_driver_gives_what_the_env_alone_gives(mode, history):
    env = SpectrumEnv(EnvConfig(memory_mode=mode))
    for name in ("memoryless", "accumulate", "oracle", "random-4", "memoryless+shift-4.5", "accumulate+dup"):
        for i in range(3):
            seed = seed_for_row(f"driver-{i}")
            want = env_alone(env, name, seed, history)
            got = run_episode(env, name, seed, history=history)
            assert got == want, (name, seed)
    assert want["faults"] == {} or not any(want["faults"].values())


class Broken:
    """A model whose report the env refuses: a NaN centre."""

    calls = 0

    async def __call__(self, messages, tools, ep, stats):
        self.calls += 1
        call = {"id": f"c{self.calls}", "type": "function",
                "function": {"name": "submit_report", "arguments": '{"center_freqs": [NaN]}'}}
        return Reply({"role": "assistant", "content": "", "tool_calls": [call]}, {})


def test_refused_reports_are_counted_and_the_episode_still_ends():
    env = SpectrumEnv(EnvConfig())
    model = Broken()
    stats = drive_now(InProcessEpisode(env, 7), model)
    assert env.done and len(refusals(stats)) == model.calls >= env.n_scans
    assert all(isinstance(e, str) and e for e in refusals(stats))
    assert env.metrics()["scans_skipped"] == env.n_scans  # every scan closed by its call budget, scored empty


def test_the_audit_says_which_policy_the_env_refused(monkeypatch):
    monkeypatch.setattr(ScriptedModel, "__call__", Broken.__call__)
    monkeypatch.setattr(ScriptedModel, "calls", 0, raising=False)
    with pytest.raises(RuntimeError, match="memoryless produced an invalid report: "):
        run_episode(SpectrumEnv(EnvConfig()), "memoryless", 3)


def test_drive_now_runs_inside_an_event_loop_and_refuses_a_model_that_waits():
    env = SpectrumEnv(EnvConfig())

    async def inside() -> dict:  # TRL may reset its environments from inside a running loop
        drive_now(InProcessEpisode(env, 5), ScriptedModel("accumulate", 5))
        return env.metrics()

    assert asyncio.run(inside()) == run_episode(SpectrumEnv(EnvConfig()), "accumulate", 5)

    class Waits(ScriptedModel):
        async def __call__(self, *args):
            await asyncio.sleep(0)
            return await super().__call__(*args)

    with pytest.raises(RuntimeError, match="drive it in an event loop"):
        drive_now(InProcessEpisode(SpectrumEnv(EnvConfig()), 5), Waits("memoryless"))


def test_an_episode_can_stop_at_a_scan_and_go_on_later():
    """``until``: the TRL adapter's scan prefix plays scans 1..k-1 and leaves scan k open for the model."""
    env = SpectrumEnv(EnvConfig(memory_mode="scaffold"))
    env.reset(11)
    transcript: list[dict] = []
    drive_now(InProcessEpisode(env, None, until=4), ScriptedModel("accumulate", read_echo=False, widths=False),
              transcript=transcript)
    assert env.scan_index == 4 and not env.done
    assert [r["skipped"] for r in env.scan_records()] == [False] * 4
    calls = [json.loads(c["function"]["arguments"]) for m in transcript if m["role"] == "assistant"
             for c in m["tool_calls"]]
    assert len(calls) == 4 and all(set(c) == {"center_freqs"} for c in calls)  # centres only: default widths
    stats = drive_now(InProcessEpisode(env, None), ScriptedModel("memoryless"))
    assert env.done and not refusals(stats) and len(env.scan_records()) == env.n_scans
