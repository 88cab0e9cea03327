"""The client side: OpenEnv's WebSocket client for the spectrum server, and the episode driver over it.

* :class:`SpectrumEnvClient` is an OpenEnv ``EnvClient`` (one WebSocket, one server-side session and env):
  ``reset(row_id=..., dataset_info=...)``, ``step(SpectrumAction(...))``, ``state()``.
* :class:`OpenEnvEpisode` is that session as the project's episode driver reaches an env
  (:class:`spectrum_rft.rollouts.episode.Episode`): it carries each tool call, as the model wrote it, in one
  ``step`` and hands back the env's verdict; scans arrive as user messages (as on the in-process path).
* :func:`play` plays one rollout against an OpenAI-compatible model with
  :func:`spectrum_rft.rollouts.driver.drive` (the loop ``spectrum-rft eval`` and the verifiers harness run)
  and :class:`~spectrum_rft.rollouts.model_calls.ModelCaller` (the evaluator's retries and failure causes).
* :class:`SpectrumToolEnv` is the shape TRL's ``GRPOTrainer(environment_factory=...)`` asks for: ``reset``,
  the row's tools as methods, ``get_reward``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from spectrum_openenv.models import SpectrumAction, SpectrumObservation, SpectrumState
from spectrum_rft.rollouts.dataset import FIRST_USER_MESSAGE
from spectrum_rft.rollouts.driver import drive
from spectrum_rft.rollouts.episode import Opening, max_model_calls
from spectrum_rft.rollouts.model_calls import (CallStats, ModelCaller, RolloutConfigError, model_failure,
                                               model_failure_message)
from spectrum_rft.task.environment import ToolResult


class SpectrumEnvClient(EnvClient[SpectrumAction, SpectrumObservation, SpectrumState]):
    """OpenEnv's client for the spectrum server (``SpectrumEnvClient(base_url="http://127.0.0.1:8000")``)."""

    def _step_payload(self, action: SpectrumAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SpectrumObservation]:
        obs = dict(payload.get("observation") or {})
        obs.update(done=bool(payload.get("done", False)), reward=payload.get("reward"))
        if "metadata" not in obs or obs["metadata"] is None:
            obs["metadata"] = payload.get("metadata") or {}
        observation = SpectrumObservation.model_validate(obs)
        return StepResult(observation=observation, reward=observation.reward, done=observation.done,
                          metadata=observation.metadata)

    def _parse_state(self, payload: dict[str, Any]) -> SpectrumState:
        return SpectrumState.model_validate(payload)


class OpenEnvEpisode:
    """One rollout's env on the spectrum server, reached over one OpenEnv session (the
    :class:`~spectrum_rft.rollouts.episode.Episode` protocol). ``client`` is connected; the episode does not
    close it."""

    scans_in_tool_results = False

    def __init__(self, client: SpectrumEnvClient, row_id: str, dataset_info: dict | None):
        self.client, self.row_id, self.dataset_info = client, row_id, dataset_info
        self.done, self.scan, self.prompt = False, 0, ""
        self.result: dict | None = None
        self.rewards: list[float] = []  # OpenEnv's reward of every step (they add up to the score)
        self.faults: dict[str, int] = {}  # counted here, sent with the next step

    def _take(self, obs: SpectrumObservation) -> SpectrumObservation:
        self.done, self.scan, self.prompt = obs.done, obs.scan, obs.prompt
        if obs.result is not None:
            self.result = obs.result
        return obs

    async def _step(self, **fields: Any) -> SpectrumObservation:
        faults, self.faults = self.faults, {}
        result = await self.client.step(SpectrumAction(faults=faults, **fields))
        if result.reward is not None:
            self.rewards.append(float(result.reward))
        return self._take(result.observation)

    async def start(self) -> Opening:
        result = await self.client.reset(row_id=self.row_id, dataset_info=self.dataset_info)
        obs = self._take(result.observation)
        assert obs.system_prompt is not None and obs.tool_schemas is not None and obs.memory_mode is not None
        return Opening(obs.system_prompt, obs.tool_schemas, obs.memory_mode,
                       max_model_calls(obs.n_scans, int(obs.max_calls_per_scan or 1)))

    async def call(self, name: str, arguments: str, *, first: bool, last: bool) -> ToolResult:
        obs = await self._step(op="call", tool=name, arguments=arguments, first=first, last=last)
        return ToolResult(obs.text or "", ok=obs.ok, advanced=obs.advanced, reward=obs.scan_reward, error=obs.error,
                          skipped=obs.skipped)

    async def no_tool_call(self) -> str | None:
        return (await self._step(op="no_tool_call")).text

    async def skip(self, reason: str) -> None:
        await self._step(op="skip", reason=reason)

    async def finish(self, reason: str) -> dict:
        if self.result is None or self.faults:  # else the last answer already carried the env's record
            await self._step(op="finish", reason=reason)
        assert self.result is not None
        return self.result

    def record_fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


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


async def play(episode: OpenEnvEpisode, request: Callable[[list[dict], list[dict]], Awaitable[Any]], *,
               tries: int = 4, backoff_base: float = 1.0, backoff_max: float = 16.0,
               endpoint: str = "the model") -> Played:
    """Play ``episode`` to its end through the episode driver. ``request(messages, tools)`` is one chat
    completion request (an OpenAI-shaped response). The transcript opens as a dataset row does (the row's
    system prompt, then :data:`~spectrum_rft.rollouts.dataset.FIRST_USER_MESSAGE`)."""
    opening = await episode.start()
    transcript = [{"role": "system", "content": opening.system_prompt}, {"role": "user", "content": FIRST_USER_MESSAGE}]
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
    result = await episode.finish("llm_failure" if failure else "rollout_error")  # as the evaluator
    return Played(result, stats, failure, error, transcript)


def openai_request(client: Any, model: str) -> Callable[[list[dict], list[dict]], Awaitable[Any]]:
    """``request(messages, tools)`` over an ``openai.AsyncOpenAI`` client (make it with ``max_retries=0``:
    :class:`ModelCaller` does the retrying)."""

    async def request(messages: list[dict], tools: list[dict]):
        return await client.chat.completions.create(model=model, messages=messages, tools=tools)

    return request


class SpectrumToolEnv:
    """One rollout's session in the shape TRL's ``GRPOTrainer(environment_factory=...)`` asks for: ``reset``
    starts the row's episode and returns scan 1's text, the tools are methods (one call is one model turn; the
    env judges the arguments), ``get_reward`` is the env's score. Each instance holds its own session on the
    server at ``base_url``. In the non-notepad modes the notepad methods are refused by the env (counted as a
    fault), as an unlisted tool is on every path."""

    def __init__(self, base_url: str):
        self._client = SpectrumEnvClient(base_url=base_url).sync()
        self._client.connect()
        self._last: SpectrumObservation | None = None

    def reset(self, row_id: str, environment_context: dict | None = None, **_: Any) -> str:
        """Start the episode of the dataset row ``row_id`` (its ``environment_context``, as ``make_rows``
        writes it); the other dataset columns are ignored."""
        info = {"environment_context": environment_context} if environment_context is not None else None
        self._last = self._client.reset(row_id=row_id, dataset_info=info).observation
        return self._last.prompt

    def _call(self, name: str, arguments: dict) -> str:
        self._last = self._client.step(SpectrumAction(op="call", tool=name, arguments=arguments)).observation
        text = self._last.text or ""
        if self._last.advanced and not self._last.done:
            text += "\n\n" + self._last.prompt  # the next scan
        return text

    def submit_report(self, center_freqs: list[float]) -> str:
        """Report the occupied regions of the band for the current scan. Ends the scan.

        Args:
            center_freqs: Centre frequency in MHz of every occupied region.
        """
        return self._call("submit_report", {"center_freqs": center_freqs})

    def notepad_read(self) -> str:
        """Read your notepad. It persists across scans."""
        return self._call("notepad_read", {})

    def notepad_write(self, text: str) -> str:
        """Replace your notepad with new text.

        Args:
            text: The new notepad text.
        """
        return self._call("notepad_write", {"text": text})

    def get_reward(self) -> float:
        """The env's score of the episode (unplayed scans count as skipped empty reports)."""
        state = self._client.state()
        return float(state.score or 0.0)

    def _close(self) -> None:  # private: TRL exposes every public method as a tool
        self._client.close()
