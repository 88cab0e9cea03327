"""The program that plays one rollout: scans in, tool calls out, :class:`SpectrumEnv` the only judge.

verifiers 0.4.0 has no ``MultiTurnEnv.env_response``: in its v1 stack the *harness* owns the conversation
and sends every model request (through the rollout's interception endpoint, which records each call in
the trace). This harness hands the episode to the project's episode driver
(``spectrum_rft.rollouts.driver.drive``), the loop ``spectrum-rft eval`` runs too, so its rules are the
evaluator's, written once:

* the row's env comes from ``env_for_row`` (the row id and ``seed_for_row``), reset with the row's seed
  (``spectrum_rft.rollouts.episode.InProcessEpisode``); every scan arrives as a user message, as on the
  evaluator's in-process path; the tools are the env's ``tool_schemas()``;
* what the model is sent is ``spectrum_rft.task.window.window(transcript, memory_mode)``;
* every tool call, as the model wrote it, goes to ``SpectrumEnv.call_tool`` (the calls of one reply are one
  model turn); a reply without tool calls goes to ``SpectrumEnv.no_tool_call``;
* model requests (the OpenAI client) are retried and classified as the evaluator's are
  (``spectrum_rft.rollouts.model_calls.ModelCaller``): a scan whose request failed on every try is scored
  as an empty report and the rollout goes on; a model that never answered ends the rollout as an error
  (exit code 1, the evaluator's one-line message, the cause in ``trace.info["spectrum_rollout"]``), never a
  silent score of 0; a request the endpoint refuses outright (auth, unknown model) likewise;
* at the end every unplayed scan is closed as skipped and the env's record (``SpectrumEnv.result()``) is
  stored in ``trace.info["spectrum"]``, where the task's reward reads it.
"""

from __future__ import annotations

import openai
import verifiers.v1 as vf

from spectrum_rft.rollouts.driver import play
from spectrum_rft.rollouts.episode import InProcessEpisode
from spectrum_memory.taskset import INFO_KEY


class SpectrumHarnessConfig(vf.HarnessConfig):
    request_timeout: float = 180.0
    """Seconds per model request."""
    llm_tries: int = 4
    """Attempts per model call (1 = no retry), as ``spectrum-rft eval --llm-tries``."""
    backoff_base: float = 1.0
    """Backoff before retry i: uniform in [0, min(backoff_max, backoff_base * 2**(i-1))] seconds."""
    backoff_max: float = 16.0


class SpectrumHarness(vf.Harness[SpectrumHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False  # the model gets no execution: its only actions are the env's tools
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData,
                     tool_interception_url: str | None = None) -> vf.ProgramResult:
        episode = InProcessEpisode.for_row(str(data.id), {"environment_context": dict(data.environment_context)})
        system, prompt = self.resolve_prompt(data)
        transcript = [{"role": "system", "content": system or episode.env.system_prompt()}]
        if isinstance(prompt, str) and prompt:
            transcript.append({"role": "user", "content": prompt})
        client = openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0,
                                    timeout=self.config.request_timeout)

        async def request(messages: list[dict], tools: list[dict]):
            return await client.chat.completions.create(model=ctx.model, messages=messages, tools=tools)

        try:
            played = await play(episode, request, transcript=transcript, tries=self.config.llm_tries,
                                backoff_base=self.config.backoff_base, backoff_max=self.config.backoff_max,
                                endpoint=f"{endpoint} (model {ctx.model})")
        finally:
            await client.close()
        stats = played.stats
        trace.info[INFO_KEY] = played.result
        rollout: dict = {"transport": "verifiers", "model_calls": stats.model_calls, "llm_requests": stats.llm_requests}
        if played.failure is not None:  # the evaluator's extra["spectrum_rollout"]["model_failure"]
            rollout["model_failure"] = played.failure
        trace.info["spectrum_rollout"] = rollout
        if played.error is not None:
            return vf.ProgramResult(exit_code=1, stdout="", stderr=played.error)
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")
