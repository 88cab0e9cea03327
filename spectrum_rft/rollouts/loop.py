"""The one rollout loop of the spectrum task, shared by every transport.

In the shape of verifiers' ``MultiTurnEnv.rollout``::

    opening = await episode.start()                      # the row's env, reset with the row's seed
    while not episode.done:
        a scan not shown yet -> append it as a user message
        reply = model(window(transcript, memory_mode))   # what the model sees: spectrum_rft.task.window
        append reply; each tool call -> episode.call()   # the env judges it (SpectrumEnv.call_tool)
            (scans_in_tool_results: the submit_report result that closed the scan carries the next one)
        no tool call -> episode.no_tool_call()           # the env counts it and says what to tell the model

An :class:`Episode` only *carries* text and tool calls to one :class:`SpectrumEnv` and its answers back:
:class:`InProcessEpisode` (here; the in-process path, ``turn.py``, uses it) holds the env itself,
:class:`spectrum_rft.rollouts.mcp_client.McpEpisode` reaches it over one MCP connection. The env decides everything (what a call does, what an
unknown tool gets, when the call budget closes a scan, what the model is told), so the same model gets the
same scores, faults and texts on both paths (``tests/test_rollout_parity.py``).

**Where a scan arrives** is the one thing the transports differ in (:attr:`Episode.scans_in_tool_results`):

* in-process (False): every scan is a user message;
* MCP (True): the first scan is the first user message; when a ``submit_report`` call closes the open scan
  (a scored report, or the call budget closing it on the message's last call), the next scan's text is
  appended to that call's tool result, ``"<feedback>\n\n<next scan>"`` (the same scan text the in-process
  path shows as its user message). A scan closed without such a tool result to carry the next one (a reply
  without tool calls that used up the budget, a model call that failed on every try, the budget closed
  by a call to another tool, whose result the window would not read as a scan) falls back to a user
  message, as in-process. :func:`spectrum_rft.task.window.window` reads both shapes.

Decisions (the issue is the spec; these fill its gaps):

* **One model call** = one completion that returned a usable assistant message. It counts once against
  the scan's budget, whatever the number of tool calls in it (the first call of a message opens the env's
  model turn, the last one ends it). Transport failures inside it (timeouts, 5xx, connection errors, empty
  ``choices``, ``finish_reason=length`` without a tool call, tool-call arguments that are not JSON) are
  retried up to ``llm_tries`` times with exponential backoff and full jitter, with no sleep after the last
  try. When every try failed the scan is force-advanced as an empty report (``skip("llm_failure")``): the
  rollout goes on and every scan stays scored. Unparseable arguments on the *last* try are kept instead:
  the env answers them with an error naming the problem and the call counts against the budget.
* **A model that never answered** (every try of the rollout's first model call failed) is not a model
  that reported nothing: the remaining scans are closed as skipped (``finish("llm_failure")``, so the env's
  record stays complete) and the row ends as an *error* (:func:`mark_model_failure`: the cause in the status
  message and in ``extra["spectrum_rollout"]["model_failure"]``). Set, never raised, so eval-protocol does
  not retry the rollout three times.
* **Request errors** (HTTP 401/403/404, and 400/413/422 before any successful model call of the rollout)
  are configuration, not model behaviour: the row ends with an error status (cause ``"bad request"``), not
  retried. A 401/403/404 later ends the rollout with an error status too; a 400 later (a transcript a
  provider refuses, a context overflow) force-advances that scan like any other failure.
* **Huge tool-call arguments** reach the env (which refuses more than ``MAX_ARGUMENT_BYTES`` by size), but
  the row and the transcript keep only a bounded preview of arguments that were refused and longer than
  ``ARGS_PREVIEW_CHARS``, or longer than ``ARGS_MAX_CHARS`` in any case (:func:`stored_arguments`).
* **Text without a tool call** counts as a model call; the env's reminder is appended as a user message
  (so the next request does not end on an assistant message) unless the budget just closed the scan.
* **Scripted models** (``spectrum/<policy>``, :data:`SCRIPTED_MODEL_PREFIX`) get the row in litellm's
  ``metadata={"spectrum_row": {"row_id", "dataset_info"}}`` (their handler rebuilds the row's env from it);
  no other model ever gets it. What registers them is the caller's ``prepare_model``.
* The transcript is kept as plain dicts (what the chat API takes); ``row.messages`` is rebuilt as
  eval-protocol ``Message`` objects at the start, every ``log_every_scans`` scans and at the end. The row is
  logged at the start and every ``log_every_scans`` scans; eval-protocol logs the returned row itself (pass
  ``log_final=True`` when calling a processor outside ``@evaluation_test``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Protocol

import httpx
import litellm
import openai
from eval_protocol.models import EvaluationRow, Message, Status
from eval_protocol.pytest.rollout_processor import RolloutProcessor
from eval_protocol.pytest.types import RolloutProcessorConfig

from spectrum_rft.rollouts.failures import FAILURE_CAUSES, FAULT_OF_CAUSE, MODEL_FAILURE
from spectrum_rft.rollouts.scripted import SCRIPTED_MODEL_PREFIX, is_scripted_model, row_metadata  # noqa: F401
from spectrum_rft.task.actions import is_unparseable
from spectrum_rft.task.environment import SpectrumEnv, ToolResult, env_for_row
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

# Keys that callers put into completion params for other transports but litellm must not forward.
_NOT_FOR_LITELLM = ("use_caching",)
# HTTP statuses that say "this request will never work": configuration, not a passing fault.
_FATAL_STATUS = frozenset({401, 403, 404})
_BAD_REQUEST_STATUS = frozenset({400, 413, 422})


class RolloutConfigError(RuntimeError):
    """The model endpoint refused the request itself (auth, unknown model, bad parameter)."""


# ---- failed model requests: one classification and one error-row contract ------------------------------



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
    ``spectrum-rft eval`` and :func:`spectrum_rft.rollouts.row_result.evaluate_row`):

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
    return any(is_unparseable(tc["function"]["arguments"]) for tc in tool_calls)


# ---- the episode a transport carries ---------------------------------------------------------------------


@dataclass
class Opening:
    """What the env shows before the first model call."""

    system_prompt: str
    tools: list[dict]  # OpenAI function schemas of this row (SpectrumEnv.tools())
    memory_mode: str
    max_model_calls: int  # a bound the env's call budget keeps the loop under (a guard, never reached)


# Model calls the loop allows beyond every scan's budget plus one reply per scan (a guard, never reached).
CALL_GUARD_SLACK = 8


def max_model_calls(n_scans: int, max_calls_per_scan: int) -> int:
    """The loop's guard on model calls: every scan's call budget, one more reply per scan, some slack. The
    env's budget closes each scan well before it (both transports compute it from the env's numbers)."""
    return n_scans * (max_calls_per_scan + 1) + CALL_GUARD_SLACK


def opening_of(env: SpectrumEnv) -> Opening:
    return Opening(env.system_prompt(), env.tools(), env.config.memory_mode,
                   max_model_calls(env.n_scans, env.config.max_calls_per_scan))


class Episode(Protocol):
    """One rollout's env as a transport reaches it. ``done``, ``scan`` (0-based open scan) and ``prompt``
    (the open scan's text) are the env's, as of its last answer."""

    done: bool
    scan: int
    prompt: str
    scans_in_tool_results: bool  # the transport's scan delivery (the module docstring)

    async def start(self) -> Opening: ...

    async def call(self, name: str, arguments: str, *, first: bool, last: bool) -> ToolResult:
        """One tool call as the model wrote it (``first``/``last``: its place in the model's message)."""

    async def no_tool_call(self) -> str | None:
        """A reply without tool calls: the env's reminder for the model, or None (the scan was closed)."""

    async def skip(self, reason: str) -> None: ...

    async def finish(self, reason: str) -> dict:
        """Close the episode (remaining scans skipped with ``reason``); the env's metrics with
        ``scan_records``."""

    def record_fault(self, kind: str) -> None:
        """Count a transport-level fault (delivered to the env with the next request at the latest)."""


class InProcessEpisode:
    """The env itself, in this process. Scans arrive as user messages."""

    scans_in_tool_results = False

    def __init__(self, row_id: str, dataset_info: dict | None):
        self.env, self.seed = env_for_row(row_id, dataset_info)
        self.done, self.scan, self.prompt = False, 0, ""

    def _sync(self) -> None:
        env = self.env
        scan = env.scan_index
        if scan != self.scan or not self.prompt:
            self.prompt = env.observation()["prompt"]
        self.done, self.scan = env.done, scan

    async def start(self) -> Opening:
        self.env.reset(self.seed)
        self._sync()
        return opening_of(self.env)

    async def call(self, name: str, arguments: str, *, first: bool, last: bool) -> ToolResult:
        return self.call_now(name, arguments, first=first, last=last)

    def call_now(self, name: str, arguments: Any, *, first: bool, last: bool) -> ToolResult:
        res = self.env.call_tool(name, arguments, first=first, last=last)  # a message is one turn
        self._sync()
        return res

    async def no_tool_call(self) -> str | None:
        nudge = self.env.no_tool_call()
        self._sync()
        return nudge

    async def skip(self, reason: str) -> None:
        if not self.env.done:
            self.env.skip(reason)
        self._sync()

    async def finish(self, reason: str) -> dict:
        self.env.finish(reason)
        self._sync()
        return self.env.result()

    def record_fault(self, kind: str) -> None:
        self.env.record_fault(kind)


# ---- one rollout ---------------------------------------------------------------------------------------


@dataclass
class _Reply:
    message: dict  # the assistant message as sent back to the API
    extra: dict  # what only the row keeps (reasoning_content, finish_reason)


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


async def run_tools(episode: Episode, tool_calls: Any, transcript: list[dict], stats: _Stats) -> int | None:
    """Carry one message's tool calls to the env in order; append one tool result per call. Returns the
    transcript index of the result of the ``submit_report`` call that closed the open scan (scored it, or
    the call budget closed it), None when no such call did."""
    closer: int | None = None
    n = len(tool_calls)
    for i, tc in enumerate(tool_calls):
        fn = tc["function"]
        name = fn.get("name")
        name = name if isinstance(name, str) else ""
        args = fn.get("arguments")
        args = args if isinstance(args, str) else ("" if args is None else json.dumps(args))
        res = await episode.call(name, args, first=i == 0, last=i == n - 1)
        fn["arguments"] = stored_arguments(args, refused=not res.ok)
        stats.extras[len(transcript)] = {"name": name or None,
                                         "control_plane_step": {"reward": res.reward, "advanced": res.advanced,
                                                                "ok": res.ok, "error": res.error}}
        if closer is None and name == "submit_report" and (res.advanced or res.skipped):
            closer = len(transcript)
        transcript.append({"role": "tool", "tool_call_id": tc["id"], "content": res.content})
    return closer


class SpectrumRolloutProcessor(RolloutProcessor):
    """The rollout loop over an :class:`Episode` (subclasses say how to reach the env: :meth:`episode`).

    Args:
        llm_tries: attempts per model call (1 = no retry).
        backoff_base, backoff_max: the backoff before retry ``i`` (1-based) is uniform in
            ``[0, min(backoff_max, backoff_base * 2**(i-1))]`` (full jitter).
        request_timeout: seconds per request, unless the completion params carry ``timeout``.
        icl_token_budget: for ``icl`` rows, drop the oldest scans beyond this token estimate.
        log_every_scans: also log the partial row every N scans (0: only at the start).
        log_final: log the finished row too (eval-protocol's ``@evaluation_test`` already does).
        prepare_model: called with the completion params before each batch of rollouts (e.g. to register
            a custom litellm provider such as the scripted ``spectrum/<policy>`` models).
    """

    transport = "?"

    def __init__(self, *, llm_tries: int = 4, backoff_base: float = 1.0, backoff_max: float = 16.0,
                 request_timeout: float = 180.0, icl_token_budget: int | None = None,
                 log_every_scans: int = 6, log_final: bool = False,
                 prepare_model: Callable[[dict], None] | None = None):
        if llm_tries < 1:
            raise ValueError("llm_tries must be >= 1")
        self.llm_tries = llm_tries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.request_timeout = request_timeout
        self.icl_token_budget = icl_token_budget
        self.log_every_scans = log_every_scans
        self.log_final = log_final
        self.prepare_model = prepare_model

    # ---- eval-protocol API -------------------------------------------------------------------------

    def __call__(self, rows: list[EvaluationRow], config: RolloutProcessorConfig) -> list[asyncio.Task[EvaluationRow]]:
        params = self.request_params(config.completion_params, config.kwargs)
        if self.prepare_model is not None:
            self.prepare_model(dict(params))
        self.before_batch(config)

        async def one(row: EvaluationRow) -> EvaluationRow:
            async with config.semaphore:
                return await self.rollout(row, params, config)

        return [asyncio.create_task(one(row)) for row in rows]

    def before_batch(self, config: RolloutProcessorConfig) -> None:
        """Hook: set up what the episodes of this batch need (the MCP server)."""

    def episode(self, row: EvaluationRow, config: RolloutProcessorConfig) -> contextlib.AbstractAsyncContextManager:
        """An async context manager giving this row's :class:`Episode`."""
        raise NotImplementedError

    def request_params(self, completion_params: dict | None, kwargs: dict | None = None) -> dict:
        """litellm keyword arguments from the processor config's completion params (never the row's)."""
        params = dict(normalize_fireworks_model_for_litellm(dict(completion_params or {})) or {})
        if not params.get("model"):
            raise ValueError("completion_params must name a model")
        for k in _NOT_FOR_LITELLM:
            params.pop(k, None)
        params["cache"] = {"no-cache": True}
        params.setdefault("max_retries", 0)  # the OpenAI client would retry twice on its own
        params.setdefault("timeout", (kwargs or {}).get("request_timeout", self.request_timeout))
        return params

    def _setting(self, config: RolloutProcessorConfig, name: str) -> Any:
        return (config.kwargs or {}).get(name, getattr(self, name))

    # ---- one rollout -------------------------------------------------------------------------------

    async def rollout(self, row: EvaluationRow, params: dict, config: RolloutProcessorConfig) -> EvaluationRow:
        t0 = time.perf_counter()
        row.input_metadata.completion_params = {k: v for k, v in params.items() if k not in ("cache", "api_key")}
        stats = _Stats()
        transcript: list[dict] = []
        try:
            if not row.input_metadata.row_id:
                raise ValueError("row has no input_metadata.row_id (the band seed is derived from it)")
            async with self.episode(row, config) as ep:
                transcript = await self._episode(ep, row, params, stats, config)
        except Exception as e:  # the transport itself failed (a bug, a dead server): the row carries it
            if not row.rollout_status.is_error():
                row.rollout_status = Status.rollout_error(f"{type(e).__name__}: {e}")
        try:
            if transcript:
                row.messages = self._messages(transcript, stats)
            self._finish_metadata(row, stats, t0)
        except Exception as e:  # never mask the first error
            if not row.rollout_status.is_error():
                row.rollout_status = Status.rollout_error(f"{type(e).__name__} while finishing the row: {e}")
        if self.log_final:
            config.logger.log(row)
        return row

    async def _episode(self, ep: Episode, row: EvaluationRow, params: dict, stats: _Stats,
                       config: RolloutProcessorConfig) -> list[dict]:
        started = False
        transcript: list[dict] = []
        try:
            opening = await ep.start()
            started = True
            transcript = self._opening(row, opening.system_prompt)
            row.tools = opening.tools
            row.messages = self._messages(transcript, stats)
            row.rollout_status = Status.rollout_running()
            config.logger.log(row)
            if is_scripted_model(params.get("model")):
                params = {**params, "metadata": {**(params.get("metadata") or {}), **row_metadata(
                    row.input_metadata.row_id, dict(row.input_metadata.dataset_info or {}))}}
            await self._play(ep, opening, transcript, params, stats, row, config)
            row.rollout_status = Status.rollout_finished()
        except RolloutConfigError as e:
            row.rollout_status = Status.rollout_error(str(e))
        except Exception as e:  # a bug: the row carries it (eval-protocol would retry and lose the env)
            row.rollout_status = Status.rollout_error(f"{type(e).__name__}: {e}")
            stats.cause = None  # not the model's failure
        never_answered = stats.model_calls == 0 and stats.cause is not None
        if started:
            result = await ep.finish("llm_failure" if never_answered else "rollout_error")
            extra = dict(row.execution_metadata.extra or {})
            extra["spectrum"] = result
            extra["spectrum_rollout"] = {"transport": self.transport, "model_calls": stats.model_calls,
                                         "llm_requests": stats.llm_requests}
            row.execution_metadata.extra = extra
        if never_answered:
            mark_model_failure(row, stats.cause, stats.llm_requests, stats.detail, endpoint_of(params))
        return transcript

    async def _play(self, ep: Episode, opening: Opening, transcript: list[dict], params: dict, stats: _Stats,
                    row: EvaluationRow, config: RolloutProcessorConfig) -> None:
        mode = opening.memory_mode
        budget = self._setting(config, "icl_token_budget") if mode == "icl" else None
        log_every = self.log_every_scans
        in_tool_results = bool(getattr(ep, "scans_in_tool_results", False))
        shown = -1  # index of the scan last shown to the model

        def showing(scan: int) -> None:  # a new scan is in the transcript
            nonlocal shown
            if shown >= 0 and log_every and scan % log_every == 0:
                row.messages = self._messages(transcript, stats)
                config.logger.log(row)
            shown = scan

        guard = opening.max_model_calls  # never reached while the env keeps its call budget
        while not ep.done:
            guard -= 1
            if guard < 0:
                await ep.finish("loop_guard")
                break
            if ep.scan != shown:  # the first scan, or one no tool result carried: a user message
                transcript.append({"role": "user", "content": ep.prompt})
                showing(ep.scan)
            reply = await self._complete(window(transcript, mode, budget), opening.tools, params, ep, stats, config)
            if reply is None:  # every try failed: the scan is scored as an empty report
                if stats.model_calls == 0:  # and the model never answered at all: the rollout is an error
                    await ep.finish("llm_failure")
                    break
                await ep.skip("llm_failure")
                continue
            stats.model_calls += 1
            stats.extras[len(transcript)] = reply.extra
            transcript.append(reply.message)
            calls = reply.message.get("tool_calls")
            if calls:
                closer = await run_tools(ep, calls, transcript, stats)
                if in_tool_results and closer is not None and not ep.done and ep.scan != shown:
                    transcript[closer]["content"] += "\n\n" + ep.prompt  # the result that closed the scan
                    showing(ep.scan)
            else:
                nudge = await ep.no_tool_call()
                if nudge:
                    transcript.append({"role": "user", "content": nudge})

    async def _complete(self, messages: list[dict], tools: list[dict], params: dict, ep: Episode, stats: _Stats,
                        config: RolloutProcessorConfig) -> _Reply | None:
        """One model call with bounded retries; None when every try failed."""
        tries = int(self._setting(config, "llm_tries"))
        base, cap = self._setting(config, "backoff_base"), self._setting(config, "backoff_max")
        for attempt in range(tries):
            if attempt:
                await asyncio.sleep(backoff_delay(attempt, base, cap))
            stats.llm_requests += 1
            try:
                resp = await litellm.acompletion(messages=messages, tools=tools, **params)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001  (classified below; never kills the rollout)
                status = getattr(e, "status_code", None)
                stats.cause, stats.detail = failure_cause(e), failure_detail(e)
                if isinstance(e, litellm.ContextWindowExceededError):
                    ep.record_fault("llm_context_window")
                    return None  # the same request will overflow again
                if _is_config_error(e) or (status in _BAD_REQUEST_STATUS and stats.ok_calls == 0):
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
            if calls and _bad_arguments(calls):
                ep.record_fault("llm_bad_tool_json")
                if attempt < tries - 1:
                    continue
            return reply
        ep.record_fault("llm_gave_up")
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
    def _opening(row: EvaluationRow, system_prompt: str) -> list[dict]:
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
            out.insert(0, {"role": "system", "content": system_prompt})
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


@contextlib.asynccontextmanager
async def in_process_episode(row: EvaluationRow) -> AsyncIterator[InProcessEpisode]:
    yield InProcessEpisode(row.input_metadata.row_id, row.input_metadata.dataset_info)
