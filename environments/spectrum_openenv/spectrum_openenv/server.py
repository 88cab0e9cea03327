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
* **Refusals.** A request the server refuses (a bad ``reset``, a step before any reset, a closed session) raises
  :class:`BadRequest`: one line, the same on both paths: an error message on the session's WebSocket (the
  session goes on), HTTP 400 with that line as ``detail`` on ``/reset`` and ``/step`` (never a bare 500).
* **Bounds** (:func:`make_app`, the CLI's flags). At most ``max_sessions`` sessions at once; a session with no
  reset or step for ``session_idle_s`` seconds is ended (OpenEnv's reaper, which looks every
  ``max(session_idle_s / 4, 5)`` s): its slot is free again and its next message is refused in one line. The
  env counts at most ``MAX_FAULT_KINDS`` distinct fault names per episode (later new ones under ``other``).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable
from uuid import uuid4

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastmcp import FastMCP
from fastmcp.tools import Tool, ToolResult
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata
from pydantic import Field

from spectrum_openenv.models import SpectrumAction, SpectrumObservation, SpectrumState
from spectrum_rft.task.environment import SpectrumEnv, ToolResult as EnvToolResult, env_for_row

ENV_NAME = "spectrum_openenv"
MAX_SESSIONS_DEFAULT = 64  # sessions one server holds at once (each a small SpectrumEnv)
# A rollout's longest quiet gap is one model call with its retries (llm_tries x request_timeout + backoff:
# 4 x 180 + 48 s by default), so 30 min never ends a working rollout (the MCP server's default too).
SESSION_IDLE_S_DEFAULT = 1800.0
MAX_ERROR_CHARS = 300  # a refusal is one line of at most this many characters
EPISODE_ID_MAX_CHARS = 255  # OpenEnv's own limit on HTTP (ResetRequest.episode_id)
CLOSED = ("this session is closed (the server ends a session with no reset or step for --session-idle-s "
          "seconds): open a new session")


def one_line(text: object) -> str:
    """``text`` as one line of at most :data:`MAX_ERROR_CHARS` characters (never a traceback)."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS - 3] + "..."


class BadRequest(ValueError):
    """A request the server refuses, in one line: the session's error message on the WebSocket (the session
    goes on), HTTP 400 with the line as ``detail`` on ``/reset`` and ``/step``."""

    def __init__(self, message: object):
        super().__init__(one_line(message))


def check_reset(seed: Any = None, episode_id: Any = None, row_id: Any = None, dataset_info: Any = None,
                **kwargs: Any) -> None:
    """Refuse a bad ``reset`` request (:class:`BadRequest`). One check for both paths: the env's ``reset``
    runs it, and so does the HTTP handler of a body OpenEnv's own ``/reset`` model refused (``seed: -1``),
    so both answer the same line."""
    if kwargs:
        raise BadRequest(f"reset takes row_id, dataset_info and episode_id; got {', '.join(sorted(kwargs))}")
    if seed is not None:
        raise BadRequest("reset(seed=...) is not used: the band seed comes from row_id (and the row's "
                         "dataset_info), so every session of a row faces one band")
    if not isinstance(row_id, str) or not row_id:
        raise BadRequest("reset needs row_id (a dataset row's id, e.g. 'eval-r0000')")
    if dataset_info is not None and not isinstance(dataset_info, dict):
        raise BadRequest(f"dataset_info must be an object, got {type(dataset_info).__name__}")
    if episode_id is not None and not (isinstance(episode_id, str) and len(episode_id) <= EPISODE_ID_MAX_CHARS):
        raise BadRequest(f"episode_id must be a string of at most {EPISODE_ID_MAX_CHARS} characters")


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
        self._closed = False
        self._state = SpectrumState()
        self._listed: list[str] = []
        super().__init__(FastMCP(ENV_NAME))

    # ---- OpenEnv's Environment -------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None, row_id: str | None = None,
              dataset_info: dict | None = None, **kwargs: Any) -> SpectrumObservation:
        """Start the episode of one dataset row: ``row_id`` (required) and the row's ``dataset_info`` (its
        ``environment_context``: preset, memory mode, reward, salt, seed ...; None: the defaults). The band
        seed is the row's (``env_for_row``), never a ``seed`` of the caller's. A bad request: :class:`BadRequest`."""
        if self._closed:
            raise BadRequest(CLOSED)
        check_reset(seed=seed, episode_id=episode_id, row_id=row_id, dataset_info=dataset_info, **kwargs)
        assert isinstance(row_id, str)
        try:  # the row's config is the caller's input: an unknown mode, preset, reward, a bad budget ...
            env, band_seed = env_for_row(row_id, dataset_info)
            env.reset(band_seed)
        except ValueError as e:
            raise BadRequest(e) from None
        except (TypeError, KeyError) as e:  # a value of the wrong type where the config compares or looks up
            raise BadRequest(f"bad environment_context: {type(e).__name__}: {e}") from None
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
            raise BadRequest(f"unsupported action {type(action).__name__}; send a SpectrumAction")
        env = self._require_env()
        for kind, n in action.faults.items():  # the env bounds the distinct names (MAX_FAULT_KINDS)
            if n > 0:
                env.record_fault(str(kind)[:60], min(int(n), 10_000))
        reason = action.reason[:60]
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
                env.skip(reason or "skipped")
        else:  # finish
            env.finish(reason or "unfinished")
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

    def close(self) -> None:
        """The session ended (its client closed it, or it was idle for ``session_idle_s``): the env goes, and a
        later message on a still-open WebSocket is refused in one line (:data:`CLOSED`)."""
        self._closed, self._env = True, None
        super().close()

    # ---- internals -------------------------------------------------------------------------------

    def _require_env(self) -> SpectrumEnv:
        if self._closed:
            raise BadRequest(CLOSED)
        if self._env is None:
            raise BadRequest("no episode: call reset(row_id=...) first")
        return self._env

    def _list_tools(self, env: SpectrumEnv) -> None:
        """The session's MCP server lists exactly this row's tools (the mode's set, the preset's schemas)."""
        server = self.mcp_server  # MCPEnvironment's FastMCP server of this session
        if server is None:
            raise BadRequest(CLOSED)
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


async def _refused(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=400, content={"detail": str(exc)})


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    """A body OpenEnv's ``/reset`` model refused (``seed: -1``, a long ``episode_id``, not an object): the line
    :func:`check_reset` says over the WebSocket, HTTP 400. Every other route keeps FastAPI's answer."""
    assert isinstance(exc, RequestValidationError)
    if request.url.path.rstrip("/") != "/reset":
        return await request_validation_exception_handler(request, exc)
    body = exc.body
    try:
        if not isinstance(body, dict) or not all(isinstance(k, str) for k in body):
            raise BadRequest("reset takes a JSON object: row_id, dataset_info, episode_id")
        check_reset(**body)
        line = one_line("; ".join(f"{'.'.join(map(str, e.get('loc', ())[1:]))}: {e.get('msg')}"
                                  for e in exc.errors()))
    except BadRequest as e:
        line = str(e)
    return JSONResponse(status_code=400, content={"detail": line})


def make_app(*, max_sessions: int = MAX_SESSIONS_DEFAULT,
             session_idle_s: float | None = SESSION_IDLE_S_DEFAULT) -> FastAPI:
    """OpenEnv's app for the spectrum env: at most ``max_sessions`` sessions at once; a session with no reset or
    step for ``session_idle_s`` seconds is ended and its slot freed (None: never); refusals are one line
    (:class:`BadRequest`: HTTP 400 on ``/reset`` and ``/step``)."""
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be an int >= 1, got {max_sessions!r}")
    idle_ok = isinstance(session_idle_s, (int, float)) and not isinstance(session_idle_s, bool) \
        and 0 < session_idle_s < math.inf
    if session_idle_s is not None and not idle_ok:
        raise ValueError(f"session_idle_s must be a finite number of seconds > 0 (None: never), "
                         f"got {session_idle_s!r}")
    limits = ConcurrencyConfig(max_concurrent_envs=max_sessions,
                               session_timeout=None if session_idle_s is None else float(session_idle_s))
    application = create_app(SpectrumEnvironment, SpectrumAction, SpectrumObservation, env_name=ENV_NAME,
                             concurrency_config=limits)
    application.add_exception_handler(BadRequest, _refused)
    application.add_exception_handler(RequestValidationError, _invalid)
    return application


app = make_app()  # uvicorn spectrum_openenv.server:app: the defaults; main() takes the bounds as flags


def main(argv: list[str] | None = None) -> None:
    """Serve :func:`make_app` with uvicorn (127.0.0.1 unless ``--host`` says otherwise)."""
    import uvicorn

    p = argparse.ArgumentParser(prog="spectrum-openenv-server", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-sessions", type=int, default=MAX_SESSIONS_DEFAULT, metavar="N",
                   help="sessions held at once; a new one beyond them is refused (default: %(default)s)")
    p.add_argument("--session-idle-s", type=float, default=SESSION_IDLE_S_DEFAULT, metavar="S",
                   help="end a session with no reset or step for S seconds (a client that vanished or went "
                        "silent), freeing its slot; must exceed a rollout's longest model call with retries; "
                        "0: never (default: %(default)s)")
    args = p.parse_args(argv)
    if args.max_sessions < 1 or args.session_idle_s < 0 or not math.isfinite(args.session_idle_s):
        p.error("--max-sessions must be >= 1 and --session-idle-s a finite number >= 0 (0: never)")
    application = make_app(max_sessions=args.max_sessions, session_idle_s=args.session_idle_s or None)
    uvicorn.run(application, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
