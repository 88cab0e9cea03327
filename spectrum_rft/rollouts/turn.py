"""The in-process rollout path: scans arrive as user messages, the model answers with tool calls.

A thin transport around :class:`spectrum_adapter.SpectrumEnv`, which owns every rule of the task. One
rollout, in the shape of verifiers' ``MultiTurnEnv.rollout``::

    env.reset(seed)                                      # the row's band and scan sequence
    while not env.done:
        append the open scan as a user message           # once per scan
        reply = model(window(transcript, memory_mode))   # what the model sees: spectrum_context_window
        append reply; run its tool calls in the env      # env.call_tool: the one implementation
        env.end_model_turn(advanced)                     # the per-scan call budget (K calls, then skip)

Decisions (the issue is the spec; these fill its gaps):

* **One model call** = one completion that returned a usable assistant message. It counts once against
  the scan's budget, whatever the number of tool calls in it. Transport failures inside it (timeouts,
  5xx, connection errors, empty ``choices``, ``finish_reason=length`` without a tool call, tool-call
  arguments that are not JSON) are retried up to ``llm_tries`` times with exponential backoff and full
  jitter, with no sleep after the last try. When every try failed the scan is force-advanced as an empty
  report (``env.skip("llm_failure")``): the rollout goes on and every scan stays scored. Unparseable
  arguments on the *last* try are kept instead: the model gets an error result naming the problem and
  the call counts against its budget (no scan is thrown away over JSON the env can explain).
* **A model that never answered** (every try of the rollout's first model call failed) is not a model
  that reported nothing: the remaining scans are closed as skipped (``env.finish("llm_failure")``, so the
  env's record stays complete) and the row ends as an *error* (:func:`mark_model_failure`: the cause in
  the status message and in ``extra["spectrum_rollout"]["model_failure"]``). Set, never raised, so
  eval-protocol does not retry the rollout three times. Both rollout paths classify a failed request with
  the one :func:`failure_cause`.
* **Request errors** (HTTP 401/403/404, and 400/413/422 before any successful model call of the rollout)
  are configuration, not model behaviour: the row ends with an error status (cause ``"bad request"``),
  not retried. A 401/403/404 later in a rollout ends it with an error status too; a 400 later in a
  rollout (a transcript a provider refuses, a context overflow) force-advances that scan like any other
  failure.
* **Huge tool-call arguments** are executed as sent (the env judges them), but the row and the
  transcript keep only a bounded preview of arguments that were refused and longer than
  ``ARGS_PREVIEW_CHARS``, or longer than ``ARGS_MAX_CHARS`` in any case (:func:`stored_arguments`).
* **Tool calls of one message** run in order. After the first valid ``submit_report`` a further
  ``submit_report`` in the same message gets an error result and is ignored (it never lands on the next
  scan); notepad calls still run while the episode is open. Every call gets a tool result.
* **Text without a tool call** counts as a model call and is answered with a short user reminder (so the
  next request does not end on an assistant message), unless the budget just ran out.
* The transcript is kept as plain dicts (what the chat API takes); ``row.messages`` is rebuilt as
  eval-protocol ``Message`` objects at the start, at every ``log_every_scans`` scans and at the end. The
  row is logged once at the start and every ``log_every_scans`` scans; eval-protocol logs the returned
  row itself (pass ``log_final=True`` when calling the processor outside ``@evaluation_test``).

Where the time goes (``bench/bench_turn.py``): litellm's request/response path dominates; the env,
the window and the bookkeeping here are a small fraction of a millisecond per scan.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import litellm
import openai
from eval_protocol.models import EvaluationRow, Message, Status
from eval_protocol.pytest.rollout_processor import RolloutProcessor
from eval_protocol.pytest.types import RolloutProcessorConfig

from spectrum_rft.baselines import models as spectrum_models
from spectrum_rft.task.environment import SpectrumEnv, env_for_row
from spectrum_rft.task.window import is_scan_message, window

try:  # eval-protocol >= 0.3.2x; the cloud has run 0.3.23
    from eval_protocol.pytest.utils import normalize_fireworks_model_for_litellm
except ImportError:  # pragma: no cover - older eval-protocol
    import re as _re

    def normalize_fireworks_model_for_litellm(completion_params):  # type: ignore[no-redef]
        model = (completion_params or {}).get("model")
        if isinstance(model, str) and not model.startswith("fireworks_ai/") and _re.match(
                r"^accounts/[^/]+/(models|deployments)/.+", model):
            return {**completion_params, "model": f"fireworks_ai/{model}"}
        return completion_params

NUDGE = "No tool call received. Call submit_report with the centre frequencies of all occupied regions."

# Keys that callers put into completion params for other transports but litellm must not forward.
_NOT_FOR_LITELLM = ("use_caching",)
# HTTP statuses that say "this request will never work": configuration, not a passing fault.
_FATAL_STATUS = frozenset({401, 403, 404})
_BAD_REQUEST_STATUS = frozenset({400, 413, 422})


class RolloutConfigError(RuntimeError):
    """The model endpoint refused the request itself (auth, unknown model, bad parameter)."""


@dataclass
class _Reply:
    message: dict  # the assistant message as sent back to the API
    extra: dict  # what only the row keeps (reasoning_content, finish_reason)
    bad_json: bool = False


@dataclass
class _Stats:
    model_calls: int = 0  # usable replies
    llm_requests: int = 0  # HTTP requests, retries included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    ok_calls: int = 0  # successful completions (for the bad-request rule)
    cause: str | None = None  # the last failed request: failure_cause(...) and failure_detail(...)
    detail: str = ""
    extras: dict[int, dict] = field(default_factory=dict)  # transcript index -> row-only message fields


# ---- failed model requests: one classification and one error-row contract for both rollout paths ----

MODEL_FAILURE = "model never produced a usable reply"  # the error message of such a row starts with this
FAILURE_CAUSES = ("connection refused", "http 5xx", "timeout", "rate limited", "empty reply", "bad request", "error")
_FAULT_OF_CAUSE = {"connection refused": "llm_connection", "http 5xx": "llm_5xx", "timeout": "llm_timeout",
                   "rate limited": "llm_rate_limited", "empty reply": "llm_empty_choices",
                   "bad request": "llm_bad_request", "error": "llm_error"}


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(out) < 12 and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _is_config_error(exc: BaseException) -> bool:
    """Errors no retry can fix: auth, permissions, unknown model. litellm reports a missing API key as a
    500 ("Missing credentials"), so that one is recognised by its text."""
    if getattr(exc, "status_code", None) in _FATAL_STATUS:
        return True
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError)):
        return True
    text = str(exc)
    return "Missing credentials" in text or "api_key client option must be set" in text


def failure_cause(exc: BaseException) -> str:
    """Why a model request failed: one of :data:`FAILURE_CAUSES`. Looks through the exception chain,
    because litellm reports a refused or dropped connection and an unparseable body as HTTP 500."""
    chain = _chain(exc)
    if any(isinstance(e, ConnectionRefusedError) or "Connection refused" in str(e) or "Connect call failed" in str(e)
           for e in chain):
        return "connection refused"
    if any(isinstance(e, (litellm.Timeout, openai.APITimeoutError, httpx.TimeoutException, asyncio.TimeoutError,
                          TimeoutError)) for e in chain):
        return "timeout"
    if _is_config_error(exc):
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
    """A short, single-line description of a failed request (its type, HTTP status, text)."""
    status = getattr(exc, "status_code", None)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}{f' (HTTP {status})' if isinstance(status, int) else ''}: {text}"[:limit]


def _fault_kind(exc: BaseException) -> str:
    return _FAULT_OF_CAUSE[failure_cause(exc)]


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Sleep before retry ``attempt`` (1-based): uniform in ``[0, min(cap, base * 2**(attempt-1))]``."""
    return random.uniform(0.0, min(cap, base * 2 ** (attempt - 1)))


def endpoint_of(params: dict | None) -> str:
    """Where the model requests went, for messages: the api_base, else the model name."""
    params = params or {}
    base = params.get("api_base") or params.get("base_url")
    model = params.get("model")
    return f"{base} (model {model})" if base else f"model {model}"


def mark_model_failure(row: EvaluationRow, cause: str, requests: int, detail: str, endpoint: str) -> None:
    """Make ``row`` the error row of a rollout whose model never produced a usable reply (the contract read by
    ``spectrum-rft eval`` and :func:`spectrum_eval_result.evaluate_row`):

    * ``row.rollout_status = Status.rollout_error("model never produced a usable reply: <cause> (...)")``;
    * ``row.execution_metadata.extra["spectrum_rollout"]["model_failure"] = {"cause", "requests", "detail"}``
      with ``cause`` one of :data:`FAILURE_CAUSES`.

    ``extra["spectrum"]`` (the env's record) is left as it is."""
    if cause not in FAILURE_CAUSES:
        cause = "error"
    detail = " ".join(str(detail).split())[:300]
    row.rollout_status = Status.rollout_error(
        f"{MODEL_FAILURE}: {cause} ({requests} request{'s' if requests != 1 else ''} to {endpoint}); "
        f"last error: {detail}")
    extra = dict(row.execution_metadata.extra or {})
    extra["spectrum_rollout"] = {**(extra.get("spectrum_rollout") or {}),
                                 "model_failure": {"cause": cause, "requests": int(requests), "detail": detail}}
    row.execution_metadata.extra = extra


# ---- tool-call arguments kept in rows ------------------------------------------------------------------

ARGS_PREVIEW_CHARS = 2000  # what a row keeps of refused arguments longer than this
ARGS_MAX_CHARS = 64 * 1024  # and of any arguments longer than this


def stored_arguments(arguments: str, refused: bool) -> str:
    """The tool-call arguments a row (and the transcript shown to the model later) keeps: as sent, unless
    they were refused and longer than :data:`ARGS_PREVIEW_CHARS`, or longer than :data:`ARGS_MAX_CHARS`;
    then a JSON object with their first ``ARGS_PREVIEW_CHARS`` characters and their full length. The env
    has already judged the real arguments."""
    if not isinstance(arguments, str) or len(arguments) <= (ARGS_PREVIEW_CHARS if refused else ARGS_MAX_CHARS):
        return arguments
    return json.dumps({"truncated_arguments": arguments[:ARGS_PREVIEW_CHARS], "full_length": len(arguments),
                       "note": f"arguments of {len(arguments)} characters; only the first "
                               f"{ARGS_PREVIEW_CHARS} are kept"})


def _bad_arguments(tool_calls: list[dict]) -> bool:
    """Whether some tool call carries arguments that are not JSON at all."""
    for tc in tool_calls:
        args = tc["function"]["arguments"]
        if isinstance(args, str) and args.strip():
            try:
                json.loads(args)
            except (ValueError, RecursionError):
                return True
    return False


class SpectrumTurnRolloutProcessor(RolloutProcessor):
    """In-process rollouts of the spectrum task (see the module docstring).

    Args:
        llm_tries: attempts per model call (1 = no retry).
        backoff_base, backoff_max: the backoff before retry ``i`` (1-based) is uniform in
            ``[0, min(backoff_max, backoff_base * 2**(i-1))]`` (full jitter).
        request_timeout: seconds per request, unless the completion params carry ``timeout``.
        icl_token_budget: for ``icl`` rows, drop the oldest scans beyond this token estimate.
        log_every_scans: also log the partial row every N scans (0: only at the start).
        log_final: log the finished row too (eval-protocol's ``@evaluation_test`` already does).
    """

    def __init__(self, *, llm_tries: int = 4, backoff_base: float = 1.0, backoff_max: float = 16.0,
                 request_timeout: float = 180.0, icl_token_budget: int | None = None,
                 log_every_scans: int = 6, log_final: bool = False, quiet_litellm: bool = True):
        if llm_tries < 1:
            raise ValueError("llm_tries must be >= 1")
        self.llm_tries = llm_tries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.request_timeout = request_timeout
        self.icl_token_budget = icl_token_budget
        self.log_every_scans = log_every_scans
        self.log_final = log_final
        if quiet_litellm:
            litellm.suppress_debug_info = True  # its "Give Feedback" banner on every retried error

    # ---- eval-protocol API -------------------------------------------------------------------------

    def __call__(self, rows: list[EvaluationRow], config: RolloutProcessorConfig) -> list[asyncio.Task[EvaluationRow]]:
        params = self.request_params(config.completion_params)

        async def one(row: EvaluationRow) -> EvaluationRow:
            async with config.semaphore:
                return await self.rollout(row, params, config)

        return [asyncio.create_task(one(row)) for row in rows]

    def request_params(self, completion_params: dict | None) -> dict:
        """litellm keyword arguments from the processor config's completion params (never the row's)."""
        params = dict(normalize_fireworks_model_for_litellm(dict(completion_params or {})) or {})
        model = params.get("model")
        if not model:
            raise ValueError("completion_params must name a model")
        for k in _NOT_FOR_LITELLM:
            params.pop(k, None)
        if spectrum_models.is_policy_model(model):  # the scripted baselines served as litellm models
            spectrum_models.register()
        params["cache"] = {"no-cache": True}
        params.setdefault("max_retries", 0)  # the OpenAI client would retry twice on its own
        params.setdefault("timeout", self.request_timeout)
        return params

    # ---- one rollout -------------------------------------------------------------------------------

    async def rollout(self, row: EvaluationRow, params: dict, config: RolloutProcessorConfig) -> EvaluationRow:
        t0 = time.perf_counter()
        row.input_metadata.completion_params = {k: v for k, v in params.items() if k not in ("cache", "api_key")}
        stats = _Stats()
        env: SpectrumEnv | None = None
        started = False
        transcript: list[dict] = []
        try:
            row_id = row.input_metadata.row_id
            if not row_id:
                raise ValueError("row has no input_metadata.row_id (the band seed is derived from it)")
            env, seed = env_for_row(row_id, row.input_metadata.dataset_info)
            env.reset(seed)
            started = True
            transcript = self._opening(row, env)
            row.tools = tools = env.tools()
            row.messages = self._messages(transcript, stats)
            row.rollout_status = Status.rollout_running()
            config.logger.log(row)
            await self._play(env, transcript, tools, params, stats, row, config)
            row.rollout_status = Status.rollout_finished()
        except RolloutConfigError as e:
            row.rollout_status = Status.rollout_error(str(e))
        except Exception as e:  # a bug: the row carries it (eval-protocol would retry and lose the env)
            row.rollout_status = Status.rollout_error(f"{type(e).__name__}: {e}")
            stats.cause = None  # not the model's failure
        try:
            never_answered = stats.model_calls == 0 and stats.cause is not None
            if env is not None and started:
                if not env.done:
                    env.finish("llm_failure" if never_answered else "rollout_error")
                extra = dict(row.execution_metadata.extra or {})
                extra["spectrum"] = {**env.metrics(), "scan_records": env.scan_records()}
                extra["spectrum_rollout"] = {"transport": "turn", "model_calls": stats.model_calls,
                                             "llm_requests": stats.llm_requests}
                row.execution_metadata.extra = extra
            if never_answered:
                mark_model_failure(row, stats.cause, stats.llm_requests, stats.detail, endpoint_of(params))
            if transcript:
                row.messages = self._messages(transcript, stats)
            self._finish_metadata(row, stats, t0)
        except Exception as e:  # never mask the first error; a bug here still ends as an error row
            if not row.rollout_status.is_error():
                row.rollout_status = Status.rollout_error(f"{type(e).__name__} while finishing the row: {e}")
        if self.log_final:
            config.logger.log(row)
        return row

    async def _play(self, env: SpectrumEnv, transcript: list[dict], tools: list[dict], params: dict,
                    stats: _Stats, row: EvaluationRow, config: RolloutProcessorConfig) -> None:
        mode = env.config.memory_mode
        budget = self.icl_token_budget if mode == "icl" else None
        shown = -1  # index of the scan last appended
        guard = env.n_scans * (env.config.max_calls_per_scan + 1) + 8
        while not env.done:
            guard -= 1
            if guard < 0:  # cannot happen while the env keeps its budget rule; never loop forever
                env.finish("loop_guard")
                break
            scan = env.scan_index
            if scan != shown:
                if shown >= 0 and self.log_every_scans and scan % self.log_every_scans == 0:
                    row.messages = self._messages(transcript, stats)
                    config.logger.log(row)
                transcript.append({"role": "user", "content": env.observation()["prompt"]})
                shown = scan
            reply = await self._complete(window(transcript, mode, budget), tools, params, env, stats)
            if reply is None:  # every try failed: the scan is scored as an empty report
                if stats.model_calls == 0:  # and the model never answered at all: the rollout is an error
                    env.finish("llm_failure")
                    break
                env.skip("llm_failure")
                continue
            stats.model_calls += 1
            stats.extras[len(transcript)] = reply.extra
            transcript.append(reply.message)
            advanced = self._run_tools(env, reply.message.get("tool_calls") or (), transcript, stats)
            forced = env.end_model_turn()
            if not advanced and not forced and not reply.message.get("tool_calls"):
                transcript.append({"role": "user", "content": NUDGE})

    @staticmethod
    def _run_tools(env: SpectrumEnv, tool_calls: Any, transcript: list[dict], stats: _Stats) -> bool:
        """Execute one message's tool calls in order; append one tool result per call. True when a valid
        report closed the open scan."""
        advanced = False
        if not env.done:
            env.begin_model_turn()  # this message's calls are one turn: one scored report at most
        for tc in tool_calls:  # the env applies the extra-submit and after-the-end rules
            fn = tc["function"]
            name = fn.get("name")
            res = env.call_tool(name if isinstance(name, str) else "", fn.get("arguments"))
            fn["arguments"] = stored_arguments(fn.get("arguments"), refused=not res.ok)
            advanced = advanced or res.advanced
            stats.extras[len(transcript)] = {"name": name if isinstance(name, str) else None,
                                             "control_plane_step": {"reward": res.reward, "advanced": res.advanced,
                                                                    "ok": res.ok, "error": res.error}}
            transcript.append({"role": "tool", "tool_call_id": tc["id"], "content": res.content})
        return advanced

    async def _complete(self, messages: list[dict], tools: list[dict], params: dict, env: SpectrumEnv,
                        stats: _Stats) -> _Reply | None:
        """One model call with bounded retries; None when every try failed."""
        last = self.llm_tries - 1
        for attempt in range(self.llm_tries):
            if attempt:
                await asyncio.sleep(backoff_delay(attempt, self.backoff_base, self.backoff_max))
            stats.llm_requests += 1
            try:
                resp = await litellm.acompletion(messages=messages, tools=tools, **params)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001  (classified below; never kills the rollout)
                status = getattr(e, "status_code", None)
                stats.cause, stats.detail = failure_cause(e), failure_detail(e)
                if isinstance(e, litellm.ContextWindowExceededError):
                    env.record_fault("llm_context_window")
                    return None  # the same request will overflow again
                if _is_config_error(e) or (status in _BAD_REQUEST_STATUS and stats.ok_calls == 0):
                    stats.cause = "bad request"
                    raise RolloutConfigError(f"model request rejected (HTTP {status}): {str(e)[:300]}") from e
                if status in _BAD_REQUEST_STATUS:
                    env.record_fault("llm_bad_request")
                    return None
                env.record_fault(_fault_kind(e))
                continue
            stats.ok_calls += 1
            reply = self._parse(resp, stats)
            if reply is None:
                env.record_fault("llm_empty_choices")
                stats.cause, stats.detail = "empty reply", "HTTP 200 without a choice or message"
                continue
            calls = reply.message.get("tool_calls")
            if not calls and reply.extra.get("finish_reason") == "length":
                env.record_fault("llm_truncated")
                stats.cause, stats.detail = "empty reply", "cut off at max_tokens (finish_reason=length), no tool call"
                continue
            if calls and _bad_arguments(calls):
                env.record_fault("llm_bad_tool_json")
                if attempt < last:
                    continue
            return reply
        env.record_fault("llm_gave_up")
        return None

    @staticmethod
    def _parse(resp: Any, stats: _Stats) -> _Reply | None:
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
        return _Reply(message, extra)

    # ---- rows --------------------------------------------------------------------------------------

    @staticmethod
    def _opening(row: EvaluationRow, env: SpectrumEnv) -> list[dict]:
        """The row's opening messages (system prompt and any introduction), up to the first model turn or
        scan: a row that already carries a transcript starts over. No system message: the env's."""
        out: list[dict] = []
        for m in row.messages:
            if m.role not in ("system", "user") or is_scan_message(m):
                break
            content = m.content if isinstance(m.content, str) else "".join(
                str(getattr(p, "text", None) or (p.get("text") if isinstance(p, dict) else "") or "")
                for p in (m.content or []))
            out.append({"role": m.role, "content": content})
        if not out or out[0]["role"] != "system":
            out.insert(0, {"role": "system", "content": env.system_prompt()})
        return out

    @staticmethod
    def _messages(transcript: list[dict], stats: _Stats) -> list[Message]:
        out = []
        for i, d in enumerate(transcript):
            extra = stats.extras.get(i)
            if extra:
                d = {**d, **{k: v for k, v in extra.items() if k in ("reasoning_content", "name",
                                                                       "control_plane_step") and v is not None}}
            out.append(Message.model_validate(d))
        return out

    @staticmethod
    def _finish_metadata(row: EvaluationRow, stats: _Stats, t0: float) -> None:
        from openai.types import CompletionUsage  # noqa: PLC0415

        md = row.execution_metadata
        md.rollout_duration_seconds = time.perf_counter() - t0
        md.finish_reason = stats.finish_reason
        md.tool_call_count = sum(len(m.tool_calls or []) for m in row.messages if m.role == "assistant")
        md.usage = CompletionUsage(prompt_tokens=stats.prompt_tokens, completion_tokens=stats.completion_tokens,
                                   total_tokens=stats.prompt_tokens + stats.completion_tokens)
