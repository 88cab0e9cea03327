"""Honest failure (issue 11), on both rollout paths, with real HTTP servers on 127.0.0.1.

* A rollout whose model never produced one usable reply is an ERROR row naming the cause
  (``spectrum_rft.rollouts.loop.mark_model_failure``), still carrying the env's complete record, and it is not
  retried by eval-protocol (rows go through eval-protocol's own ``rollout_processor_with_retry``).
* A model that worked and then failed is not an error: its later scans are skipped and counted.
* A huge refused tool call is judged as sent but kept in the row only as a bounded preview.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

from eval_protocol.pytest.evaluation_test_utils import rollout_processor_with_retry  # noqa: E402
from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: E402

from spectrum_rft.rollouts import mcp_client as smp  # noqa: E402
from harness import NullLogger  # noqa: E402
from loopback_llm import (calls_this_scan, chat_response, ok, policy_responder,  # noqa: E402
                          scan_number, tool_call)
from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows  # noqa: E402
from spectrum_rft.rollouts.failures import FAULT_OF_CAUSE  # noqa: E402
from spectrum_rft.task.environment import env_for_row  # noqa: E402
from spectrum_rft.rollouts.row_result import evaluate_row  # noqa: E402
from spectrum_rft.rollouts.driver import ARGS_PREVIEW_CHARS  # noqa: E402
from spectrum_rft.rollouts.failures import FAILURE_CAUSES, MODEL_FAILURE  # noqa: E402
from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor  # noqa: E402

N_SCANS = 12
TRIES = 2
FAST = {"llm_tries": TRIES, "backoff_base": 0.001, "backoff_max": 0.002, "request_timeout": 30.0}
PATHS = ("turn", "mcp")
pytestmark = pytest.mark.usefixtures("dummy_openai_key")


def run(path, mcp_server, rows, params):
    """Rows through eval-protocol's retry wrapper (what ``@evaluation_test`` uses), in input order."""
    if path == "turn":
        processor = SpectrumTurnRolloutProcessor(**FAST)
        kwargs = {}
    else:
        processor = smp.SpectrumMcpRolloutProcessor(**FAST)
        kwargs = {"start_server": False, "port": mcp_server.port}
    cfg = RolloutProcessorConfig(completion_params=params, mcp_config_path="", server_script_path=smp.SERVER_SCRIPT,
                                 steps=144, logger=NullLogger(), semaphore=asyncio.Semaphore(8), kwargs=kwargs)

    async def go():
        return [r async for r in rollout_processor_with_retry(processor, rows, cfg, disable_tqdm=True)]

    out = {r.input_metadata.row_id: r for r in asyncio.run(go())}
    return [out[r.input_metadata.row_id] for r in rows]


def rows(n=1, prefix="fail"):
    return dataset_adapter(make_rows(n, prefix=prefix))


def spectrum(row):
    return row.execution_metadata.extra["spectrum"]


def empty_score(row):
    env, seed = env_for_row(row.input_metadata.row_id, row.input_metadata.dataset_info)
    env.reset(seed)
    env.finish("test")
    return env.metrics()["score"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on return: nothing listens there


def assert_model_failure(row, cause):
    """The contract of a row whose model never produced a usable reply."""
    assert cause in FAILURE_CAUSES
    status = row.rollout_status
    assert status.is_error(), status
    assert status.message.startswith(f"{MODEL_FAILURE}: {cause}"), status.message
    failure = row.execution_metadata.extra["spectrum_rollout"]["model_failure"]
    assert set(failure) == {"cause", "requests", "detail"}
    assert failure["cause"] == cause and isinstance(failure["requests"], int) and failure["requests"] >= 1
    assert isinstance(failure["detail"], str) and 0 < len(failure["detail"]) <= 300
    # the env's record is complete: every scan scored (as skipped) and recorded
    s = spectrum(row)
    assert len(s["per_scan_reward"]) == N_SCANS and len(s["scan_records"]) == N_SCANS
    assert s["scans_skipped"] == N_SCANS and s["faults"]["skip_llm_failure"] == N_SCANS
    assert s["score"] == pytest.approx(empty_score(row))
    # the evaluator still scores it (0, valid) and says why
    res = evaluate_row(row).evaluation_result
    assert res.score == 0.0 and res.is_score_valid
    assert res.reason.startswith(f"rollout error: {MODEL_FAILURE}: {cause}")
    assert res.metrics["model_failure"].data == failure
    return failure


# --------------------------------------------------------------------------------------------------
# A model that never answered: an error row with its cause, not a row of skipped scans
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_a_model_answering_500_to_everything_gives_error_rows(path, mcp_server, llm):
    llm.responder = lambda r: (500, {"error": {"message": "upstream down"}}, 0.0)
    out = run(path, mcp_server, rows(2, prefix=f"dead-{path}"), llm.completion_params())
    for row in out:
        failure = assert_model_failure(row, "http 5xx")
        assert failure["requests"] == TRIES and "upstream down" in failure["detail"]
        assert llm.base_url in row.rollout_status.message  # names the endpoint
    assert llm.count == 2 * TRIES  # one model call's tries per row: eval-protocol retried nothing


@pytest.mark.parametrize("path", PATHS)
def test_a_closed_port_is_connection_refused(path, mcp_server, llm):
    params = {"model": "openai/loopback", "api_base": f"http://127.0.0.1:{closed_port()}/v1"}
    (row,) = run(path, mcp_server, rows(1, prefix=f"refused-{path}"), params)
    failure = assert_model_failure(row, "connection refused")
    assert failure["requests"] == TRIES


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("cause, reply, requests", [
    ("empty reply", (200, chat_response(choices=[]), 0.0), TRIES),
    ("rate limited", (429, {"error": {"message": "slow down"}}, 0.0), TRIES),
    ("bad request", (400, {"error": {"message": "unknown parameter"}}, 0.0), 1),  # never retried
    # an HTTP 200 litellm cannot read (tool_calls a string): litellm raises it as a 500 no server sent
    ("malformed reply", (200, {**chat_response(""), "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "", "tool_calls": 'submit_report({"center_freqs": [41.5]})'}}]}, 0.0), TRIES),
])
def test_other_causes(path, cause, reply, requests, mcp_server, llm):
    llm.responder = lambda r: reply
    (row,) = run(path, mcp_server, rows(1, prefix=f"cause-{path}"), llm.completion_params())
    assert assert_model_failure(row, cause)["requests"] == requests == llm.count
    if cause != "bad request":  # each failed try is counted as the fault it was, and as nothing else
        llm_faults = {k: v for k, v in spectrum(row)["faults"].items() if k.startswith("llm_")}
        assert llm_faults == {FAULT_OF_CAUSE[cause]: requests, "llm_gave_up": 1}


# --------------------------------------------------------------------------------------------------
# A model that worked, then failed: not an error; the later scans are skipped and counted
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_a_model_that_worked_then_failed_is_not_an_error(path, mcp_server, llm):
    good, k = policy_responder("accumulate"), 3
    (clean,) = run(path, mcp_server, rows(1, prefix=f"late-{path}"), llm.completion_params())
    llm.responder = lambda r: good(r) if scan_number(r) <= k else (500, {"error": {"message": "down"}}, 0.0)
    (row,) = run(path, mcp_server, rows(1, prefix=f"late-{path}"), llm.completion_params())
    assert row.rollout_status.is_finished(), row.rollout_status
    assert "model_failure" not in row.execution_metadata.extra["spectrum_rollout"]
    assert row.execution_metadata.extra["spectrum_rollout"]["model_calls"] == k
    s = spectrum(row)
    assert s["scans_completed"] == k and s["scans_skipped"] == N_SCANS - k
    assert s["faults"]["skip_llm_failure"] == N_SCANS - k
    assert s["per_scan_reward"][:k] == spectrum(clean)["per_scan_reward"][:k]
    res = evaluate_row(row).evaluation_result
    assert res.score == pytest.approx(s["score"]) and f"{N_SCANS - k} skipped" in res.reason


# --------------------------------------------------------------------------------------------------
# A 1.3 MB refused tool call: judged as sent, stored as a bounded preview
# --------------------------------------------------------------------------------------------------

HUGE = json.dumps({"center_freqs": [round(100.0 + (i % 3000) * 0.1, 1) for i in range(200_000)]})


@pytest.mark.parametrize("path", PATHS)
def test_a_huge_refused_tool_call_is_judged_but_not_stored(path, mcp_server, llm):
    assert len(HUGE) > 1_300_000
    honest = policy_responder("accumulate")
    (clean,) = run(path, mcp_server, rows(1, prefix=f"huge-{path}"), llm.completion_params())

    def flood(req):  # the huge report first on every scan, then the honest one
        if calls_this_scan(req) == 0:
            return ok(chat_response("", [tool_call("submit_report", HUGE)]))
        return honest(req)

    llm.responder = flood
    llm.requests.clear()
    (row,) = run(path, mcp_server, rows(1, prefix=f"huge-{path}"), llm.completion_params())
    assert row.rollout_status.is_finished(), row.rollout_status
    s = spectrum(row)
    assert s["faults"] == {"invalid_report": N_SCANS}  # the env saw (and refused) the real list every time
    assert s["per_scan_reward"] == spectrum(clean)["per_scan_reward"] and s["scans_skipped"] == 0
    refusals = [m.content for m in row.messages if m.role == "tool" and "too many regions" in str(m.content)]
    assert len(refusals) == N_SCANS
    # the row keeps a preview with the full length (12 copies of 1.3 MB would be 16 MB, twice on McpGym)
    assert len(row.model_dump_json()) < 1_000_000
    previews = [json.loads(tc.function.arguments) for m in row.messages if m.role == "assistant"
                for tc in m.tool_calls or [] if "truncated_arguments" in tc.function.arguments]
    assert len(previews) == N_SCANS
    assert all(p["full_length"] == len(HUGE) and p["truncated_arguments"] == HUGE[:ARGS_PREVIEW_CHARS]
               for p in previews)
    # nor is it sent back to the model with the next request of the scan
    assert max(len(json.dumps(r)) for r in llm.requests) < 100_000
