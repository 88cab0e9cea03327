"""The client side: OpenEnv's WebSocket client for the spectrum server, and the episode driver over it.

* :class:`SpectrumEnvClient` is an OpenEnv ``EnvClient`` (one WebSocket, one server-side session and env):
  ``reset(row_id=..., dataset_info=...)``, ``step(SpectrumAction(...))``, ``state()``.
* :class:`OpenEnvEpisode` is that session as the project's episode driver reaches an env
  (:class:`spectrum_rft.rollouts.episode.Episode`): it carries each tool call, as the model wrote it, in one
  ``step`` and hands back the env's verdict; scans arrive as user messages (as on the in-process path).
* :func:`spectrum_rft.rollouts.driver.play` (re-exported here) plays one rollout of an :class:`OpenEnvEpisode`
  against an OpenAI-compatible model through :func:`~spectrum_rft.rollouts.driver.drive` (the loop
  ``spectrum-rft eval`` and the verifiers harness run) and :class:`~spectrum_rft.rollouts.model_calls.ModelCaller`
  (the evaluator's retries and failure causes); :func:`openai_request` makes its ``request``.
* :class:`OpenEnvToolEnv` is the shape TRL's ``GRPOTrainer(environment_factory=...)`` asks for: ``reset``,
  the row's tools as methods (``OpenEnvToolEnv.for_mode(memory_mode)``: exactly the mode's), ``get_reward``.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from spectrum_openenv.models import SpectrumAction, SpectrumObservation, SpectrumState
from spectrum_rft.rollouts.episode import Opening, max_model_calls
from spectrum_rft.task.environment import ToolResult
from spectrum_rft.task.instructions import tool_schemas
from spectrum_rft.task.scan_format import with_next_scan
from spectrum_rft.training.spectrum.trl_env import not_a_tool, tool_env_class

_FOR_MODE: dict[tuple[str, str], type] = {}  # OpenEnvToolEnv.for_mode's classes, by (tool set, preset)


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


def openai_request(client: Any, model: str) -> Callable[[list[dict], list[dict]], Awaitable[Any]]:
    """``request(messages, tools)`` over an ``openai.AsyncOpenAI`` client (make it with ``max_retries=0``:
    :class:`ModelCaller` does the retrying)."""

    async def request(messages: list[dict], tools: list[dict]):
        return await client.chat.completions.create(model=model, messages=messages, tools=tools)

    return request


class OpenEnvToolEnv:
    """One rollout's session in the shape TRL's ``GRPOTrainer(environment_factory=...)`` asks for: ``reset``
    starts the row's episode and returns scan 1's text, the tools are methods (one call is one model turn; the
    env judges the arguments), ``get_reward`` is the env's score. Each instance holds its own session on the
    server at ``base_url``. This base class has no tools: :meth:`for_mode` makes the class of a memory mode,
    whose methods are exactly that mode's tools, the project's TRL adapter's declarations
    (:func:`spectrum_rft.training.spectrum.trl_env.tool_env_class`, made from the env's ``tool_schemas()``), so
    TRL renders the schema in-process training reads; a row of another tool set is refused on ``reset``."""

    TOOL_SET: str | None = None  # set by for_mode
    PRESET: str | None = None

    @classmethod
    def for_mode(cls, memory_mode: str, preset: str = "default") -> type["OpenEnvToolEnv"]:
        """The class whose tools are ``memory_mode``'s on ``preset`` (one per tool set and preset)."""
        declared = tool_env_class(memory_mode, preset)
        key = (declared.TOOL_SET, declared.PRESET)
        if key not in _FOR_MODE:
            tools = {t["function"]["name"]: getattr(declared, t["function"]["name"])
                     for t in tool_schemas(memory_mode, preset)}
            _FOR_MODE[key] = type(f"OpenEnv{declared.__name__}", (cls,),
                                  {"TOOL_SET": declared.TOOL_SET, "PRESET": declared.PRESET, **tools,
                                   "__module__": __name__, "__doc__": f"{cls.__name__} with the tools of tool set "
                                   f"{declared.TOOL_SET!r} on preset {declared.PRESET!r}."})
        return _FOR_MODE[key]

    def __init__(self, base_url: str):
        self._client = SpectrumEnvClient(base_url=base_url).sync()
        self._client.connect()
        self._last: SpectrumObservation | None = None

    def reset(self, row_id: str, environment_context: dict | None = None, **_: Any) -> str:
        """Start the episode of the dataset row ``row_id`` (its ``environment_context``, as ``make_rows``
        writes it); the other dataset columns are ignored."""
        ctx = environment_context or {}
        if self.TOOL_SET is not None and "memory_mode" in ctx:
            mine = tool_env_class(ctx["memory_mode"], ctx.get("preset") or "default")
            if (mine.TOOL_SET, mine.PRESET) != (self.TOOL_SET, self.PRESET):
                raise ValueError(f"row {row_id!r} plays tool set {mine.TOOL_SET!r} on {mine.PRESET!r}, but "
                                 f"{type(self).__name__} has the tools of {self.TOOL_SET!r} on {self.PRESET!r}; use "
                                 f"OpenEnvToolEnv.for_mode(memory_mode, preset)")
        info = {"environment_context": environment_context} if environment_context is not None else None
        self._last = self._client.reset(row_id=row_id, dataset_info=info).observation
        return self._last.prompt

    @not_a_tool
    def call(self, name: str, arguments: dict) -> str:
        """One tool call as the model wrote it, on the session (one model turn); the text for the model."""
        self._last = self._client.step(SpectrumAction(op="call", tool=name, arguments=arguments)).observation
        text = self._last.text or ""
        if (self._last.advanced or self._last.skipped) and not self._last.done:
            text = with_next_scan(text, self._last.prompt)  # the next scan (scored, or closed by the call budget)
        return text

    def get_reward(self) -> float:
        """The env's score of the episode (unplayed scans count as skipped empty reports)."""
        state = self._client.state()
        return float(state.score or 0.0)

    def _close(self) -> None:  # private: TRL exposes every public method as a tool
        self._client.close()
