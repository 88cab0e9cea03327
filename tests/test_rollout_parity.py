"""One rollout behaviour on both paths: the same scripted (faulty) model, through the in-process path and
through the MCP path (the real spectrum_server.py process), gets identical per-scan rewards, identical
fault counts and identical texts shown to the model (every request the model received, text by text,
whatever carried them).

The carrier of a scan is the one difference: in-process every scan is a user message; over MCP scans 2..N
arrive in the result of the ``submit_report`` call that closed the previous scan ("<feedback>\n\n<scan>"),
unless no such result exists (a reply without tool calls used up the budget, a model call failed on every
try, the budget closed on a call to another tool): then a user message, as in-process. :func:`carried`
puts both shapes into one form (the scan after the tool results of the message that closed the scan).

The env decides everything (what counts as a call, what an unknown tool gets, when a scan closes, what the
model is told); the transports only carry it. The model is tests/loopback_llm.py over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: E402

from harness import NullLogger  # noqa: E402
from loopback_llm import (calls_this_scan, chat_response, ok, policy_responder,  # noqa: E402
                          scan_number, tool_call)
from spectrum_rft.rollouts import mcp_client as smp  # noqa: E402
from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows  # noqa: E402
from spectrum_rft.rollouts.row_result import evaluate_row  # noqa: E402
from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor  # noqa: E402
from spectrum_rft.task.environment import AFTER_END, EXTRA_SUBMIT, MAX_ARGUMENT_BYTES, NUDGE, STILL_OPEN  # noqa: E402
from spectrum_rft.task.scan_format import HEADER, is_scan_recorded  # noqa: E402
from spectrum_rft.task.window import is_scan_message, report_call_ids  # noqa: E402

N_SCANS = 12
FAST = {"llm_tries": 2, "backoff_base": 0.001, "backoff_max": 0.002, "request_timeout": 30.0}
pytestmark = pytest.mark.usefixtures("dummy_openai_key")


def run(path, server, raw_row, responder, llm, params=None, **settings):
    """One row through one path; (row, the requests the model received)."""
    llm.responder = responder
    llm.requests.clear()
    if path == "turn":
        processor, kwargs = SpectrumTurnRolloutProcessor(**{**FAST, **settings}), {}
    else:
        processor = smp.SpectrumMcpRolloutProcessor(**{**FAST, **settings})
        kwargs = {"start_server": False, "port": server.port}
    cfg = RolloutProcessorConfig(completion_params=params or llm.completion_params(), mcp_config_path="",
                                 server_script_path=smp.SERVER_SCRIPT, steps=144, logger=NullLogger(),
                                 semaphore=asyncio.Semaphore(4), kwargs=kwargs)

    async def go():
        return await asyncio.gather(*processor(dataset_adapter([raw_row]), cfg))

    (row,) = asyncio.run(go())
    return row, list(llm.requests)


def _get(m, key):
    return m.get(key) if isinstance(m, dict) else getattr(m, key, None)


def carried(messages):
    """What the model is shown, whatever carried it: ``(role, text)`` of every message but the assistant's,
    a scan as ``("scan", text)``. A tool result that carries the next scan ("<feedback>\n\n<scan>") counts
    as its feedback, and its scan comes after the tool results of the same model message: where the
    in-process path puts the scan's user message."""
    ids = report_call_ids(messages)
    out, pending = [], None
    for m in messages:
        role, text = _get(m, "role"), _get(m, "content")
        if role != "tool" and pending is not None:
            out.append(("scan", pending))
            pending = None
        if role == "assistant":
            continue
        if is_scan_message(m, ids):
            if role == "user":
                out.append(("scan", text))
                continue
            at = HEADER.search(text).start()
            assert at >= 2 and text[at - 2:at] == "\n\n", text  # "<feedback>\n\n<scan>"
            assert pending is None  # one scan per model message
            text, pending = text[:at - 2], text[at:]
        out.append((role, text))
    if pending is not None:
        out.append(("scan", pending))
    return out


def shown_in(messages):
    """:func:`carried` of one request. An ICL-off window on the MCP path starts at the model message whose
    tool call returned the scan, so it also shows the previous scan's tool results before that scan: not
    compared (the in-process window starts at the scan's user message)."""
    texts = carried(messages)
    first = next((i for i, (role, _) in enumerate(texts) if role == "scan"), len(texts))
    return [t for i, t in enumerate(texts) if i >= first or t[0] != "tool"]


def scan_carriers(messages):
    """(scan number, role of the message that carried it) for every scan, in order."""
    ids = report_call_ids(messages)
    return [(int(HEADER.search(_get(m, "content")).group(1)), _get(m, "role"))
            for m in messages if is_scan_message(m, ids)]


def closed_by_a_report(messages):
    """Scan numbers (>= 2) whose previous scan was closed by a ``submit_report`` call (scored, or the budget
    closed it): read from the in-process transcript, where the tool results of the closing message come
    right before the next scan's user message."""
    ids = report_call_ids(messages)
    out = set()
    for i, m in enumerate(messages):
        if not (_get(m, "role") == "user" and is_scan_message(m)) or i == 0:
            continue
        j = i - 1
        while j >= 0 and _get(messages[j], "role") == "tool":
            t = _get(messages[j], "content")
            if _get(messages[j], "tool_call_id") in ids and (is_scan_recorded(t) or "closed without a valid report" in t):
                out.add(int(HEADER.search(_get(m, "content")).group(1)))
            j -= 1
    return out


def both(server, llm, raw_row, responder, **kw):
    """Run both paths; assert they agree on everything; return the turn path's row and requests, and the
    MCP path's row. ``responder``: a responder, or a ``make() -> responder`` (a fresh one per path:
    stateful scripts)."""
    make = responder if getattr(responder, "fresh_per_path", False) else (lambda: responder)
    turn, turn_req = run("turn", server, raw_row, make(), llm, **kw)
    mcp, mcp_req = run("mcp", server, raw_row, make(), llm, **kw)
    assert turn.rollout_status.code == mcp.rollout_status.code, (turn.rollout_status, mcp.rollout_status)
    st, sm = turn.execution_metadata.extra["spectrum"], mcp.execution_metadata.extra["spectrum"]
    assert sm["per_scan_reward"] == st["per_scan_reward"]
    assert sm["faults"] == st["faults"]
    assert sm["scan_records"] == st["scan_records"] and sm == st  # the env's whole record
    # every text the model was shown, request by request, in order, whatever carried it
    assert len(mcp_req) == len(turn_req)
    for i, (q_mcp, q_turn) in enumerate(zip(mcp_req, turn_req)):
        assert shown_in(q_mcp["messages"]) == shown_in(q_turn["messages"]), f"request {i}"
        assert shown_in(q_turn["messages"]) == carried(q_turn["messages"])  # in-process: nothing left out
    assert carried(mcp.messages) == carried(turn.messages)  # the whole transcript
    # the carriers: in-process every scan is a user message; over MCP the first one, and the scans whose
    # previous scan no submit_report result closed; every other scan arrives in a tool result
    ct, cm = scan_carriers(turn.messages), scan_carriers(mcp.messages)
    assert [k for k, _ in cm] == [k for k, _ in ct]
    assert all(role == "user" for _, role in ct)
    by_report = closed_by_a_report(turn.messages)
    assert cm == [(k, "tool" if k in by_report else "user") for k, _ in ct]
    assert all(role == "tool" for k, role in cm if k in by_report) and (not cm or cm[0][1] == "user")
    assert evaluate_row(mcp).evaluation_result.score == evaluate_row(turn).evaluation_result.score
    rt, rm = (r.execution_metadata.extra["spectrum_rollout"] for r in (turn, mcp))
    assert {**rm, "transport": "turn"} == rt
    return turn, turn_req, mcp


def tool_scans(r):
    """Scan numbers that arrived in a tool result."""
    return [k for k, role in scan_carriers(r.messages) if role == "tool"]


def row(prefix, **kw):
    return make_rows(1, prefix=prefix, **kw)[0]


def faults(r):
    return r.execution_metadata.extra["spectrum"]["faults"]


def tool_texts(r):
    return [m.content for m in r.messages if m.role == "tool"]


HONEST = policy_responder("accumulate")


def test_clean_rollout(mcp_server, loopback):
    r, _, m = both(mcp_server, loopback, row("p-clean"), HONEST)
    assert not faults(r)
    assert tool_scans(m) == list(range(2, N_SCANS + 1)) and tool_scans(r) == []  # scans 2..N: tool results
    first = next(x for x in m.messages if is_scan_message(x))
    assert first.role == "user" and first.content == next(x for x in r.messages if is_scan_message(x)).content
    carrier = next(x for x in m.messages if x.role == "tool" and is_scan_message(x))
    assert carrier.content.startswith("Scan 1 recorded.\n\nScan 2/12 | band ")


def test_clean_rollout_icl(mcp_server, loopback):
    """The whole conversation is shown: the scans in tool results stay where the in-process path has them."""
    r, req, m = both(mcp_server, loopback, row("p-icl", memory_mode="icl"), HONEST)
    assert not faults(r) and tool_scans(m) == list(range(2, N_SCANS + 1))
    assert [k for k, _ in scan_carriers(req[-1]["messages"])] == list(range(1, N_SCANS + 1))


def test_text_only_reply_at_scan_3(mcp_server, loopback):
    def respond(req):
        if scan_number(req) == 3 and calls_this_scan(req) == 0:
            return ok(chat_response("The band looks busy."))
        return HONEST(req)

    r, req, m = both(mcp_server, loopback, row("p-text"), respond)
    assert not faults(r) and r.execution_metadata.extra["spectrum"]["scans_skipped"] == 0
    assert sum(1 for m in r.messages if m.role == "user" and m.content == NUDGE) == 1
    assert len(req) == N_SCANS + 1  # the reminder cost one model call of scan 3's budget, nothing more
    assert tool_scans(m) == list(range(2, N_SCANS + 1))  # the report after the reminder carries scan 4


def test_four_unknown_tool_calls_then_a_report_every_scan(mcp_server, loopback):
    def respond(req):
        if calls_this_scan(req) < 4:
            return ok(chat_response("", [tool_call("submit_reports", {"center_freqs": [100.0]})]))
        return HONEST(req)

    r, req, m = both(mcp_server, loopback, row("p-unknown"), respond)
    assert faults(r) == {"unknown_tool": 4 * N_SCANS, "skip_call_budget": N_SCANS}
    assert r.execution_metadata.extra["spectrum"]["scans_skipped"] == N_SCANS  # the budget of 4 decides
    assert len(req) == 4 * N_SCANS  # not eval-protocol's step cap
    texts = tool_texts(r)
    assert texts[0] == "Error: unknown tool: submit_reports. Valid tools: submit_report."
    # the budget closes each scan on a call to an unknown tool: no submit_report result carries the next scan
    assert tool_scans(m) == []


def test_budget_exhaustion_says_the_scan_was_skipped(mcp_server, loopback):
    bad = lambda req: ok(chat_response("", [tool_call("submit_report", {"center_freqs": "many"})]))  # noqa: E731
    r, _, m = both(mcp_server, loopback, row("p-budget"), bad)
    assert faults(r) == {"invalid_report": 4 * N_SCANS, "skip_call_budget": N_SCANS}
    texts = tool_texts(r)
    assert len(texts) == 4 * N_SCANS
    for k in range(N_SCANS):
        *early, last = texts[4 * k:4 * k + 4]
        assert all(t.endswith(STILL_OPEN) for t in early)
        assert "still open" not in last and last.endswith(
            f"Scan {k + 1} closed without a valid report (4 model calls used); it is scored as an empty report.")
    # nothing contradicts it: the next thing the model sees is the next scan
    after = [r.messages[i + 1] for i, x in enumerate(r.messages[:-1]) if x.role == "tool" and "closed without" in x.content]
    assert all(x.role == "user" and x.content.startswith("Scan ") for x in after)
    # over MCP the same scan follows in the same tool result
    closing = [x.content for x in m.messages if x.role == "tool" and "closed without" in x.content]
    assert len(closing) == N_SCANS and tool_scans(m) == list(range(2, N_SCANS + 1))
    for k, t in enumerate(closing[:-1]):
        assert f"it is scored as an empty report.\n\nScan {k + 2}/{N_SCANS} | band " in t


def test_a_second_submit_in_one_message(mcp_server, loopback):
    def double(req):
        _, body, _ = HONEST(req)
        calls = body["choices"][0]["message"]["tool_calls"]
        shifted = json.loads(calls[0]["function"]["arguments"])
        shifted["center_freqs"] = [min(480.0, c + 3.0) for c in shifted["center_freqs"]]
        calls.append(tool_call("submit_report", shifted))
        return 200, body, 0.0

    r, _, m = both(mcp_server, loopback, row("p-double"), double)
    assert faults(r) == {"extra_submit": N_SCANS - 1, "call_after_end": 1}
    assert sum(1 for t in tool_texts(r) if t == EXTRA_SUBMIT) == N_SCANS - 1
    # the scan rides on the result of the report that scored it, not on the refused second one
    assert tool_scans(m) == list(range(2, N_SCANS + 1))
    assert sum(1 for t in tool_texts(m) if t == EXTRA_SUBMIT) == N_SCANS - 1


def test_a_call_after_the_end(mcp_server, loopback):
    def respond(req):
        status, body, delay = HONEST(req)
        if scan_number(req) == N_SCANS:
            body["choices"][0]["message"]["tool_calls"].append(tool_call("notepad_read", {}))
        return status, body, delay

    r, _, m = both(mcp_server, loopback, row("p-after"), respond)
    assert faults(r) == {"call_after_end": 1} and tool_texts(r)[-1] == AFTER_END


def test_a_5mb_notepad_write_on_a_notepad_row(mcp_server, loopback):
    huge = "9" * 5_000_000

    def respond(req):
        if scan_number(req) in (1, 2) and calls_this_scan(req) == 0:
            return ok(chat_response("", [tool_call("notepad_write", {"text": huge})]))
        return HONEST(req)

    r, req, m = both(mcp_server, loopback, row("p-5mb", prompt="notepad-explicit"), respond)
    assert r.rollout_status.is_finished(), r.rollout_status
    assert faults(r) == {"arguments_too_large": 2} and r.execution_metadata.extra["spectrum"]["scans_skipped"] == 0
    refusal = next(t for t in tool_texts(r) if t.startswith("Error"))
    assert refusal == (f"Error: the arguments are {len(huge) + len(json.dumps({'text': ''}))} bytes; the limit is "
                       f"{MAX_ARGUMENT_BYTES}. The call was ignored.")
    assert max(len(json.dumps(q)) for q in req) < 100_000  # kept as a bounded preview, not sent back


def fresh_per_path(make):
    make.fresh_per_path = True
    return make


def test_malformed_json_arguments(mcp_server, loopback):
    @fresh_per_path
    def make():
        once = {"n": 0}

        def respond(req):  # malformed on the first request of scan 3 (then resampled), always on scan 5
            n = scan_number(req)
            if n == 3 and once["n"] == 0:
                once["n"] += 1
                return ok(chat_response("", [tool_call("submit_report", '{"center_freqs": [100.0, ')]))
            if n == 5:
                return ok(chat_response("", [tool_call("submit_report", "{oops")]))
            return HONEST(req)

        return respond

    r, _, m = both(mcp_server, loopback, row("p-json"), make)
    assert faults(r) == {"llm_bad_tool_json": 1 + 2 * 4, "invalid_report": 4, "skip_call_budget": 1}
    assert sum(1 for t in tool_texts(r) if "not valid JSON" in t) == 4


def test_junk_tool_calls(mcp_server, loopback):
    junk = [tool_call("submit_report", "null"), tool_call("submit_report", "[1, 2]"),
            tool_call("submit_report", '{"center_freqs": null}'), tool_call("submit_report", '{"center_freqs": [NaN]}'),
            tool_call("submit_report", '{"center_freqs": [1, 2], "x": 1}'), tool_call("notepad_write", '{"text": 5}'),
            tool_call("rm -rf /", "{}"), tool_call("", ""), tool_call("notepad_read", "")]
    r, _, m = both(mcp_server, loopback, row("p-junk"), lambda req: ok(chat_response("", junk)))
    # the fifth call is a valid report (unknown keys are ignored): every scan is scored, the rest refused
    assert r.execution_metadata.extra["spectrum"]["scans_skipped"] == 0
    assert faults(r)["unknown_tool"] == 2 * (N_SCANS - 1) and faults(r)["invalid_report"] == 4 * N_SCANS


# ---- honest failure (tests/test_rollout_failures.py runs each path on its own; here: identical) ------


def test_a_model_answering_500_to_everything(mcp_server, loopback):
    r, req, m = both(mcp_server, loopback, row("p-dead"), lambda q: (500, {"error": {"message": "down"}}, 0.0))
    assert r.rollout_status.is_error() and len(req) == FAST["llm_tries"]
    assert r.execution_metadata.extra["spectrum_rollout"]["model_failure"]["cause"] == "http 5xx"
    assert faults(r) == {"llm_5xx": 2, "llm_gave_up": 1, "skip_llm_failure": N_SCANS}


def test_a_model_that_worked_then_failed(mcp_server, loopback):
    r, _, m = both(mcp_server, loopback, row("p-late"),
                lambda q: HONEST(q) if scan_number(q) <= 3 else (500, {"error": {"message": "down"}}, 0.0))
    assert r.rollout_status.is_finished()
    assert faults(r) == {"llm_5xx": 2 * 9, "llm_gave_up": 9, "skip_llm_failure": 9}
    # scan 4 rides on scan 3's report; the scans after a skip (no tool result) are user messages
    assert tool_scans(m) == [2, 3, 4]
    assert [k for k, role in scan_carriers(m.messages) if role == "user"] == [1, *range(5, N_SCANS + 1)]


def test_empty_choices_and_truncation_then_recovery(mcp_server, loopback):
    @fresh_per_path
    def make():
        n = [0]

        def respond(req):  # every 5th request: no choices; every 7th: cut off at max_tokens
            n[0] += 1
            if n[0] % 5 == 0:
                return ok(chat_response(choices=[]))
            if n[0] % 7 == 0:
                return ok(chat_response("I think", finish_reason="length"))
            return HONEST(req)

        return respond

    r, _, m = both(mcp_server, loopback, row("p-empty"), make)
    assert faults(r).get("llm_empty_choices", 0) >= 1 and faults(r).get("llm_truncated", 0) >= 1
