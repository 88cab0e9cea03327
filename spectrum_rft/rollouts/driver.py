"""The episode driver: one rollout of the spectrum task, played against a model, for every transport.

In the shape of verifiers' ``MultiTurnEnv.rollout``::

    opening = await episode.start()                      # the row's env, reset with the row's seed
    while not episode.done:
        a scan not shown yet -> append it as a user message
        reply = model(window(transcript, memory_mode))   # what the model sees: spectrum_rft.task.window
        append reply; each tool call -> episode.call()   # the env judges it (SpectrumEnv.call_tool)
            (scans_in_tool_results: the submit_report result that closed the scan carries the next one)
        no tool call -> episode.no_tool_call()           # the env counts it and says what to tell the model

:func:`drive` is that loop, written once: the evaluator's rollout processor (both transports,
:mod:`spectrum_rft.rollouts.loop`) calls it with its episode (:mod:`spectrum_rft.rollouts.episode`) and its
model (:class:`ModelCaller` around litellm: retries and failure causes, :mod:`spectrum_rft.rollouts.model_calls`);
:func:`drive_now` runs it at once for an in-process episode and an in-process scripted model
(:class:`spectrum_rft.baselines.policies.ScriptedModel`: the audit, bench90, the TRL adapter's scan prefix);
:func:`play` is a whole rollout around it for a transport outside eval-protocol (the verifiers harness in
``environments/spectrum_memory``, the OpenEnv client in ``environments/spectrum_openenv``): the episode, an
OpenAI-shaped ``request``, and what the evaluator records of a model that never answered. The rules it keeps
(where scans arrive, what a reply without tool calls gets, a scan whose model call failed on every try, a
model that never answered, the loop guard) are in :mod:`spectrum_rft.rollouts.loop`'s docstring.
Imports neither litellm nor eval-protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from spectrum_rft.rollouts.dataset import FIRST_USER_MESSAGE
from spectrum_rft.rollouts.failures import SKIP_MODEL_FAILURE
from spectrum_rft.rollouts.episode import Episode, Opening
from spectrum_rft.rollouts.model_calls import (CallStats, ModelCaller, ModelFn, RolloutConfigError, model_failure,
                                               model_failure_message)
from spectrum_rft.task.memory import memory_mode
from spectrum_rft.task.scan_format import with_next_scan
from spectrum_rft.task.window import window

# ---- tool-call arguments kept in rows and transcripts ----------------------------------------------------

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


async def run_tools(episode: Episode, tool_calls: Any, transcript: list[dict], stats: CallStats) -> int | None:
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


async def drive(ep: Episode, opening: Opening, transcript: list[dict], model: ModelFn, stats: CallStats, *,
                icl_token_budget: int | None = None, on_scan: Callable[[int], None] | None = None) -> None:
    """Play the episode ``ep`` (started: ``opening``) to its end against ``model``, appending every message to
    ``transcript`` (which holds the opening messages). ``on_scan(k)`` is called when scan ``k`` (0-based)
    enters the transcript after the first (a transport's periodic logging). ``icl_token_budget``: for
    episodes whose memory mode keeps the history (``icl``), what :func:`~spectrum_rft.task.window.window`
    keeps of earlier scans."""
    mode = opening.memory_mode
    budget = icl_token_budget if memory_mode(mode).history else None
    in_tool_results = bool(getattr(ep, "scans_in_tool_results", False))
    shown = -1  # index of the scan last shown to the model

    def showing(scan: int) -> None:  # a new scan is in the transcript
        nonlocal shown
        if shown >= 0 and on_scan is not None:
            on_scan(scan)
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
        reply = await model(window(transcript, mode, budget), opening.tools, ep, stats)
        if reply is None:  # every try failed: the scan is scored as an empty report
            if stats.model_calls == 0:  # and the model never answered at all: the rollout is an error
                await ep.finish(SKIP_MODEL_FAILURE)
                break
            await ep.skip(SKIP_MODEL_FAILURE)
            continue
        stats.model_calls += 1
        stats.extras[len(transcript)] = reply.extra
        transcript.append(reply.message)
        calls = reply.message.get("tool_calls")
        if calls:
            closer = await run_tools(ep, calls, transcript, stats)
            if in_tool_results and closer is not None and not ep.done and ep.scan != shown:
                transcript[closer]["content"] = with_next_scan(transcript[closer]["content"], ep.prompt)
                showing(ep.scan)
        else:
            nudge = await ep.no_tool_call()
            if nudge:
                transcript.append({"role": "user", "content": nudge})


def drive_now(ep: Episode, model: ModelFn, *,
              transcript: list[dict] | None = None) -> CallStats:
    """Start ``ep`` and :func:`drive` it to its end at once, for an episode and a model that never wait (the
    env in this process, a scripted policy in this process: the audit, bench90, the TRL adapter's scan
    prefix), with or without a running event loop (TRL may call from inside one). ``transcript``: the opening
    messages (None: the system prompt); it receives the rest. Returns the call statistics, whose ``extras``
    hold the env's verdict on every tool call (``control_plane_step``)."""
    stats = CallStats()

    async def run() -> None:
        opening = await ep.start()
        messages = [{"role": "system", "content": opening.system_prompt}] if transcript is None else transcript
        await drive(ep, opening, messages, model, stats)

    coro = run()
    try:
        coro.send(None)  # nothing in it waits, so it runs to its end here
    except StopIteration:
        return stats
    coro.close()
    raise RuntimeError("drive_now: the episode or the model waited on something; drive it in an event loop")


def refusals(stats: CallStats) -> list[str]:
    """The env's error for every tool call it refused in a :func:`drive` (from ``stats.extras``)."""
    return [x["control_plane_step"]["error"] for x in stats.extras.values()
            if "control_plane_step" in x and not x["control_plane_step"]["ok"]]


@dataclass
class Played:
    """What :func:`play` leaves: the env's record, the call statistics, the record of a model that never
    answered (:func:`~spectrum_rft.rollouts.model_calls.model_failure`, else None), the error that ends the
    rollout as one (None when it finished as a rollout, whatever it scored), and the transcript."""

    result: dict
    stats: CallStats
    failure: dict | None
    error: str | None
    transcript: list[dict]


async def play(episode: Episode, request: Callable[[list[dict], list[dict]], Awaitable[Any]], *,
               transcript: list[dict] | None = None, tries: int = 4, backoff_base: float = 1.0,
               backoff_max: float = 16.0, endpoint: str = "the model") -> Played:
    """Play ``episode`` to its end through :func:`drive`. ``request(messages, tools)`` is one chat completion
    request (an OpenAI-shaped response), retried and classified by :class:`ModelCaller`. ``transcript``: the
    opening messages (None: the opening's system prompt and :data:`~spectrum_rft.rollouts.dataset.FIRST_USER_MESSAGE`,
    as a dataset row opens); it receives the rest. A request the endpoint refuses outright, or a model that never
    answered, ends the rollout as an error (``error``, the evaluator's one-line message); every unplayed scan is
    closed as skipped, with the evaluator's reasons."""
    opening = await episode.start()
    if transcript is None:
        transcript = [{"role": "system", "content": opening.system_prompt},
                      {"role": "user", "content": FIRST_USER_MESSAGE}]
    stats = CallStats()
    model = ModelCaller(request, tries=tries, backoff_base=backoff_base, backoff_max=backoff_max)
    error, failure = None, None
    try:
        await drive(episode, opening, transcript, model, stats)
    except RolloutConfigError as e:
        error = str(e)
    if stats.never_answered:
        failure = model_failure(stats.cause, stats.llm_requests, stats.detail)
        error = model_failure_message(failure, endpoint)
    result = await episode.finish(SKIP_MODEL_FAILURE if failure else "rollout_error")  # as the evaluator
    return Played(result, stats, failure, error, transcript)
