"""One model call of a rollout: the request, its bounded retries, and why it failed (one definition for every
transport and client: litellm in the evaluator, the OpenAI client in the verifiers harness).

:class:`ModelCaller` wraps a request function ``request(messages, tools) -> chat completion`` (litellm's,
or an OpenAI client's; litellm's exceptions are the OpenAI client's subclasses, so one classification reads
both). Its rules are the rollout loop's (``spectrum_rft.rollouts.loop``'s docstring): transport failures
(timeouts, 5xx, connection errors, empty ``choices``, ``finish_reason=length`` without a tool call, tool-call
arguments that are not JSON) are retried up to ``tries`` times with exponential backoff and full jitter;
request errors no retry can fix raise :class:`RolloutConfigError`; each failed try records its fault kind in
the env (:data:`spectrum_rft.rollouts.failures.FAULT_OF_CAUSE`). Imports neither litellm nor eval-protocol.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx
import openai

from spectrum_rft.rollouts.failures import (FAILURE_CAUSES, FAULT_OF_CAUSE, MALFORMED_REPLY_TEXT,
                                            MISSING_KEY_TEXT, MODEL_FAILURE)
from spectrum_rft.task.actions import is_unparseable

# HTTP statuses that say "this request will never work": configuration, not a passing fault.
_FATAL_STATUS = frozenset({401, 403, 404})
_BAD_REQUEST_STATUS = frozenset({400, 413, 422})


class RolloutConfigError(RuntimeError):
    """The model endpoint refused the request itself (auth, unknown model, bad parameter)."""


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(out) < 12 and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def is_config_error(exc: BaseException) -> bool:
    """Errors no retry can fix: auth, permissions, unknown model. litellm reports a missing API key as a
    500 ("Missing credentials"), so that one is recognised by its text."""
    if getattr(exc, "status_code", None) in _FATAL_STATUS:
        return True
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)):
        return True
    return missing_key(exc) is not None


_MISSING_KEY = re.compile(MISSING_KEY_TEXT, re.I)
_KEY_VARIABLE = re.compile(r"\b([A-Z][A-Z0-9_]*_API_KEY)\b")


def missing_key(exc: BaseException) -> str | None:
    """When a request failed for want of an API key (litellm and the OpenAI client raise before sending
    anything): one plain line naming the variable to set (the one the error names, else a generic one); else
    None."""
    text = " ".join(str(e) for e in _chain(exc))
    if not _MISSING_KEY.search(text):
        return None
    var = _KEY_VARIABLE.search(text)
    where = f"set {var.group(1)}" if var else "set the provider's API key variable (OPENAI_API_KEY for openai/...)"
    return f"no API key for the model: {where} in the environment, or pass --param api_key=... (nothing was sent)"


def failure_cause(exc: BaseException) -> str:
    """Why a model request failed: one of :data:`FAILURE_CAUSES`. Looks through the exception chain,
    because litellm reports a refused or dropped connection and an unparseable body as HTTP 500."""
    chain = _chain(exc)
    if any(isinstance(e, ConnectionRefusedError) or "Connection refused" in str(e) or "Connect call failed" in str(e)
           for e in chain):
        return "connection refused"
    if any(isinstance(e, (openai.APITimeoutError, httpx.TimeoutException, asyncio.TimeoutError,
                          TimeoutError)) for e in chain):
        return "timeout"
    if any(MALFORMED_REPLY_TEXT in str(e) for e in chain):
        return "malformed reply"  # before the 5xx litellm dresses it as
    if missing_key(exc):
        return "missing API key"  # litellm words it as a 500 or an AuthenticationError
    if is_config_error(exc):
        return "bad request"
    if any(isinstance(e, (openai.APIConnectionError, httpx.TransportError, ValueError)) for e in chain):
        return "error"  # a dropped connection, a body that is not JSON: no real HTTP status
    status = getattr(exc, "status_code", None)
    if status == 429:
        return "rate limited"
    if isinstance(status, int) and status >= 500:
        return "http 5xx"
    if isinstance(status, int) and 400 <= status < 500:
        return "bad request"
    return "error"


def failure_detail(exc: BaseException, limit: int = 300) -> str:
    """A short, single-line description of a failed request (its type, HTTP status, text); a missing API key
    is said plainly (:func:`missing_key`)."""
    plain = missing_key(exc)
    if plain:
        return plain
    status = getattr(exc, "status_code", None)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}{f' (HTTP {status})' if isinstance(status, int) else ''}: {text}"[:limit]


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Sleep before retry ``attempt`` (1-based): uniform in ``[0, min(cap, base * 2**(attempt-1))]``."""
    return random.uniform(0.0, min(cap, base * 2 ** (attempt - 1)))


def endpoint_of(params: dict | None) -> str:
    """Where the model requests went, for messages: the api_base, else the model name."""
    params = params or {}
    base = params.get("api_base") or params.get("base_url")
    model = params.get("model")
    return f"{base} (model {model})" if base else f"model {model}"


def model_failure(cause: str | None, requests: int, detail: str) -> dict:
    """The record of a rollout whose model never produced a usable reply, as every transport stores it
    (the evaluator's ``extra["spectrum_rollout"]["model_failure"]``, the verifiers harness's
    ``trace.info["spectrum_rollout"]["model_failure"]``): ``cause`` one of :data:`FAILURE_CAUSES`."""
    return {"cause": cause if cause in FAILURE_CAUSES else "error", "requests": int(requests),
            "detail": " ".join(str(detail).split())[:300]}


def model_failure_message(failure: dict, endpoint: str) -> str:
    """The one-line error of that rollout (:func:`model_failure`'s record): starts with
    :data:`~spectrum_rft.rollouts.failures.MODEL_FAILURE`."""
    n = failure["requests"]
    return (f"{MODEL_FAILURE}: {failure['cause']} ({n} request{'s' if n != 1 else ''} to {endpoint}); "
            f"last error: {failure['detail']}")


def reply_deadline(params: dict) -> float | None:
    """The whole-reply deadline of a request with these litellm params: its ``timeout`` when that is a
    number of seconds (what a user means by ``--param timeout=5``), else None."""
    t = params.get("timeout")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf"):
        return None
    return float(t)


def bad_arguments(tool_calls: list[dict]) -> bool:
    """Whether some tool call carries arguments that are not JSON at all."""
    return any(is_unparseable(tc["function"]["arguments"]) for tc in tool_calls)


@dataclass
class Reply:
    message: dict  # the assistant message as sent back to the API
    extra: dict  # what only the row keeps (reasoning_content, finish_reason)


@dataclass
class CallStats:
    model_calls: int = 0  # usable replies
    llm_requests: int = 0  # HTTP requests, retries included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    ok_calls: int = 0  # successful completions (for the bad-request rule)
    cause: str | None = None  # the last failed request: failure_cause(...) and failure_detail(...)
    detail: str = ""
    extras: dict[int, dict] = field(default_factory=dict)  # transcript index -> row-only message fields

    @property
    def never_answered(self) -> bool:
        """Every request of the rollout failed: no model reply at all, and a cause to report."""
        return self.model_calls == 0 and self.cause is not None


# what the episode driver asks for each reply: ``model(messages, tools, episode, stats)`` -> a reply, or None when
# every try failed (a :class:`ModelCaller` around a chat endpoint, or a scripted model in this process)
ModelFn = Callable[[list[dict], list[dict], Any, CallStats], Awaitable[Reply | None]]


class ModelCaller:
    """One model call with bounded retries around ``request(messages, tools)``.

    Args:
        request: the chat completion request (an awaitable returning an OpenAI-shaped response).
        tries: attempts per model call (1 = no retry).
        backoff_base, backoff_max: the backoff before retry ``i`` (1-based) is uniform in
            ``[0, min(backoff_max, backoff_base * 2**(i-1))]`` (full jitter).
        overflow: exception types that say the transcript no longer fits the model's context (litellm's
            ``ContextWindowExceededError``): not retried, recorded as ``llm_context_window``.
        deadline: seconds for one whole reply, from the request to its last byte (None: no deadline). An HTTP
            client's timeout bounds each read, so a reply that trickles a byte a second never trips it; this
            one ends the try, which then counts as a timeout (``llm_timeout``) like a silent hang.
    """

    def __init__(self, request: Callable[[list[dict], list[dict]], Awaitable[Any]], *, tries: int = 4,
                 backoff_base: float = 1.0, backoff_max: float = 16.0, overflow: tuple[type, ...] = (),
                 deadline: float | None = None):
        if tries < 1:
            raise ValueError("tries must be >= 1")
        if deadline is not None and not (deadline > 0 and deadline < float("inf")):
            raise ValueError(f"deadline must be a finite number of seconds > 0, got {deadline!r}")
        self.request, self.tries, self.backoff_base, self.backoff_max = request, tries, backoff_base, backoff_max
        self.overflow = overflow
        self.deadline = deadline

    async def __call__(self, messages: list[dict], tools: list[dict], ep: Any, stats: CallStats) -> Reply | None:
        """One model call with bounded retries; None when every try failed. ``ep`` gets the fault of each
        failed try (``record_fault``)."""
        tries, base, cap = self.tries, self.backoff_base, self.backoff_max
        for attempt in range(tries):
            if attempt:
                await asyncio.sleep(backoff_delay(attempt, base, cap))
            stats.llm_requests += 1
            try:
                resp = await self._within_deadline(self.request(messages, tools))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001  (classified below; never kills the rollout)
                status = getattr(e, "status_code", None)
                stats.cause, stats.detail = failure_cause(e), failure_detail(e)
                if isinstance(e, self.overflow):
                    ep.record_fault("llm_context_window")
                    return None  # the same request will overflow again
                if is_config_error(e) or (status in _BAD_REQUEST_STATUS and stats.ok_calls == 0):
                    if stats.cause != "missing API key":
                        stats.cause = "bad request"
                    raise RolloutConfigError(f"model request rejected (HTTP {status}): {str(e)[:300]}") from e
                if status in _BAD_REQUEST_STATUS:
                    ep.record_fault("llm_bad_request")
                    return None
                ep.record_fault(FAULT_OF_CAUSE[stats.cause])
                continue
            stats.ok_calls += 1
            reply = self._parse(resp, stats)
            if reply is None:
                ep.record_fault("llm_empty_choices")
                stats.cause, stats.detail = "empty reply", "HTTP 200 without a choice or message"
                continue
            calls = reply.message.get("tool_calls")
            if not calls and reply.extra.get("finish_reason") == "length":
                ep.record_fault("llm_truncated")
                stats.cause, stats.detail = "empty reply", "cut off at max_tokens (finish_reason=length), no tool call"
                continue
            if calls and bad_arguments(calls):
                ep.record_fault("llm_bad_tool_json")
                if attempt < tries - 1:
                    continue
            return reply
        ep.record_fault("llm_gave_up")
        return None

    async def _within_deadline(self, request: Awaitable[Any]) -> Any:
        if self.deadline is None:
            return await request
        try:
            return await asyncio.wait_for(request, self.deadline)
        except TimeoutError as e:
            raise TimeoutError(f"no whole reply within {self.deadline:g} s (the request's deadline)") from e

    @staticmethod
    def _parse(resp: Any, stats: CallStats) -> Reply | None:
        usage = getattr(resp, "usage", None)
        if usage is not None:
            stats.prompt_tokens += getattr(usage, "prompt_tokens", 0) or 0
            stats.completion_tokens += getattr(usage, "completion_tokens", 0) or 0
        choices = getattr(resp, "choices", None)
        if not choices:
            return None
        choice = choices[0]
        msg = getattr(choice, "message", None)
        if msg is None:
            return None
        finish = getattr(choice, "finish_reason", None)
        stats.finish_reason = finish
        content = msg.content if isinstance(msg.content, str) else ""
        message: dict[str, Any] = {"role": "assistant", "content": content}  # "" not None: llama.cpp
        calls = []
        seen: set[str] = set()
        for tc in msg.tool_calls or ():
            fn = getattr(tc, "function", None)
            args = getattr(fn, "arguments", None)
            if not isinstance(args, str):
                args = json.dumps(args) if args is not None else ""
            call_id = getattr(tc, "id", None)
            if not isinstance(call_id, str) or not call_id or call_id in seen:  # each result must pair with one call
                call_id = f"call_{uuid.uuid4().hex[:12]}"
            seen.add(call_id)
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": getattr(fn, "name", None) or "", "arguments": args}})
        if calls:
            message["tool_calls"] = calls
        extra: dict[str, Any] = {"finish_reason": finish}
        reasoning = getattr(msg, "reasoning_content", None)
        if isinstance(reasoning, str) and reasoning:
            extra["reasoning_content"] = reasoning
        return Reply(message, extra)

