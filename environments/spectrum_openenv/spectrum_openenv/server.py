"""The spectrum task as an OpenEnv server: one :class:`SpectrumEnv` per session, its tools on MCP.

    uvicorn spectrum_openenv.server:app --host 127.0.0.1 --port 8000      # or: python -m spectrum_openenv.server

:class:`SpectrumEnvironment` is OpenEnv's MCP-style environment (``MCPEnvironment``) around the project's
:class:`~spectrum_rft.task.environment.SpectrumEnv`, which owns every rule; this module only carries:

* **Sessions.** OpenEnv's server makes one environment per WebSocket session (``SUPPORTS_CONCURRENT_SESSIONS``,
  ``max_concurrent_envs``), so every session owns its env: GRPO candidates of one row, played at once, share
  nothing but the band.
* **Rows.** ``reset(row_id=..., dataset_info=...)`` builds the env with ``env_for_row`` (the row's config and
  ``seed_for_row`` seed, as on every other path): every session of a row faces one band and one scan sequence.
* **Tools.** After each reset the session's MCP server lists exactly the row's tools (``SpectrumEnv.tools()``:
  ``submit_report``, plus the notepad tools in the notepad modes), with the env's parameter schemas; an MCP
  ``tools/call`` (OpenEnv's ``/mcp`` endpoint, or an ``mcp`` message on the session's WebSocket) is one model
  turn, and its arguments go to ``SpectrumEnv.call_tool`` unvalidated: the env refuses bad input and counts it.
* **Steps.** :class:`~spectrum_openenv.models.SpectrumAction` carries what MCP's ``CallToolAction`` cannot: a
  tool call as the model wrote it (arguments that are not JSON, an unknown tool name), its place in the
  model's message (one message is one turn), a reply without tool calls, a skip, the end, and faults counted
  by the client. The episode driver's transport (:mod:`spectrum_openenv.client`) sends these.
* **Reward.** The env's score: each observation's ``reward`` is the part of the score its action settled, so a
  session's rewards add up to ``SpectrumEnv.metrics()["score"]``; per-scan rewards and the env's record travel
  as fields (``scan_reward``, ``result``, :class:`~spectrum_openenv.models.SpectrumState`).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable
from uuid import uuid4

from fastmcp import FastMCP
from fastmcp.tools import Tool, ToolResult
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, EnvironmentMetadata
from pydantic import Field

from spectrum_openenv.models import SpectrumAction, SpectrumObservation, SpectrumState
from spectrum_rft.task.environment import SpectrumEnv, ToolResult as EnvToolResult, env_for_row

ENV_NAME = "spectrum_openenv"
MAX_CONCURRENT_ENVS = 64  # sessions one server holds at once (each a small SpectrumEnv)
RESET_KEYS = ("row_id", "dataset_info", "episode_id")


class EnvTool(Tool):
    """One of the env's tools on a session's MCP server: listed with the env's schema, every call handed to
    ``handler(name, arguments)`` as it came (FastMCP's function tools would validate and refuse first)."""

    handler: Callable[[str, dict[str, Any]], ToolResult] = Field(exclude=True)

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        return self.handler(self.name, arguments)


class SpectrumEnvironment(MCPEnvironment):
    """One session's spectrum episode (the module docstring says what it carries)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._env: SpectrumEnv | None = None
        self._state = SpectrumState()
        self._listed: list[str] = []
        super().__init__(FastMCP(ENV_NAME))

    # ---- OpenEnv's Environment -------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None, row_id: str | None = None,
              dataset_info: dict | None = None, **kwargs: Any) -> SpectrumObservation:
        """Start the episode of one dataset row: ``row_id`` (required) and the row's ``dataset_info`` (its
        ``environment_context``: preset, memory mode, reward, salt, seed ...; None: the defaults). The band
        seed is the row's (``env_for_row``), never a ``seed`` of the caller's."""
        if kwargs:
            raise ValueError(f"reset takes row_id, dataset_info and episode_id; got {', '.join(sorted(kwargs))}")
        if seed is not None:
            raise ValueError("reset(seed=...) is not used: the band seed comes from row_id (and the row's "
                             "dataset_info), so every session of a row faces one band")
        if not isinstance(row_id, str) or not row_id:
            raise ValueError("reset needs row_id (a dataset row's id, e.g. 'eval-r0000')")
        if dataset_info is not None and not isinstance(dataset_info, dict):
            raise ValueError(f"dataset_info must be an object, got {type(dataset_info).__name__}")
        env, band_seed = env_for_row(row_id, dataset_info)
        env.reset(band_seed)
        self._env = env
        self._state = SpectrumState(episode_id=episode_id or str(uuid4()), row_id=row_id, seed=band_seed,
                                    memory_mode=env.config.memory_mode, n_scans=env.n_scans)
        self._list_tools(env)
        self._sync_state()
        return self._observe(res=None, text=None, closed_before=0, reward=None,
                             row_id=row_id, seed=band_seed, system_prompt=env.system_prompt(), tool_schemas=env.tools(),
                             memory_mode=env.config.memory_mode, max_calls_per_scan=env.config.max_calls_per_scan)

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> SpectrumObservation:
        if not isinstance(action, SpectrumAction):
            raise ValueError(f"unsupported action {type(action).__name__}; send a SpectrumAction")
        env = self._require_env()
        for kind, n in action.faults.items():
            if n > 0:
                env.record_fault(str(kind)[:60], min(int(n), 10_000))
        before = env.scan_index
        res: EnvToolResult | None = None
        text: str | None = None
        if action.op == "call":
            res = env.call_tool(action.tool, action.arguments, first=action.first, last=action.last)
            text = res.content
        elif action.op == "no_tool_call":
            text = env.no_tool_call()
        elif action.op == "skip":
            if not env.done:
                env.skip(action.reason or "skipped")
        else:  # finish
            env.finish(action.reason or "unfinished")
        self._state.step_count += 1
        self._sync_state()
        return self._observe(res=res, text=text, closed_before=before)

    @property
    def state(self) -> SpectrumState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=ENV_NAME, version="0.1.0",
                                   description="spectrum-rft's memory task: one unknown radio band, a series of "
                                               "sparse noisy scans; report the occupied regions of each scan")

    # ---- internals -------------------------------------------------------------------------------

    def _require_env(self) -> SpectrumEnv:
        if self._env is None:
            raise ValueError("no episode: call reset(row_id=...) first")
        return self._env

    def _list_tools(self, env: SpectrumEnv) -> None:
        """The session's MCP server lists exactly this row's tools (the mode's set, the preset's schemas)."""
        server = self.mcp_server  # MCPEnvironment's FastMCP server of this session
        if server is None:
            raise ValueError("the environment is closed")
        for name in self._listed:
            server.local_provider.remove_tool(name)
        self._listed = []
        for schema in env.tools():
            fn = schema["function"]
            server.add_tool(EnvTool(name=fn["name"], description=fn.get("description") or "",
                                    parameters=fn.get("parameters") or {"type": "object", "properties": {}},
                                    handler=self._mcp_call))
            self._listed.append(fn["name"])

    def _mcp_call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """An MCP ``tools/call``: one model turn of one call; the env's text, and its verdict as structured
        content."""
        env = self._require_env()
        before = env.scan_index
        res = env.call_tool(name, arguments, first=True, last=True)
        self._state.step_count += 1
        self._sync_state()
        obs = self._observe(res=res, text=res.content, closed_before=before)
        data = {"ok": res.ok, "advanced": res.advanced, "skipped": res.skipped, "error": res.error,
                "scan_reward": res.reward, "reward": obs.reward, "scan": obs.scan, "done": obs.done}
        if env.done:
            data["score"] = obs.result["score"] if obs.result else None
        return ToolResult(content=res.content, structured_content=data)

    def _sync_state(self) -> None:
        env = self._require_env()
        m = env.metrics()
        s = self._state
        s.scan, s.done, s.score = env.scan_index, env.done, m["score"]
        s.per_scan_reward = list(m["per_scan_reward"][:env.scan_index])
        s.band_fingerprint, s.faults = m["band_fingerprint"], dict(m["faults"])

    def _observe(self, *, res: EnvToolResult | None, text: str | None, closed_before: int,
                 reward: float | None = 0.0, **extra: Any) -> SpectrumObservation:
        env = self._require_env()
        if reward is not None:  # the rewards of the scans this action closed, as a part of the mean
            closed = self._state.per_scan_reward[closed_before:env.scan_index]
            reward = sum(closed) / env.n_scans
        fields: dict[str, Any] = {}
        if res is not None:
            fields = dict(ok=res.ok, advanced=res.advanced, skipped=res.skipped, error=res.error,
                          scan_reward=res.reward)
        return SpectrumObservation(prompt=env.observation()["prompt"], scan=env.scan_index, n_scans=env.n_scans,
                                   text=text, done=env.done, reward=reward,
                                   result=env.result() if env.done else None, **fields, **extra)


app = create_app(SpectrumEnvironment, SpectrumAction, SpectrumObservation, env_name=ENV_NAME,
                 max_concurrent_envs=MAX_CONCURRENT_ENVS)


def main(argv: list[str] | None = None) -> None:
    """Serve :data:`app` with uvicorn (127.0.0.1 unless ``--host`` says otherwise)."""
    import uvicorn

    p = argparse.ArgumentParser(prog="spectrum-openenv-server", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args(argv)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
