"""The MCP path end to end: SpectrumMcpRolloutProcessor (the shared rollout loop over an MCP connection) ->
the real spectrum_server.py process (an McpGym), with litellm talking HTTP to a loopback chat server
(tests/loopback_llm.py) playing scripted behaviours. Same-behaviour-on-both-paths cases:
tests/test_rollout_parity.py."""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent

from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: E402

from spectrum_rft.rollouts import mcp_client as smp  # noqa: E402
from harness import NullLogger  # noqa: E402
from loopback_llm import (calls_this_scan, chat_response, ok, policy_responder,  # noqa: E402
                          scan_number, tool_call)
from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows  # noqa: E402
from spectrum_rft.task.environment import NUDGE, SpectrumEnv, env_for_row, row_config  # noqa: E402
from spectrum_rft.task.window import is_scan_message  # noqa: E402
from spectrum_rft.rollouts.row_result import evaluate_row  # noqa: E402
from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor  # noqa: E402

N_SCANS = 12
STEPS = 144
pytestmark = pytest.mark.usefixtures("dummy_openai_key")


def stats(server: smp.SpectrumServer) -> dict:
    return httpx.get(f"http://127.0.0.1:{server.port}/control/stats", timeout=10).json()


FAST = {"backoff_base": 0.001, "backoff_max": 0.002}


def run_mcp(server, rows, params, concurrency=96):
    processor = smp.SpectrumMcpRolloutProcessor(**FAST)
    cfg = RolloutProcessorConfig(completion_params=params, mcp_config_path="", server_script_path=smp.SERVER_SCRIPT,
                                 steps=STEPS, logger=NullLogger(), semaphore=asyncio.Semaphore(concurrency),
                                 kwargs={"start_server": False, "port": server.port})

    async def go():
        return await asyncio.gather(*processor(rows, cfg))

    return asyncio.run(go()), processor


def run_turn(rows, params):
    cfg = RolloutProcessorConfig(completion_params=params, mcp_config_path="", logger=NullLogger(),
                                 semaphore=asyncio.Semaphore(32))

    async def go():
        return await asyncio.gather(*SpectrumTurnRolloutProcessor(**FAST)(rows, cfg))

    return asyncio.run(go())


def first_prompt(row) -> str:
    env, seed = env_for_row(row.input_metadata.row_id, row.input_metadata.dataset_info)
    env.reset(seed)
    return env.observation()["prompt"]


def spectrum(row) -> dict:
    return row.execution_metadata.extra["spectrum"]


# ------------------------------------------------------------------------------------------------------
# Seeding (first test of the module: the server is fresh)
# ------------------------------------------------------------------------------------------------------


def test_first_rollouts_on_a_fresh_server_are_seeded_seed_zero_included(mcp_server, llm):
    assert stats(mcp_server)["rollouts_created"] == 0  # really a fresh server
    raw = make_rows(3, prefix="fresh")
    raw[2]["environment_context"]["seed"] = 0  # eval-protocol's `if seed:` would drop it
    rows = dataset_adapter(raw)
    out, _ = run_mcp(mcp_server, rows, llm.completion_params())
    for row in out[:2]:
        assert row.rollout_status.is_finished(), row.rollout_status
        assert row.messages[1].role == "user"
        first_scan = next(m for m in row.messages if is_scan_message(m))
        assert first_scan.role == "user" and first_scan.content == first_prompt(row)  # as in-process
        assert spectrum(row)["seed"] == row.input_metadata.dataset_info["environment_context"]["seed"]
    zero = out[2]
    env = SpectrumEnv(row_config(zero.input_metadata.dataset_info))
    env.reset(0)
    assert next(m for m in zero.messages if is_scan_message(m)).content == env.observation()["prompt"]
    assert spectrum(zero)["seed"] == 0 and spectrum(zero)["band_fingerprint"] == env.metrics()["band_fingerprint"]
    for row in out:
        s = spectrum(row)
        assert len(s["per_scan_reward"]) == N_SCANS and s["scans_skipped"] == 0
        assert [r["scan"] for r in s["scan_records"]] == list(range(1, N_SCANS + 1))
        # the model only ever sees text: no score, no metadata in what it reads
        assert all("reward" not in str(m.content) for m in row.messages if m.role == "tool")
    assert stats(mcp_server)["rollouts_created"] == 3


# ------------------------------------------------------------------------------------------------------
# GRPO candidates: one row, 24 concurrent rollouts, 24 behaviours
# ------------------------------------------------------------------------------------------------------

_PEAK = re.compile(r"^P\d+ (-?\d+(?:\.\d+)?) ", re.M)
_PERSONA = re.compile(r"^call_p(\d+)_")


def persona_report(scan_text: str, k: int) -> list[float]:
    """Persona ``k``: the scan's peaks shifted by k * 0.7 MHz (a distinct, deterministic behaviour)."""
    return [round(min(480.0, max(0.0, float(f) + 0.7 * k)), 1) for f in _PEAK.findall(scan_text)][:16]


_NOTE = re.compile(r"^persona (\d+) scan \d+$")


def persona_responder():
    """Each candidate a persona: it reads its notepad first on every scan (the ICL-off window shows only
    the current scan), learns who it is from what it wrote there (a fresh persona on an empty notepad),
    then writes it back and reports its persona's shifted peaks."""
    lock = threading.Lock()
    next_id = [0]

    def respond(request: dict):
        msgs = request.get("messages") or []
        if calls_this_scan(request) == 0:
            return ok(chat_response("", [tool_call("notepad_read", {})]))
        note = next((m.get("content") or "" for m in reversed(msgs) if m.get("role") == "tool"), "")
        hit = _NOTE.match(note)
        if hit:
            persona = int(hit.group(1))
        else:
            with lock:
                persona, next_id[0] = next_id[0], next_id[0] + 1
        scan_text = msgs[max(i for i, m in enumerate(msgs) if is_scan_message(m))]["content"]
        n = scan_number(request)
        cid = lambda: f"call_p{persona:02d}_{uuid.uuid4().hex[:8]}"  # noqa: E731
        return ok(chat_response("", [
            tool_call("notepad_write", {"text": f"persona {persona} scan {n}"}, cid()),
            tool_call("submit_report", {"center_freqs": persona_report(scan_text, persona)}, cid()),
        ]))

    return respond


def test_24_concurrent_candidates_of_one_row_see_identical_scans_and_keep_separate_state(mcp_server, llm):
    llm.responder = persona_responder()
    raw = make_rows(1, prompt="notepad-explicit", prefix="grpo")[0]
    rows = dataset_adapter([raw] * 24)
    created = stats(mcp_server)["rollouts_created"]
    out, processor = run_mcp(mcp_server, rows, llm.completion_params(), concurrency=24)
    assert len({r.input_metadata.row_id for r in out}) == 1  # one row id for every candidate
    assert stats(mcp_server)["rollouts_created"] == created + 24  # and one env each (keyed by connection)

    scans_seen, scores = [], {}
    for row in out:
        assert row.rollout_status.is_finished(), row.rollout_status
        msgs = row.messages
        persona = next(int(_PERSONA.match(tc.id).group(1)) for m in msgs if m.role == "assistant"
                       for tc in (m.tool_calls or []) if _PERSONA.match(tc.id))
        # scans (the text after the acknowledgement) are identical for every candidate
        scans_seen.append([m.content[m.content.index("Scan ", 1 if m.role == "tool" else 0):]
                           .split("Scan ", 1)[1] for m in msgs if is_scan_message(m)])
        # its notepad holds only what this candidate wrote
        reads = {tc.id for m in msgs if m.role == "assistant" for tc in (m.tool_calls or [])
                 if tc.function.name == "notepad_read"}
        read_texts = [m.content for m in msgs if m.role == "tool" and m.tool_call_id in reads]
        assert read_texts == ["(the notepad is empty)"] + [f"persona {persona} scan {n}" for n in range(1, N_SCANS)]
        # its scores are those of its own behaviour, replayed in-process on a private env
        env, seed = env_for_row(row.input_metadata.row_id, row.input_metadata.dataset_info)
        env.reset(seed)
        while not env.done:
            env.call_tool("notepad_read", {})
            env.call_tool("notepad_write", {"text": "x"})
            env.call_tool("submit_report", {"center_freqs": persona_report(env.observation()["prompt"], persona)})
        assert spectrum(row)["per_scan_reward"] == pytest.approx(env.metrics()["per_scan_reward"], abs=1e-12)
        scores[persona] = spectrum(row)["score"]
    assert len(scans_seen) == 24 and all(s == scans_seen[0] for s in scans_seen)
    assert len(scans_seen[0]) == N_SCANS
    assert sorted(scores) == list(range(24))
    assert len({round(v, 9) for v in scores.values()}) > 1  # behaviours differ, so do the scores


# ------------------------------------------------------------------------------------------------------
# Parity with the in-process path
# ------------------------------------------------------------------------------------------------------


def test_same_rows_through_both_paths_give_the_same_per_scan_rewards(mcp_server, llm):
    raw = make_rows(3, prefix="parity") + make_rows(2, prompt="notepad-explicit", prefix="parity-np") \
        + make_rows(1, memory_mode="icl", prefix="parity-icl")
    params = llm.completion_params()
    mcp_rows, _ = run_mcp(mcp_server, dataset_adapter(raw), params)
    turn_rows = run_turn(dataset_adapter(raw), params)
    for a, b in zip(mcp_rows, turn_rows):
        assert a.input_metadata.row_id == b.input_metadata.row_id
        sa, sb = spectrum(a), spectrum(b)
        assert sa["per_scan_reward"] == pytest.approx(sb["per_scan_reward"], abs=1e-12), a.input_metadata.row_id
        assert sa["band_fingerprint"] == sb["band_fingerprint"] and sa["faults"] == sb["faults"]
        ea, eb = evaluate_row(a).evaluation_result, evaluate_row(b).evaluation_result
        assert ea.score == pytest.approx(eb.score) and set(ea.metrics) >= set(eb.metrics) - {"finished_early"}
        assert [s.base_reward for s in ea.step_outputs] == pytest.approx([s.base_reward for s in eb.step_outputs])
        assert a.tools == b.tools  # the row's own tool schemas, not the server's union


# ------------------------------------------------------------------------------------------------------
# Waste: one HTTP request per tool call, no redirect, no client per call, no model call after the end
# ------------------------------------------------------------------------------------------------------


def test_one_request_per_tool_call_no_redirect_no_client_per_call_no_extra_model_call(mcp_server, llm, monkeypatch):
    built = [0]
    init = httpx.AsyncClient.__init__

    def counting_init(self, *a, **k):
        built[0] += 1
        init(self, *a, **k)

    monkeypatch.setattr(httpx.AsyncClient, "__init__", counting_init)
    n = 8
    before = stats(mcp_server)["requests"]
    out, _ = run_mcp(mcp_server, dataset_adapter(make_rows(n, prefix="waste")), llm.completion_params())
    after = stats(mcp_server)["requests"]
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    assert all(r.rollout_status.is_finished() for r in out)
    tool_calls = n * N_SCANS
    assert not [k for k in delta if k.endswith(" 307")], delta  # no redirect
    assert not [k for k in delta if "/control/" in k and "/control/stats" not in k], delta  # no control plane
    posts = sum(v for k, v in delta.items() if k.startswith("POST /mcp"))
    # per rollout: initialize + initialized + the opening + the row's tools (list_tools, which the mcp client
    # also keeps for its output-schema check) + tool calls; nothing after the episode (the last answer carried the env's record)
    assert posts == tool_calls + 4 * n, delta
    assert built[0] <= n + 2, built[0]  # one HTTP client per MCP connection, none per call
    assert llm.count == tool_calls  # exactly one model call per scan: none after the episode ended


# ------------------------------------------------------------------------------------------------------
# Episodes that end early; the per-scan call budget counts model calls, not tool calls
# ------------------------------------------------------------------------------------------------------


def test_text_only_replies_are_nudged_and_still_every_scan_is_scored(mcp_server, llm):
    """A reply without a tool call does not end the episode: the env counts it against the scan's budget and
    the model is reminded (the in-process path's rule; before, eval-protocol's loop ended the episode)."""
    honest = policy_responder("accumulate")
    llm.responder = lambda req: honest(req) if scan_number(req) <= 2 else ok(chat_response("I am done."))
    out, _ = run_mcp(mcp_server, dataset_adapter(make_rows(2, prefix="short")), llm.completion_params())
    for row in out:
        s = spectrum(row)
        assert len(s["per_scan_reward"]) == N_SCANS and s["scans_completed"] == 2 and s["scans_skipped"] == 10
        assert s["faults"] == {"skip_call_budget": 10}
        assert sum(1 for m in row.messages if m.role == "user" and m.content == NUDGE) == 3 * 10
        res = evaluate_row(row).evaluation_result
        assert len(res.step_outputs) == N_SCANS and res.score == pytest.approx(s["score"])


def test_call_budget_counts_model_calls_not_tool_calls(mcp_server, llm):
    honest = policy_responder("accumulate")

    def respond(req):
        if scan_number(req) == 1 and calls_this_scan(req) == 0:  # one model call, four bad reports
            return ok(chat_response("", [tool_call("submit_report", {"center_freqs": "nope"}) for _ in range(4)]))
        return honest(req)

    llm.responder = respond
    (row,), _ = run_mcp(mcp_server, dataset_adapter(make_rows(1, prefix="budget")), llm.completion_params())
    s = spectrum(row)
    assert s["faults"].get("invalid_report") == 4
    assert s["scans_skipped"] == 0 and s["scans_completed"] == N_SCANS  # 1 model call < budget of 4
    (turn,) = run_turn(dataset_adapter(make_rows(1, prefix="budget")), llm.completion_params())
    assert spectrum(turn)["per_scan_reward"] == pytest.approx(s["per_scan_reward"])


def test_malformed_tool_call_json_is_refused_by_the_env_and_the_rollout_goes_on(mcp_server, llm):
    """Malformed arguments: the model call is retried (as in-process); the last try's call reaches the env as
    written and the env answers "not valid JSON", counting the fault."""
    honest = policy_responder("accumulate")

    def respond(req):
        if scan_number(req) == 3 and calls_this_scan(req) == 0:
            return ok(chat_response("", [tool_call("submit_report", '{"center_freqs": [100.0, ')]))
        return honest(req)

    llm.responder = respond
    (row,), processor = run_mcp(mcp_server, dataset_adapter(make_rows(1, prefix="badjson")), llm.completion_params())
    assert row.rollout_status.is_finished(), row.rollout_status
    s = spectrum(row)
    assert s["faults"].get("invalid_report") == 1 and s["faults"].get("llm_bad_tool_json") == 4
    assert s["scans_completed"] == N_SCANS and s["scans_skipped"] == 0
    assert any(m.role == "tool" and "not valid JSON" in str(m.content) for m in row.messages)
