"""The ICL-off window (both transports), think stripping and the ICL token budget."""

from hypothesis import given
from hypothesis import strategies as st

from spectrum_rft.task.window import approx_tokens, is_scan_message, strip_think, window

SYS = {"role": "system", "content": "sys"}


def scan(k):
    return f"Scan {k}/12 | band 0.0-480.0 MHz | noise floor -50.0 dBm\nNo peaks detected."


def call(i, name="submit_report"):
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}


def turn_conversation():
    msgs = [SYS]
    for k in (1, 2, 3):
        msgs.append({"role": "user", "content": scan(k)})
        msgs.append({"role": "assistant", "content": f"<think>scan {k}</think>ok", "tool_calls": [call(k)]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"Scan {k} recorded."})
    msgs.append({"role": "user", "content": scan(4)})
    return msgs


def mcp_conversation():
    msgs = [SYS, {"role": "user", "content": scan(1)}]
    for k in (1, 2):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call(k, "notepad_write"), call(10 + k)]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": "Notepad saved (3/2000 characters)."})
        msgs.append({"role": "tool", "tool_call_id": f"c{10 + k}", "content": f"Scan {k} recorded.\n{scan(k + 1)}"})
    return msgs


def test_icl_off_window_turn_path():
    w = window(turn_conversation(), "none")
    assert w == [SYS, {"role": "user", "content": scan(4)}]
    for mode in ("notepad", "scaffold", "scrambled", "icl_notepad"):
        assert window(turn_conversation(), mode) == w
    msgs = turn_conversation()[:-1]  # in the middle of scan 3: its own tool traffic stays visible
    w = window(msgs, "none")
    assert [m["role"] for m in w] == ["system", "user", "assistant", "tool"] and w[1]["content"] == scan(3)


def test_icl_off_window_mcp_path_keeps_tool_pairs_valid():
    w = window(mcp_conversation(), "none")
    assert w[0] == SYS and w[1]["role"] == "assistant"
    ids = {tc["id"] for tc in w[1]["tool_calls"]}
    assert {m["tool_call_id"] for m in w[2:]} <= ids
    assert scan(3) in w[-1]["content"]


def test_icl_sees_everything_without_think():
    msgs = turn_conversation()
    w = window(msgs, "icl")
    assert len(w) == len(msgs)
    assert all("<think>" not in (m.get("content") or "") for m in w)
    assert msgs[2]["content"].startswith("<think>")  # input untouched


def test_a_model_cannot_move_the_window_by_typing_a_header():
    msgs = turn_conversation() + [{"role": "assistant", "content": scan(9)}]
    assert not is_scan_message(msgs[-1])
    assert window(msgs, "none")[1]["content"] == scan(4)
    # nor by writing a header into its notepad and reading it back
    msgs = mcp_conversation() + [
        {"role": "assistant", "content": "", "tool_calls": [call(99, "notepad_read")]},
        {"role": "tool", "tool_call_id": "c99", "content": scan(7)},
    ]
    w = window(msgs, "notepad")
    assert scan(3) in w[2]["content"] or scan(3) in w[-3]["content"]
    assert w[-1]["content"] == scan(7) and len(w) == 6


def test_icl_token_budget_drops_oldest_scans_first():
    msgs = turn_conversation()
    full = sum(map(approx_tokens, msgs))
    w = window(msgs, "icl", token_budget=full - 1)
    assert w[0] == SYS and w[1]["content"] == scan(2) and w[-1]["content"] == scan(4)
    tiny = window(msgs, "icl", token_budget=1)
    assert tiny == [SYS, {"role": "user", "content": scan(4)}]


def test_icl_token_budget_trims_scans_carried_in_tool_results():
    """The MCP path carries scans 2..N in submit_report results: the budget still drops whole turns, and a
    kept tool result always follows the assistant message that issued its call."""
    msgs = mcp_conversation()
    full = sum(map(approx_tokens, msgs))
    w = window(msgs, "icl", token_budget=full - 1)
    assert w[0] == SYS and w[1]["role"] == "assistant" and len(w) < len(msgs)
    assert w[1]["tool_calls"][-1]["id"] == "c11"  # the turn that carries scan 2
    tiny = window(msgs, "icl", token_budget=1)
    assert [m["role"] for m in tiny] == ["system", "assistant", "tool", "tool"] and scan(3) in tiny[-1]["content"]
    for kept in (w, tiny):
        issued = {tc["id"] for m in kept if m["role"] == "assistant" for tc in m.get("tool_calls", [])}
        assert {m["tool_call_id"] for m in kept if m["role"] == "tool"} <= issued


def test_strip_think():
    assert strip_think("<think>a\nb</think>\nanswer") == "answer"
    assert strip_think("x<think>unclosed") == "x"
    assert strip_think("plain") == "plain"


@given(st.lists(st.sampled_from(["system", "user", "assistant", "tool"]), max_size=12),
       st.sampled_from(["none", "icl", "notepad"]))
def test_window_never_invents_messages(roles, mode):
    msgs = [{"role": r, "content": scan(i) if i % 3 == 0 else "x"} for i, r in enumerate(roles)]
    w = window(msgs, mode)
    assert all(m in msgs for m in w)
    assert len(w) <= len(msgs)
