"""Rewards are objects of ``spectrum_rft.task.reward`` (issue 43): a new reward is one entry there.

A test-only reward (tests/reward_plugin.py: recall over transmitters, which never charges a guess) goes
through every path that scores: the env, the system prompt, the reward audit (held to the reward's own
bars, which catch its padding), both eval paths (in-process, and the real MCP server process with the
reward registered in it) and the TRL adapter, without a line of code outside ``task/``. An unknown name is
an error everywhere, never a fallback to another reward.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from eval_protocol.pytest.types import RolloutProcessorConfig

from harness import NullLogger
from reward_plugin import HITS
from spectrum_rft.baselines.audit import audit, audit_checks
from spectrum_rft.rollouts import mcp_client as smp
from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows
from spectrum_rft.rollouts.row_result import evaluate_row
from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor
from spectrum_rft.task import reward as sr
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.environment import SpectrumEnv, env_for_row

ROOT = Path(__file__).resolve().parent.parent
FAST = {"llm_tries": 2, "backoff_base": 0.001, "backoff_max": 0.002, "request_timeout": 30.0}


@pytest.fixture
def hits(monkeypatch) -> sr.Reward:
    monkeypatch.setitem(sr.REWARD_TABLE, HITS.name, HITS)
    return HITS


def hand_scores(row_id: str, dataset_info: dict, reports: list[list[float]]) -> list[float]:
    """The reward of each report by hand: the plugin's recall over the band's transmitters."""
    env, seed = env_for_row(row_id, dataset_info)
    env.reset(seed)
    truth = [(c - 0.5 * w, c + 0.5 * w) for c, w in env.truth()]
    return [sr.match_count(r, truth) / len(truth) for r in reports]


def test_the_env_scores_with_the_entry_and_the_prompt_says_its_sentence(hits):
    env = SpectrumEnv(EnvConfig(reward=hits.name, memory_mode="none"))
    env.reset(11)
    truth = env.truth()
    centres = [c for c, _ in truth[:3]] + [1.0]  # three transmitters found, one guess (free under this reward)
    env.call_tool("submit_report", {"center_freqs": centres})
    rec = env.scan_records()[0]
    assert rec["reward"] == pytest.approx(3 / len(truth))
    assert rec["match"] == pytest.approx(3 / (4 + len(truth) - 3))  # the diagnostics stay what they are
    assert env.metrics()["reward_name"] == hits.name
    assert hits.prompt in env.system_prompt()
    assert sr.REWARD_TABLE["match_iou"].prompt not in env.system_prompt()


def test_the_audit_holds_the_reward_to_its_own_bars(hits):
    r = audit("default", hits.name, 12, ["memoryless", "accumulate", "oracle", "memoryless+random"])
    checks = dict(audit_checks(r))
    assert r["reward"] == hits.name
    assert any(k.startswith("memoryless <= 0.5 ") for k in checks)  # the entry's bar, not the built-in 0.2
    free = next(k for k in checks if k.startswith("every memory-free"))
    assert not checks[free] and "memoryless+random" in free  # padding pays under recall: the audit says so
    assert r["policies"]["oracle"]["score"] == pytest.approx(1.0)


def _rollout(path: str, raw_row: dict, llm, port: int | None = None):
    processor = SpectrumTurnRolloutProcessor(**FAST) if path == "turn" else smp.SpectrumMcpRolloutProcessor(**FAST)
    kwargs = {} if path == "turn" else {"start_server": False, "port": port}
    cfg = RolloutProcessorConfig(completion_params=llm.completion_params(), mcp_config_path="",
                                 server_script_path=smp.SERVER_SCRIPT, steps=144, logger=NullLogger(),
                                 semaphore=asyncio.Semaphore(2), kwargs=kwargs)

    async def go():
        return await asyncio.gather(*processor(dataset_adapter([raw_row]), cfg))

    (row,) = asyncio.run(go())
    return evaluate_row(row)


@pytest.mark.usefixtures("dummy_openai_key")
def test_both_eval_paths_score_with_the_entry(hits, llm, tmp_path):
    """The loopback model plays accumulate; each path's per-scan rewards are the plugin's recall of the
    reports it sent, and the row's score their mean. The MCP server is a process of its own: its script
    registers the same entry, as a user's plugin would."""
    script = tmp_path / "server_with_plugin.py"
    script.write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n"
        "import reward_plugin\nreward_plugin.register()\n"
        "from spectrum_rft.rollouts.server_main import main\nraise SystemExit(main())\n")
    raw = make_rows(1, memory_mode="scaffold", prompt="weak", reward=hits.name, salt="reward-objects")[0]
    assert hits.prompt in raw["system_prompt"]
    server = smp.SpectrumServer(script=str(script)).start()
    try:
        rows = {path: _rollout(path, raw, llm, server.port) for path in ("turn", "mcp")}
    finally:
        server.stop()
    for path, row in rows.items():
        spectrum = row.execution_metadata.extra["spectrum"]
        recs = spectrum["scan_records"]
        assert spectrum["reward_name"] == hits.name and not spectrum["faults"], path
        assert [r["reward"] for r in recs] == pytest.approx(
            hand_scores(raw["id"], {"environment_context": raw["environment_context"]}, _sent_reports(row.messages))), path
        assert row.evaluation_result.score == pytest.approx(sum(r["reward"] for r in recs) / len(recs)), path
    assert rows["turn"].evaluation_result.score == rows["mcp"].evaluation_result.score


def _sent_reports(messages) -> list[list[float]]:
    """The centres of every submit_report the model sent, in order."""
    import json

    out = []
    for m in messages:
        calls = (m.get("tool_calls") if isinstance(m, dict) else getattr(m, "tool_calls", None)) or []
        for c in calls:
            fn = c["function"] if isinstance(c, dict) else c.function
            name = fn["name"] if isinstance(fn, dict) else fn.name
            args = fn["arguments"] if isinstance(fn, dict) else fn.arguments
            if name == "submit_report":
                out.append(json.loads(args)["center_freqs"])
    return out


def test_the_trl_adapter_scores_with_the_entry(hits):
    from spectrum_rft.training.spectrum.trl_data import grpo_rows
    from spectrum_rft.training.spectrum.trl_env import SpectrumToolEnv, spectrum_reward

    row = next(r for r in grpo_rows(6, prompt="weak", memory_mode="none", reward=hits.name, salt="reward-objects")
               if r["scan"] > 1)
    info = {"environment_context": row["environment_context"]}
    band, seed = env_for_row(row["row_id"], info)
    band.reset(seed)
    centres = [band.truth()[0][0], band.truth()[1][0], 5.0]  # two found, one guess
    env = SpectrumToolEnv()
    env.reset(**row)
    env.submit_report(center_freqs=centres)
    scores = hand_scores(row["row_id"], info, [centres])
    assert spectrum_reward([env]) == pytest.approx(scores)
    assert env.metrics()["reward_name"] == hits.name


def test_an_unknown_reward_is_an_error_everywhere_never_a_fallback():
    for make in (lambda: EnvConfig(reward="test_hits"), lambda: sr.ScanScore(0.1, 0.2, 0.3).reward("hits"),
                 lambda: make_rows(1, reward="nosuch"), lambda: audit("default", "nosuch", 1, ["memoryless"])):
        with pytest.raises(ValueError, match="unknown reward"):
            make()
    assert sr.REWARD_DEFINITIONS == ("occ_iou", "avail_iou", "match_iou")
    assert {n: sr.reward_of(n).name for n in sr.REWARDS} == {
        "default": "match_iou", "default-v2": "match_iou", "default-v1": "occ_iou", "occ_iou": "occ_iou",
        "avail_iou": "avail_iou", "match_iou": "match_iou"}
