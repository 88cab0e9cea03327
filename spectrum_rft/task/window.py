"""Which messages the model sees: one pure function shared by both rollout paths.

* a mode with ``history`` (``icl``): the whole conversation.
* every other memory mode (``none``, ``notepad``, ``scaffold``, ``scrambled``, ``icl_notepad``): the ICL-off
  window, i.e. the system message + the message carrying the current scan + this scan's own tool traffic.
  Its only memory across scans is then what the environment puts into the scan (the scaffold echo, the
  ``icl_notepad`` notepad shown with each scan) or the notepad the model reads back (``notepad``).

A scan is recognised by the environment's scan header (:func:`spectrum_rft.task.scan_format.is_scan_text`)
in a ``user`` message (in-process path) or in the result of a ``submit_report`` call (MCP path: the scan
arrives with the acknowledgement of the previous report). Nothing the model writes counts — not its own text, and not a
notepad it reads back — so a model cannot move its window by typing a header. On the
MCP path the window starts at the assistant message whose tool call returned the scan, so every tool
result in the window still follows the call it answers (the chat API rejects orphaned tool results).

``<think>…</think>`` blocks are removed from assistant messages in every mode: they are the model's
scratch work, not memory, and they would blow the context of an ICL run.
"""

from __future__ import annotations

import re
from typing import Any, Sequence, TypeVar

from spectrum_rft.task.memory import memory_mode as get_memory_mode
from spectrum_rft.task.scan_format import is_scan_text

M = TypeVar("M")

_THINK = re.compile(r"<think>.*?(</think>\s*|$)", re.S)


def _get(msg: Any, key: str) -> Any:
    return msg.get(key) if isinstance(msg, dict) else getattr(msg, key, None)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(_get(p, "text") or "") for p in content)
    return ""


def strip_think(text: str) -> str:
    """Remove ``<think>…</think>`` blocks (and an unclosed trailing one)."""
    return _THINK.sub("", text) if "<think>" in text else text


def _without_think(msg: M) -> M:
    content = _get(msg, "content")
    if _get(msg, "role") != "assistant" or not isinstance(content, str) or "<think>" not in content:
        return msg
    new = strip_think(content)
    if isinstance(msg, dict):
        return {**msg, "content": new}  # type: ignore[return-value]
    return msg.model_copy(update={"content": new})  # type: ignore[attr-defined]


def is_scan_message(msg: Any, report_call_ids: set | None = None) -> bool:
    """Whether ``msg`` carries a scan: a user message with the header, or a tool message with the
    header that answers a ``submit_report`` call (``report_call_ids``; None accepts any tool message)."""
    role = _get(msg, "role")
    if role == "tool" and report_call_ids is not None and _get(msg, "tool_call_id") not in report_call_ids:
        return False
    return role in ("user", "tool") and is_scan_text(_text(_get(msg, "content")))


def report_call_ids(messages: Sequence[Any]) -> set:
    """Ids of every ``submit_report`` tool call in the assistant messages."""
    ids = set()
    for m in messages:
        if _get(m, "role") == "assistant":
            for tc in _get(m, "tool_calls") or ():
                if _get(_get(tc, "function"), "name") == "submit_report":
                    ids.add(_get(tc, "id"))
    return ids


def approx_tokens(msg: Any) -> int:
    """A cheap token estimate (4 characters a token, tool calls included)."""
    n = len(_text(_get(msg, "content")))
    for tc in _get(msg, "tool_calls") or []:
        fn = _get(tc, "function")
        n += len(str(_get(fn, "arguments") or "")) + len(str(_get(fn, "name") or ""))
    return n // 4 + 4


def window(messages: Sequence[M], memory_mode: str, token_budget: int | None = None) -> list[M]:
    """The messages to send to the model for ``memory_mode`` (inputs are never modified).

    ``token_budget`` (modes with ``history`` only): drop the oldest turns, a whole scan at a time, until the
    estimate fits; the system message and the current scan are always kept.
    """
    history = get_memory_mode(memory_mode).history
    msgs = list(messages)
    if history and token_budget is not None:
        head = [m for m in msgs[:1] if _get(m, "role") == "system"]
        body = msgs[len(head):]
        total = sum(map(approx_tokens, msgs))
        while total > token_budget:
            cut = _next_turn(body)
            if cut is None:
                break
            total -= sum(map(approx_tokens, body[:cut]))
            body = body[cut:]
        msgs = head + body
    if not history:
        start = _newest_scan(msgs)
        if start is not None:
            start = _turn_start(msgs, start)
            head = next(([m] for m in msgs[:start] if _get(m, "role") == "system"), [])
            msgs = head + msgs[start:]
    return [_without_think(m) for m in msgs]


def _newest_scan(msgs: Sequence[Any]) -> int | None:
    """The index of the newest message that carries a scan (:func:`is_scan_message`), or None. The ids of the
    ``submit_report`` calls are collected only when a tool message is a candidate (the in-process path's
    newest scan is a user message: one look back, not one pass over the conversation per model call)."""
    ids: set | None = None
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if not is_scan_message(m):  # None: any tool message with the header passes this first look
            continue
        if _get(m, "role") == "tool":
            ids = report_call_ids(msgs) if ids is None else ids
            if not is_scan_message(m, ids):
                continue
        return i
    return None


def _turn_start(msgs: Sequence[Any], i: int) -> int:
    """Where the turn that shows message ``i`` starts: ``i`` itself for a user message; for a tool result
    (a scan carried by the MCP path), the assistant message that issued the call, so that no tool result
    is ever sent without its call."""
    if _get(msgs[i], "role") != "tool":
        return i
    j = i - 1
    while j >= 0 and _get(msgs[j], "role") == "tool":
        j -= 1
    return j if j >= 0 and _get(msgs[j], "role") == "assistant" else i


def _next_turn(body: Sequence[Any]) -> int | None:
    """The first turn boundary after the start of ``body``: a user message (a scan or a prompt) or the
    start of the turn of a scan carried in a tool result. None when there is none."""
    ids = report_call_ids(body)
    cuts = [i if _get(m, "role") == "user" else _turn_start(body, i) for i, m in enumerate(body)
            if _get(m, "role") == "user" or is_scan_message(m, ids)]
    return min((c for c in cuts if c >= 1), default=None)
