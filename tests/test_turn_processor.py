"""The in-process rollout path end to end: litellm -> a real HTTP chat server on 127.0.0.1 -> tool calls
executed in the env. Faults are injected by the server (tests/loopback_llm.py)."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(Path(__file__).resolve().parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

from eval_protocol.dataset_logger.dataset_logger import DatasetLogger  # noqa: E402
from eval_protocol.models import EvaluationRow, Status  # noqa: E402
from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: E402

from loopback_llm import (LoopbackLLM, calls_this_scan, chat_response, ok, policy_responder,  # noqa: E402
                          scan_number, sequence, tool_call)
from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows  # noqa: E402
from spectrum_rft.task.environment import EXTRA_SUBMIT, NUDGE, env_for_row  # noqa: E402
from spectrum_rft.rollouts.row_result import evaluate_row  # noqa: E402
from spectrum_rft.baselines import policy_models as spectrum_models  # noqa: E402
from spectrum_rft.rollouts.driver import run_tools  # noqa: E402
from spectrum_rft.rollouts.episode import InProcessEpisode  # noqa: E402
from spectrum_rft.rollouts.model_calls import CallStats  # noqa: E402
from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor  # noqa: E402

# the scripted ``spectrum/<policy>`` models, registered by explicit configuration (the rollouts never import
# the baselines); ``prepare`` once the baselines offer it
PREPARE = getattr(spectrum_models, "prepare", None) or (lambda params: spectrum_models.register())

N_SCANS = 12


@pytest.fixture(scope="module", autouse=True)
def _offline():
    """A dummy key for the loopback OpenAI-compatible server (the offline settings: conftest)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "dummy")
        yield


@pytest.fixture(scope="module")
def server(_offline):
    s = LoopbackLLM().start()
    yield s
    s.stop()


@pytest.fixture
def llm(server):
    """The module's server with a fresh log and the honest accumulate policy as its default answer."""
    server.responder = policy_responder("accumulate")
    server.requests.clear()
    return server


class CountingLogger(DatasetLogger):
    def __init__(self):
        self.calls = 0

    def log(self, row):
        self.calls += 1

    def read(self, rollout_id=None):
        return []


def rows(n=1, memory_mode="scaffold", prompt="explicit"):
    return dataset_adapter(make_rows(n, prompt=prompt, memory_mode=memory_mode, prefix="turn-test"))


def fast_processor(**kw):
    return SpectrumTurnRolloutProcessor(**{"llm_tries": 3, "backoff_base": 0.001, "backoff_max": 0.002,
                                           "request_timeout": 5.0, "prepare_model": PREPARE, **kw})


def run(rows_, params, processor=None, logger=None, concurrency=64):
    processor = processor or fast_processor()

    async def go():
        cfg = RolloutProcessorConfig(completion_params=params, mcp_config_path="",
                                     semaphore=asyncio.Semaphore(concurrency), logger=logger or CountingLogger())
        return await asyncio.gather(*processor(rows_, cfg))

    return asyncio.run(go())


def spectrum(row):
    return row.execution_metadata.extra["spectrum"]


def faults(row):
    return spectrum(row)["faults"]


def empty_score(row):
    """The score of reporting nothing on every scan (what a rollout that never reports must get)."""
    env, seed = env_for_row(row.input_metadata.row_id, row.input_metadata.dataset_info)
    env.reset(seed)
    env.finish("test")
    return env.metrics()["score"]


def assert_complete(row):
    """The invariants of every rollout, faulty or not."""
    assert row.rollout_status.is_finished(), row.rollout_status
    s = spectrum(row)
    assert len(s["per_scan_reward"]) == N_SCANS and len(s["scan_records"]) == N_SCANS
    assert s["scans_completed"] + s["scans_skipped"] == N_SCANS
    assert all(math.isfinite(r) and 0.0 <= r <= 1.0 for r in s["per_scan_reward"])
    assert s["score"] == pytest.approx(sum(s["per_scan_reward"]) / N_SCANS)
    # the chat API's pairing rule: every tool result answers a tool call of the assistant message before it
    pending: set[str] = set()
    for m in row.messages:
        if m.role == "assistant":
            assert not pending, "tool calls left unanswered"
            pending = {tc.id for tc in m.tool_calls or []}
        elif m.role == "tool":
            assert m.tool_call_id in pending
            pending.discard(m.tool_call_id)
        else:
            assert not pending
    evaluate_row(row)
    assert row.evaluation_result.score == pytest.approx(s["score"])
    assert len(row.evaluation_result.step_outputs) == N_SCANS


@pytest.fixture(scope="module")
def clean(server):
    """The fault-free reference rollout of the test row (scaffold and notepad)."""
    server.responder = policy_responder("accumulate")
    out = {}
    for mode in ("scaffold", "notepad"):
        (row,) = run(rows(1, mode), server.completion_params())
        assert not server.errors, server.errors[:1]
        assert_complete(row)
        assert not faults(row)
        out[mode] = spectrum(row)["score"]
    return out


# --------------------------------------------------------------------------------------------------
# The happy path
# --------------------------------------------------------------------------------------------------


def test_end_to_end_over_http_matches_the_in_process_baseline(llm, clean):
    (http_row,) = run(rows(), llm.completion_params())
    (model_row,) = run(rows(), {"model": "spectrum/accumulate"})
    for r in (http_row, model_row):
        assert_complete(r)
        assert spectrum(r)["scans_skipped"] == 0
    assert spectrum(http_row)["score"] == spectrum(model_row)["score"] == clean["scaffold"]
    assert spectrum(http_row)["band_fingerprint"] == spectrum(model_row)["band_fingerprint"]
    assert http_row.tools == model_row.tools and {t["function"]["name"] for t in http_row.tools} == {"submit_report"}
    assert http_row.execution_metadata.extra["spectrum_rollout"] == {"transport": "turn", "model_calls": 12,
                                                                      "llm_requests": 12}
    # what the model saw: ICL-off window = system + the current scan; tools on every request, no tool_choice
    assert len(llm.requests) == N_SCANS
    for k, req in enumerate(llm.requests, start=1):
        assert [m["role"] for m in req["messages"]] == ["system", "user"]
        assert scan_number(req) == k
        assert req["tools"] == http_row.tools and "tool_choice" not in req
    # the row: opening messages, then per scan: scan, assistant tool call, tool result
    roles = [m.role for m in http_row.messages]
    assert roles[:2] == ["system", "user"] and roles[2:] == ["user", "assistant", "tool"] * N_SCANS
    assert http_row.messages[-1].control_plane_step["advanced"] is True
    assert http_row.input_metadata.completion_params["model"] == "openai/loopback"
    assert http_row.execution_metadata.usage.total_tokens == 15 * N_SCANS


def test_tool_choice_only_when_the_params_carry_it(llm):
    (row,) = run(rows(), llm.completion_params(tool_choice="auto", temperature=0.0))
    assert_complete(row)
    assert all(r["tool_choice"] == "auto" and r["temperature"] == 0.0 for r in llm.requests)


def test_icl_sees_everything_and_think_blocks_are_stripped(llm):
    base = policy_responder("accumulate")

    def thinking(req):
        status, body, delay = base(req)
        body["choices"][0]["message"]["content"] = "<think>" + "hmm " * 50 + "</think>ok"
        return status, body, delay

    llm.responder = thinking
    (row,) = run(rows(1, "icl"), llm.completion_params())
    assert_complete(row)
    last = llm.requests[-1]["messages"]
    assert sum(1 for m in last if m["role"] == "user" and m["content"].startswith("Scan ")) == N_SCANS
    assert all("<think>" not in (m.get("content") or "") for m in last)
    # the row keeps what the model said (litellm moves a leading think block into reasoning_content)
    said = row.messages[3]
    assert "<think>" in said.content or said.reasoning_content.startswith("hmm")


def test_notepad_mode_round_trip(llm, clean):
    (row,) = run(rows(1, "notepad", "notepad-explicit"), llm.completion_params())
    assert_complete(row)
    names = {t["function"]["name"] for t in row.tools}
    assert names == {"submit_report", "notepad_read", "notepad_write"}
    assert spectrum(row)["score"] == clean["notepad"]
    reads = [m.content for m in row.messages if m.role == "tool" and m.name == "notepad_read"]
    assert reads[0] == "(the notepad is empty)" and all(r[0].isdigit() for r in reads[1:])


def test_logging_is_sparse(llm):
    logger = CountingLogger()
    (row,) = run(rows(), llm.completion_params(), fast_processor(log_every_scans=6), logger)
    assert logger.calls == 2  # at the start and at scan 7 (eval-protocol logs the returned row)
    logger = CountingLogger()
    run(rows(), llm.completion_params(), fast_processor(log_every_scans=0, log_final=True), logger)
    assert logger.calls == 2  # start + end


# --------------------------------------------------------------------------------------------------
# Faults injected by the server: the rollout completes, every scan is scored, nothing is inflated
# --------------------------------------------------------------------------------------------------


def test_transient_500s_are_retried(llm, clean):
    llm.responder = sequence(lambda r: (500, {"error": {"message": "overloaded"}}, 0.0),
                             lambda r: (503, "<html>busy</html>", 0.0), policy_responder("accumulate"))
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert faults(row) == {"llm_5xx": 2}
    assert spectrum(row)["score"] == clean["scaffold"]
    assert row.execution_metadata.extra["spectrum_rollout"]["llm_requests"] == N_SCANS + 2


def test_persistent_500s_force_advance_the_scan(llm, clean):
    good = policy_responder("accumulate")
    llm.responder = lambda r: (500, {"error": {"message": "down"}}, 0.0) if scan_number(r) == 3 else good(r)
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    f = faults(row)
    assert f["llm_5xx"] == 3 and f["llm_gave_up"] == 1 and f["skip_llm_failure"] == 1
    assert spectrum(row)["scans_skipped"] == 1 and spectrum(row)["scan_records"][2]["skipped"]
    assert spectrum(row)["score"] < clean["scaffold"]


def test_timeouts_and_dropped_connections(llm, clean):
    # only the first request hangs (for far longer than the generous 5 s timeout; released when the server
    # stops): no normal reply can time out, however loaded the machine
    good = policy_responder("accumulate")
    llm.responder = sequence(lambda r: (200, chat_response("late"), 600.0), lambda r: (200, None, 0.0), good)
    (row,) = run(rows(), llm.completion_params(), fast_processor(request_timeout=5.0))
    assert_complete(row)
    assert faults(row) == {"llm_timeout": 1, "llm_error": 1}  # a dropped connection has no HTTP status
    assert spectrum(row)["score"] == clean["scaffold"]


def test_a_dead_server_is_an_error_row_that_still_scores_every_scan(llm):
    llm.responder = lambda r: (500, {"error": {"message": "down"}}, 0.0)
    (row,) = run(rows(), llm.completion_params(), fast_processor(llm_tries=2))
    assert row.rollout_status.is_error()
    assert row.rollout_status.message.startswith("model never produced a usable reply: http 5xx")
    s = spectrum(row)
    assert len(s["per_scan_reward"]) == N_SCANS and s["scans_skipped"] == N_SCANS
    assert s["faults"] == {"llm_5xx": 2, "llm_gave_up": 1, "skip_llm_failure": N_SCANS}
    assert s["score"] == pytest.approx(empty_score(row))
    assert len(llm.requests) == 2  # one model call's tries: nothing more is asked of a model that never answered


def test_empty_choices_and_truncation_are_retried(llm, clean):
    llm.responder = sequence(lambda r: ok(chat_response(choices=[])),
                             lambda r: ok(chat_response("I think the answer is", finish_reason="length")),
                             policy_responder("accumulate"))
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert faults(row) == {"llm_empty_choices": 1, "llm_truncated": 1}
    assert spectrum(row)["score"] == clean["scaffold"]


def test_malformed_json_arguments(llm, clean):
    # once: resampled, nothing lost
    llm.responder = sequence(lambda r: ok(chat_response("", [tool_call("submit_report", '{"center_freqs": [1,')])),
                             policy_responder("accumulate"))
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert faults(row) == {"llm_bad_tool_json": 1} and spectrum(row)["score"] == clean["scaffold"]
    # always: the last try's call gets an error result naming the problem; the budget then skips the scan
    llm.responder = lambda r: ok(chat_response("", [tool_call("submit_report", "{oops")]))
    (row,) = run(rows(), llm.completion_params(), fast_processor(llm_tries=1))
    assert_complete(row)
    s = spectrum(row)
    assert s["scans_skipped"] == N_SCANS and s["faults"]["skip_call_budget"] == N_SCANS
    assert s["score"] == pytest.approx(empty_score(row))
    errors = [m.content for m in row.messages if m.role == "tool"]
    assert len(errors) == 4 * N_SCANS and all("not valid JSON" in e for e in errors)


def test_text_without_tool_calls(llm):
    llm.responder = lambda r: ok(chat_response("The occupied regions are 100 and 200 MHz. SCAN_OCC: 1.0"))
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    s = spectrum(row)
    assert s["scans_skipped"] == N_SCANS and s["faults"] == {"skip_call_budget": N_SCANS}
    assert s["score"] == pytest.approx(empty_score(row))
    nudges = [m for m in row.messages if m.role == "user" and m.content == NUDGE]
    assert len(nudges) == 3 * N_SCANS  # K=4 calls a scan; no reminder after the last one
    # the reminder stays inside the ICL-off window of its scan
    assert llm.requests[1]["messages"][-1] == {"role": "user", "content": NUDGE}
    assert scan_number(llm.requests[1]) == 1


def row_meta(row):
    """What a ``spectrum/`` model gets in its litellm metadata (the loopback oracle needs it too)."""
    return {"row_id": row.input_metadata.row_id, "dataset_info": row.input_metadata.dataset_info}


def test_two_submits_in_one_message(llm, clean):
    honest = policy_responder("accumulate")
    oracle = policy_responder("oracle", row=row_meta(rows()[0]))

    def double(req):
        _, body, _ = honest(req)
        _, better, _ = oracle(req)  # a second, better report must not count (nor land on the next scan)
        body["choices"][0]["message"]["tool_calls"] += better["choices"][0]["message"]["tool_calls"]
        return 200, body, 0.0

    llm.responder = double
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert faults(row) == {"extra_submit": N_SCANS - 1, "call_after_end": 1}
    assert spectrum(row)["score"] == clean["scaffold"]
    assert sum(1 for m in row.messages if m.role == "tool" and m.content == EXTRA_SUBMIT) == N_SCANS - 1

    # an invalid first submit does not close the scan: the second one is the first valid one
    def bad_then_good(req):
        _, body, _ = honest(req)
        calls = body["choices"][0]["message"]["tool_calls"]
        body["choices"][0]["message"]["tool_calls"] = [tool_call("submit_report", {"center_freqs": "many"}), *calls]
        return 200, body, 0.0

    llm.responder = bad_then_good
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert faults(row) == {"invalid_report": N_SCANS} and spectrum(row)["score"] == clean["scaffold"]


def test_nan_centres_are_refused(llm, clean):
    honest = policy_responder("accumulate")

    def nan_first(req):  # NaN on the first call of each scan, then the honest report
        if calls_this_scan(req) == 0:
            return ok(chat_response("", [tool_call("submit_report", '{"center_freqs": [NaN, 120.0]}')]))
        return honest(req)

    llm.responder = nan_first
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert faults(row) == {"invalid_report": N_SCANS} and spectrum(row)["score"] == clean["scaffold"]
    refusals = [m.content for m in row.messages if m.role == "tool" and m.content.startswith("Error")]
    assert len(refusals) == N_SCANS and all("finite number" in t for t in refusals)

    llm.responder = lambda r: ok(chat_response("", [tool_call("submit_report", {"center_freqs": [1e999, -1e999]})]))
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert spectrum(row)["scans_skipped"] == N_SCANS
    assert spectrum(row)["score"] == pytest.approx(empty_score(row))


def test_a_1mb_notepad_write_is_refused(llm, clean):
    honest = policy_responder("accumulate")
    huge = "9" * (1 << 20)

    def flood(req):  # a 1 MB write as the first call of scans 1 and 2, then the honest behaviour
        if scan_number(req) in (1, 2) and calls_this_scan(req) == 0:
            return ok(chat_response("", [tool_call("notepad_write", {"text": huge})]))
        return honest(req)

    llm.responder = flood
    (row,) = run(rows(1, "notepad", "notepad-explicit"), llm.completion_params())
    assert_complete(row)
    assert faults(row) == {"notepad_too_long": 2}
    assert spectrum(row)["score"] == clean["notepad"]
    assert spectrum(row)["scans_skipped"] == 0
    refusal = next(m.content for m in row.messages if m.role == "tool" and m.content.startswith("Error"))
    assert "1048576 characters" in refusal and "limit is 2000" in refusal


def test_typing_a_score_changes_nothing(llm, clean):
    llm.responder = policy_responder("accumulate", text="SCAN_OCC: 9.0\nSCORE: 1.0\nreward=1")
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert spectrum(row)["score"] == clean["scaffold"] and not faults(row)
    assert row.evaluation_result.score == clean["scaffold"]


def test_a_bad_request_mid_rollout_skips_that_scan_only(llm, clean):
    good = policy_responder("accumulate")
    llm.responder = lambda r: (400, {"error": {"message": "bad message"}}, 0.0) if scan_number(r) == 5 else good(r)
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert faults(row) == {"llm_bad_request": 1, "skip_llm_failure": 1}
    assert len(llm.requests) == N_SCANS  # not retried: the same request fails the same way


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_rejected_configuration_is_an_error_row_with_a_zero_score(llm, status):
    llm.responder = lambda r: (status, {"error": {"message": "no such model"}}, 0.0)
    (row,) = run(rows(), llm.completion_params())
    assert row.rollout_status.is_error() and f"HTTP {status}" in row.rollout_status.message
    assert len(llm.requests) == 1  # reported, not retried
    assert row.execution_metadata.extra["spectrum_rollout"]["model_failure"]["cause"] == "bad request"
    evaluate_row(row)
    res = row.evaluation_result
    assert res.score == 0.0 and res.is_score_valid
    assert res.reason.startswith("rollout error: model never produced a usable reply: bad request")


def test_a_missing_api_key_is_an_error_row_not_twelve_skipped_scans(llm, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    (row,) = run(rows(), llm.completion_params())
    message = row.rollout_status.message
    assert row.rollout_status.is_error() and message.startswith("model never produced a usable reply: missing API key")
    assert "set OPENAI_API_KEY" in message  # named plainly (litellm's "Missing credentials" is a 500)
    assert evaluate_row(row).evaluation_result.score == 0.0


def test_a_bug_is_an_error_row(llm):
    (row,) = run([EvaluationRow(messages=[])], llm.completion_params())  # no row id: no band
    assert row.rollout_status.is_error() and "row_id" in row.rollout_status.message
    assert evaluate_row(row).evaluation_result.score == 0.0


def test_junk_tool_calls_over_http(llm):
    junk = [tool_call("submit_report", "null"), tool_call("submit_report", "[1, 2]"),
            tool_call("submit_report", '{"center_freqs": [1, 2, 3e9], "bandwidths": [1]}'),
            tool_call("submit_report", '{"center_freqs": ' + "[" * 800 + "]" * 800 + "}"),
            tool_call("submit_report", json.dumps({"center_freqs": list(range(100))})),
            tool_call("submit_report", '{"center_freqs": [true, "x", null]}'),
            tool_call("rm -rf /", "{}"), tool_call("", ""), tool_call("notepad_write", '{"text": 5}'),
            tool_call("submit_report", "{}", call_id="same"), tool_call("notepad_read", "{}", call_id="same")]
    llm.responder = lambda r: ok(chat_response("", junk))
    (row,) = run(rows(), llm.completion_params())
    assert_complete(row)
    assert spectrum(row)["scans_skipped"] == N_SCANS
    assert spectrum(row)["score"] == pytest.approx(empty_score(row))


# --------------------------------------------------------------------------------------------------
# Concurrency: GRPO candidates of one row
# --------------------------------------------------------------------------------------------------


POLICIES = ("accumulate", "memoryless", "oracle", "empty", "carpet-16", "random-8")


def test_48_concurrent_rollouts_of_one_row_stay_separate(llm):
    (row,) = rows(1, "notepad", "notepad-explicit")
    proc = fast_processor()

    async def go():
        tasks = []
        for i, policy in enumerate(POLICIES):
            params = {"model": f"spectrum/{policy}"} if i % 2 else llm.completion_params(model=policy)
            cfg = RolloutProcessorConfig(completion_params=params, mcp_config_path="",
                                         semaphore=asyncio.Semaphore(48), logger=CountingLogger())
            tasks += proc([row.model_copy(deep=True) for _ in range(8)], cfg)
        return await asyncio.gather(*tasks)

    llm.responder = lambda r: policy_responder(r["model"], row=row_meta(row))(r)
    out = asyncio.run(go())
    assert len(out) == 48
    scans = {tuple(m.content for m in r.messages if m.role == "user" and m.content.startswith("Scan ")) for r in out}
    assert len(scans) == 1 and len(next(iter(scans))) == N_SCANS  # identical scans for every candidate
    by_policy: dict[str, set[float]] = {}
    for i, r in enumerate(out):
        assert_complete(r)
        assert spectrum(r)["band_fingerprint"] == spectrum(out[0])["band_fingerprint"]
        by_policy.setdefault(POLICIES[i // 8], set()).add(spectrum(r)["score"])
        # its own notepad: every read returns exactly what this rollout wrote last
        last_write = None
        calls = {tc.id: tc for m in r.messages if m.role == "assistant" for tc in m.tool_calls or []}
        for m in r.messages:
            if m.role != "tool":
                continue
            fn = calls[m.tool_call_id].function
            if fn.name == "notepad_write":
                last_write = json.loads(fn.arguments)["text"]
            elif fn.name == "notepad_read":
                assert m.content == (last_write if last_write else "(the notepad is empty)")
    assert all(len(scores) == 1 for scores in by_policy.values()), by_policy  # same policy, same score
    s = {p: next(iter(v)) for p, v in by_policy.items()}
    assert s["oracle"] > s["accumulate"] > s["memoryless"] > s["empty"]


# --------------------------------------------------------------------------------------------------
# Properties: no tool call from a model can crash the loop
# --------------------------------------------------------------------------------------------------

json_values = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
                           lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=12), c, max_size=5),
                           max_leaves=20)
arguments = st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(["center_freqs", "bandwidths", "text", "notepad_update", "x"]), json_values,
                    max_size=3).map(json.dumps),
    st.fixed_dictionaries({"center_freqs": st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20)})
    .map(json.dumps),
)
names = st.sampled_from(["submit_report", "notepad_read", "notepad_write", "other"]) | st.text(max_size=10)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["scaffold", "notepad", "icl_notepad"]),
       messages=st.lists(st.lists(st.tuples(names, arguments), min_size=0, max_size=4), min_size=1, max_size=8))
def test_arbitrary_tool_calls_never_crash_the_loop(mode, messages):
    row = make_rows(1, memory_mode=mode, prefix="prop")[0]
    ep = InProcessEpisode.for_row(row["id"], row["environment_context"])
    env = ep.env
    asyncio.run(ep.start())
    transcript: list[dict] = []
    for calls in messages:
        if env.done:
            break
        tcs = [tool_call(n, a, f"c{i}") for i, (n, a) in enumerate(calls)]
        before, n_before = env.scan_index, len(transcript)
        if tcs:
            asyncio.run(run_tools(ep, tcs, transcript, CallStats()))
        else:
            asyncio.run(ep.no_tool_call())
        results = transcript[n_before:]
        assert [m["tool_call_id"] for m in results] == [tc["id"] for tc in tcs]  # one result per call
        assert env.done or env.scan_index in (before, before + 1)  # at most one scan closes per message
        assert sum(1 for m in results if m["content"].startswith("Scan ")) <= 1
        assert not env._state().turn_open  # every message ends its model turn (the env's private state)
    env.finish("test")
    m = env.metrics()
    assert len(m["per_scan_reward"]) == N_SCANS and all(0.0 <= r <= 1.0 for r in m["per_scan_reward"])


# --------------------------------------------------------------------------------------------------
# evaluate_row and the evaluation entry
# --------------------------------------------------------------------------------------------------


def test_evaluate_row_carries_every_metric(llm):
    (row,) = run(rows(), {"model": "spectrum/accumulate"})
    evaluate_row(row)
    res, s = row.evaluation_result, spectrum(row)
    assert set(res.metrics) == set(s) - {"scan_records"}
    assert res.score == s["score"] and res.is_score_valid
    assert [o.base_reward for o in res.step_outputs] == s["per_scan_reward"]
    assert [o.step_index for o in res.step_outputs] == list(range(1, N_SCANS + 1))
    assert res.step_outputs[-1].terminated and not res.step_outputs[0].terminated
    assert res.metrics["band_fingerprint"].data["value"] == s["band_fingerprint"]
    assert res.metrics["seed"].data["value"] == s["seed"]
    assert res.metrics["faults"].score == 0.0 and res.metrics["faults"].data == {}
    assert res.metrics["scans_skipped"].score == 0.0
    # metrics that are undefined for an episode are flagged, not scored as 0
    row.execution_metadata.extra["spectrum"] = {**s, "memory_gain": None}
    assert evaluate_row(row).evaluation_result.metrics["memory_gain"].is_score_valid is False
    # an errored rollout: valid zero score, the reason says why
    row.rollout_status = Status.rollout_error("boom")
    res = evaluate_row(row).evaluation_result
    assert res.score == 0.0 and res.is_score_valid and res.reason == "rollout error: boom"


def test_the_evaluation_entry_scores_a_row_directly():
    import test_spectrum_turn  # noqa: PLC0415

    (row,) = run(rows(), {"model": "spectrum/accumulate"})
    out = test_spectrum_turn.test_spectrum_turn(row)
    out = asyncio.run(out) if asyncio.iscoroutine(out) else out
    assert out.evaluation_result.score == spectrum(row)["score"]
