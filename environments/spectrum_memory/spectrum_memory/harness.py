"""The program that plays one rollout: scans in, tool calls out, :class:`SpectrumEnv` the only judge.

verifiers 0.4.0 has no ``MultiTurnEnv.env_response``: in its v1 stack the *harness* owns the conversation
and sends every model request (through the rollout's interception endpoint, which records each call in
the trace). So this harness is where each turn's prompt is built, with the project's own rules:

* the row's env comes from ``env_for_row`` (the row id and ``seed_for_row``), reset with the row's seed;
* every scan arrives as a user message, as on the evaluator's in-process path
  (``spectrum_rft.rollouts.loop``); the tools are the env's ``tool_schemas()``;
* what the model is sent is ``spectrum_rft.task.window.window(transcript, memory_mode)``: the whole
  conversation in ``icl``, the ICL-off window (system + the current scan + its own tool traffic) in every
  other mode, so no earlier scan leaks into the context;
* every tool call, as the model wrote it, goes to ``SpectrumEnv.call_tool`` (the calls of one reply are one
  model turn); a reply without tool calls goes to ``SpectrumEnv.no_tool_call`` and its reminder goes back
  as a user message. Refusal texts reach the model unchanged; bad model input never raises;
* at the end every unplayed scan is closed as skipped and the env's record (``SpectrumEnv.result()``) is
  stored in ``trace.info["spectrum"]``, where the task's reward reads it.

A model request that fails closes the open scan as an empty report (``skip("llm_failure")``) and the
rollout goes on; one that fails on the very first call ends the rollout as an error (no model answered).
"""

from __future__ import annotations

import uuid

import openai
import verifiers.v1 as vf

from spectrum_rft.task.environment import env_for_row
from spectrum_rft.task.window import window
from spectrum_memory.taskset import INFO_KEY


class SpectrumHarnessConfig(vf.HarnessConfig):
    request_timeout: float = 180.0
    """Seconds per model request."""


def _assistant_message(msg) -> dict:
    """The reply as the chat API takes it back (content "" rather than None; every call with a unique id)."""
    out: dict = {"role": "assistant", "content": msg.content if isinstance(msg.content, str) else ""}
    calls, seen = [], set()
    for tc in msg.tool_calls or ():
        fn = getattr(tc, "function", None)
        name = getattr(fn, "name", None)
        args = getattr(fn, "arguments", None)
        call_id = getattr(tc, "id", None)
        if not isinstance(call_id, str) or not call_id or call_id in seen:
            call_id = f"call_{uuid.uuid4().hex[:12]}"
        seen.add(call_id)
        calls.append({"id": call_id, "type": "function",
                      "function": {"name": name if isinstance(name, str) else "",
                                   "arguments": args if isinstance(args, str) else ""}})
    if calls:
        out["tool_calls"] = calls
    return out


async def play(env, seed: int, transcript: list[dict], complete) -> tuple[int, str | None]:
    """Play the episode of ``env`` (reset here with ``seed``) to its end. ``complete(messages, tools)`` is one
    model request returning an OpenAI chat message. Returns (model replies, the last request error)."""
    env.reset(seed)
    tools, mode = env.tools(), env.config.memory_mode
    replies, error, shown = 0, None, -1
    guard = env.n_scans * (env.config.max_calls_per_scan + 1)  # never reached while the env keeps its budget
    while not env.done and guard > 0:
        guard -= 1
        if env.scan_index != shown:  # a scan not shown yet: a user message
            transcript.append({"role": "user", "content": env.observation()["prompt"]})
            shown = env.scan_index
        try:
            msg = await complete(window(transcript, mode), tools)
        except openai.APIError as e:
            error = f"{type(e).__name__}: {e}"[:300]
            env.record_fault("llm_error")
            if replies == 0:
                break  # no model ever answered: the rollout is an error, its scans skipped below
            env.skip("llm_failure")
            continue
        if msg is None:
            env.record_fault("llm_empty_choices")
            env.skip("llm_failure")
            continue
        replies += 1
        reply = _assistant_message(msg)
        transcript.append(reply)
        calls = reply.get("tool_calls") or []
        for i, tc in enumerate(calls):  # this reply's calls are one turn: one scored report at most
            res = env.call_tool(tc["function"]["name"], tc["function"]["arguments"], first=i == 0,
                                last=i == len(calls) - 1)
            transcript.append({"role": "tool", "tool_call_id": tc["id"], "content": res.content})
        if not calls:
            nudge = env.no_tool_call()
            if nudge:
                transcript.append({"role": "user", "content": nudge})
    env.finish("llm_failure" if replies == 0 else "unfinished")
    return replies, error


class SpectrumHarness(vf.Harness[SpectrumHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False  # the model gets no execution: its only actions are the env's tools
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData,
                     tool_interception_url: str | None = None) -> vf.ProgramResult:
        env, seed = env_for_row(str(data.id), {"environment_context": dict(data.environment_context)})
        system, prompt = self.resolve_prompt(data)
        transcript = [{"role": "system", "content": system or env.system_prompt()}]
        if isinstance(prompt, str) and prompt:
            transcript.append({"role": "user", "content": prompt})
        client = openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0,
                                    timeout=self.config.request_timeout)

        async def complete(messages: list[dict], tools: list[dict]):
            resp = await client.chat.completions.create(model=ctx.model, messages=messages, tools=tools)
            return resp.choices[0].message if resp.choices else None

        try:
            replies, error = await play(env, seed, transcript, complete)
        finally:
            await client.close()
        trace.info[INFO_KEY] = env.result()
        trace.info["spectrum_rollout"] = {"model_calls": replies, "transport": "verifiers"}
        if replies == 0 and error is not None:
            return vf.ProgramResult(exit_code=1, stdout="", stderr=f"model never produced a usable reply: {error}")
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")
