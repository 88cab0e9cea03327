"""The rollout processor of the spectrum task: eval-protocol's ``RolloutProcessor`` over the episode driver.

:func:`spectrum_rft.rollouts.driver.drive` plays the episode (the loop, written once for every transport and
client); this module gives it litellm as the model (:class:`~spectrum_rft.rollouts.model_calls.ModelCaller`),
an :class:`~spectrum_rft.rollouts.episode.Episode` per row (subclasses say how to reach the env: in process,
``turn.py``; over MCP, ``mcp_client.py``) and fills the eval-protocol row: messages, status, the env's
record, the error row of a model that never answered. The env decides everything (what a call does, what
an unknown tool gets, when the call budget closes a scan, what the model is told), so the same model gets
the same scores, faults and texts on both paths (``tests/test_rollout_parity.py``) and through the
verifiers harness, which drives the same loop.

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
import functools
import time
from typing import Any, AsyncIterator, Callable

import litellm
from eval_protocol.models import EvaluationRow, Message, Status
from eval_protocol.pytest.rollout_processor import RolloutProcessor
from eval_protocol.pytest.types import RolloutProcessorConfig

from spectrum_rft.rollouts.driver import drive
from spectrum_rft.rollouts.failures import SKIP_MODEL_FAILURE
from spectrum_rft.rollouts.episode import Episode, InProcessEpisode
from spectrum_rft.common.redaction import redact_params, resolve_env_refs
from spectrum_rft.rollouts.model_calls import (CallStats, ModelCaller, RolloutConfigError, endpoint_of,
                                               model_failure, model_failure_message, reply_deadline)
from spectrum_rft.rollouts.scripted import is_scripted_model, row_metadata
from spectrum_rft.task.window import is_scan_message

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


def mark_model_failure(row: EvaluationRow, cause: str | None, requests: int, detail: str, endpoint: str) -> None:
    """Make ``row`` the error row of a rollout whose model never produced a usable reply (the contract read by
    ``spectrum-rft eval`` and :func:`spectrum_rft.rollouts.row_result.evaluate_row`):

    * ``row.rollout_status = Status.rollout_error("model never produced a usable reply: <cause> (...)")``;
    * ``row.execution_metadata.extra["spectrum_rollout"]["model_failure"] = {"cause", "requests", "detail"}``
      with ``cause`` one of :data:`FAILURE_CAUSES`.

    ``extra["spectrum"]`` (the env's record) is left as it is."""
    failure = model_failure(cause, requests, detail)
    row.rollout_status = Status.rollout_error(model_failure_message(failure, endpoint))
    extra = dict(row.execution_metadata.extra or {})
    extra["spectrum_rollout"] = {**(extra.get("spectrum_rollout") or {}), "model_failure": failure}
    row.execution_metadata.extra = extra


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
        params = dict(normalize_fireworks_model_for_litellm(resolve_env_refs(dict(completion_params or {}))) or {})
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
        row.input_metadata.completion_params = redact_params({k: v for k, v in params.items() if k != "cache"})
        stats = CallStats()
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

    async def _episode(self, ep: Episode, row: EvaluationRow, params: dict, stats: CallStats,
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
            log_every = self.log_every_scans

            def on_scan(scan: int) -> None:  # scan - 1 closed; the partial row, every log_every scans
                scan_closed(row.input_metadata.row_id, scan - 1)
                if log_every and scan % log_every == 0:
                    row.messages = self._messages(transcript, stats)
                    config.logger.log(row)

            model = ModelCaller(functools.partial(self._request, params), tries=int(self._setting(config, "llm_tries")),
                                backoff_base=self._setting(config, "backoff_base"),
                                backoff_max=self._setting(config, "backoff_max"),
                                overflow=(litellm.ContextWindowExceededError,), deadline=reply_deadline(params))
            await drive(ep, opening, transcript, model, stats, on_scan=on_scan,
                        icl_token_budget=self._setting(config, "icl_token_budget"))
            row.rollout_status = Status.rollout_finished()
        except RolloutConfigError as e:
            row.rollout_status = Status.rollout_error(str(e))
        except Exception as e:  # a bug: the row carries it (eval-protocol would retry and lose the env)
            row.rollout_status = Status.rollout_error(f"{type(e).__name__}: {e}")
            stats.cause = None  # not the model's failure
        never_answered = stats.never_answered
        if started:
            result = await ep.finish(SKIP_MODEL_FAILURE if never_answered else "rollout_error")
            extra = dict(row.execution_metadata.extra or {})
            extra["spectrum"] = result
            extra["spectrum_rollout"] = {"transport": self.transport, "model_calls": stats.model_calls,
                                         "llm_requests": stats.llm_requests}
            row.execution_metadata.extra = extra
        if never_answered:
            mark_model_failure(row, stats.cause, stats.llm_requests, stats.detail, endpoint_of(params))
        return transcript

    @staticmethod
    async def _request(params: dict, messages: list[dict], tools: list[dict]) -> Any:
        return await litellm.acompletion(messages=messages, tools=tools, **params)

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
    def _messages(transcript: list[dict], stats: CallStats) -> list[Message]:
        out = []
        for i, d in enumerate(transcript):
            extra = stats.extras.get(i)
            if extra:
                d = {**d, **{k: v for k, v in extra.items() if k in ("reasoning_content", "name",
                                                                       "control_plane_step") and v is not None}}
            out.append(Message.model_validate(d))
        return out

    @staticmethod
    def _finish_metadata(row: EvaluationRow, stats: CallStats, t0: float) -> None:
        from openai.types import CompletionUsage  # noqa: PLC0415

        md = row.execution_metadata
        md.rollout_duration_seconds = time.perf_counter() - t0
        md.finish_reason = stats.finish_reason
        md.tool_call_count = sum(len(m.tool_calls or []) for m in row.messages if m.role == "assistant")
        md.usage = CompletionUsage(prompt_tokens=stats.prompt_tokens, completion_tokens=stats.completion_tokens,
                                   total_tokens=stats.prompt_tokens + stats.completion_tokens)


def scan_closed(row_id: str, scan: int) -> None:
    """Called by the processor when scan ``scan`` (0-based) of a rollout of row ``row_id`` has closed and the
    next one is shown (an episode's last scan closes with its row). Does nothing here: the evaluation child's
    pytest plugin (:mod:`spectrum_rft.tools.evaluation.plugin`) replaces it, so that ``spectrum-rft eval``
    can count scans, not only rows, for a slow model."""


@contextlib.asynccontextmanager
async def in_process_episode(row: EvaluationRow) -> AsyncIterator[InProcessEpisode]:
    yield InProcessEpisode.for_row(row.input_metadata.row_id, row.input_metadata.dataset_info)
