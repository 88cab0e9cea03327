"""The spectrum task as an eval-protocol ``McpGym`` server: the env of each rollout lives here.

A thin transport around :class:`SpectrumEnv` (which owns every rule); the wire protocol is
:mod:`spectrum_rft.rollouts.mcp_protocol`, the client :mod:`spectrum_rft.rollouts.mcp_client`. What this
module adds is *who owns which env*:

* **One env per MCP connection.** GRPO candidates of a row share the row id (and eval-protocol's session
  id), so envs are keyed by the connection (the server-side ``ServerSession``, weakly: the env goes away
  with the connection). Candidates see identical scans (same row -> same seed) and never share a notepad
  or a score.
* **Seeded from the row, also on a fresh server**: the client's ``clientInfo`` names the row
  (``row_id``, ``dataset_info``) and :func:`env_for_row` gives the env and its seed, as in-process.
* **Each session lists its row's tools** (:class:`RowToolsMCP`), exactly as the env declares them for the
  row's memory mode and preset, and every call of them goes to the session's env unvalidated, so bad model
  input reaches the env, which refuses it and counts the fault.

* **Bounded under clients that vanish** (:class:`SessionLimits`): a session with no request for
  ``session_idle_s`` is ended, at most ``max_sessions`` live at once (the next new one is refused with one
  line), so a job whose workers die mid-episode, or close without DELETE, cannot grow the server.

McpGym's documented hook ``_register_tools`` is implemented (it puts :class:`RowToolsMCP` in place); its own session machinery (keyed by a session
id that candidates share) and HTTP control plane are not used. The FastMCP server listens on 127.0.0.1 by
default (McpGym hard-codes 0.0.0.0) and serves the MCP endpoint at ``/mcp`` and ``/mcp/`` alike.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import weakref
from typing import Any

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool
from starlette.requests import Request
from starlette.responses import JSONResponse

from eval_protocol.mcp import McpGym
from eval_protocol.mcp.adapter import EnvironmentAdapter

from spectrum_rft.rollouts.mcp_protocol import (CLIENT_INFO_KEY, EPISODE_URI, EVENT_TOOL, EVENTS, FAULTS_KEY,
                                                META_KEY, PROTOCOL_TOOLS, RAW_TOOL, TURN_KEY)
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.environment import SpectrumEnv, ToolResult, env_for_row

logger = logging.getLogger(__name__)


IDLE_S_DEFAULT = 1800.0
MAX_SESSIONS_DEFAULT = 1024


class SessionLimits:
    """The server's live MCP sessions, by ``mcp-session-id``: how long one may sit idle, how many may live.

    Each session costs ~70 KB (mcp's transport, ``ServerSession`` and task; here also its env) until it
    ends, and a client killed mid-episode, or closing without DELETE, never ends it. So:

    * **Idle time.** A session with no request in flight (an open GET stream counts as one) for ``idle_s``
      seconds is ended. mcp >= 1.30 does it itself (FastMCP's ``session_idle_timeout`` setting, set from
      here); this table, kept by the ASGI wrapper of :meth:`SpectrumMcp.app` from the requests and
      responses it passes, applies the same rule one tick later and sends the server a DELETE for the
      session, as its client would have: a 404 no-op where mcp ended it already, the whole mechanism on an
      older mcp. A rollout's longest quiet gap is one model call with its retries (``llm_tries`` x
      ``request_timeout`` + backoff: 4 x 180 + 48 s by default), so the default, 1800 s (mcp's), never ends
      a working rollout.
    * **Count.** A request that would open a session (any request to the MCP endpoint without a session id)
      while ``max_sessions`` are live or opening is refused: HTTP 503, a JSON-RPC error whose one line names
      the cap and the flag that raises it (mcp's own ``max_sessions``, set to the same cap, is the backstop).

    ``None`` turns a bound off. The live count is ``/control/stats``' ``sessions.live``.
    """

    def __init__(self, idle_s: float | None = IDLE_S_DEFAULT, max_sessions: int | None = MAX_SESSIONS_DEFAULT):
        if idle_s is not None and not (isinstance(idle_s, (int, float)) and 0 < idle_s < float("inf")):
            raise ValueError(f"session idle limit must be a finite number of seconds > 0 (None: no limit), "
                             f"got {idle_s!r}")
        if max_sessions is not None and (isinstance(max_sessions, bool) or not isinstance(max_sessions, int)
                                         or max_sessions < 1):
            raise ValueError(f"max_sessions must be an int >= 1 (None: no cap), got {max_sessions!r}")
        self.idle_s, self.max_sessions = (float(idle_s) if idle_s is not None else None), max_sessions
        # how often idleness is checked: a session ends between idle_s + tick and idle_s + 2 ticks
        self.tick = min(5.0, max(0.05, self.idle_s / 4)) if self.idle_s is not None else 5.0
        self._last: dict[str, float] = {}  # session id -> time.monotonic() its latest request ended (or began)
        self._busy: dict[str, int] = {}  # session id -> requests in flight
        self._pending = 0  # admitted requests that open a session, not answered yet
        self.opened = self.closed = self.reaped = self.refused = 0
        self._refusal_logged = -1e9

    @property
    def live(self) -> int:
        return len(self._last)

    def stats(self) -> dict[str, Any]:
        return {"live": self.live, "max": self.max_sessions, "idle_s": self.idle_s, "opened": self.opened,
                "closed": self.closed, "reaped": self.reaped, "refused": self.refused}

    def refusal(self) -> str:
        return (f"spectrum server: {self.max_sessions} MCP sessions live, its cap; end finished sessions "
                f"(DELETE) or raise --max-sessions")

    def admit(self) -> bool:
        """Whether a request that opens a session may go on (then pending until :meth:`answered`)."""
        if self.max_sessions is not None and self.live + self._pending >= self.max_sessions:
            self.refused += 1
            now = time.monotonic()
            if now - self._refusal_logged >= 10.0:  # one log line per 10 s, whatever the storm
                self._refusal_logged = now
                logger.warning("%s (%d refused so far)", self.refusal(), self.refused)
            return False
        self._pending += 1
        return True

    def answered(self, session_id: str | None, status: int) -> None:
        """An admitted request's answer: the session it opened, if it succeeded (mcp drops a failed one)."""
        self._pending -= 1
        if session_id and status < 400 and session_id not in self._last:
            self._last[session_id] = time.monotonic()
            self.opened += 1

    def begin(self, session_id: str) -> None:
        if session_id in self._last:
            self._busy[session_id] = self._busy.get(session_id, 0) + 1

    def end(self, session_id: str, method: str, status: int) -> None:
        n = self._busy.pop(session_id, 0) - 1
        if n > 0:
            self._busy[session_id] = n
        if status == 404 or (method == "DELETE" and 200 <= status < 300):  # gone, or ended by its client
            if self.forget(session_id):
                self.closed += 1
        elif session_id in self._last:
            self._last[session_id] = time.monotonic()

    def forget(self, session_id: str) -> bool:
        self._busy.pop(session_id, None)
        return self._last.pop(session_id, None) is not None

    def idle(self, now: float | None = None) -> list[str]:
        """Sessions with no request in flight for longer than the limit (plus a tick: mcp's timeout goes first)."""
        if self.idle_s is None:
            return []
        now = time.monotonic() if now is None else now
        limit = self.idle_s + self.tick
        return [sid for sid, t in self._last.items() if now - t > limit and not self._busy.get(sid)]


def _header(headers: Any, name: bytes) -> str | None:
    """An ASGI header's value (latin-1), None when absent."""
    for k, v in headers or ():
        if k.lower() == name:
            return v.decode("latin-1")
    return None


class SpectrumMcpAdapter(EnvironmentAdapter):
    """McpGym's adapter hook. Only used for the base class's default env; rollouts use one env per MCP connection."""

    def create_environment(self, config: dict | None = None) -> SpectrumEnv:
        return SpectrumEnv(EnvConfig.from_dict(config))

    def create_environment_with_seed(self, config: dict | None = None, seed: int | None = None):
        env = self.create_environment(config)
        obs, info = env.reset(seed or 0)
        return env, obs, info

    def reset_environment(self, env: SpectrumEnv, seed: int | None = None):
        return env.reset(seed or 0)

    def step_environment(self, env: SpectrumEnv, action: Any):
        return env.step(action)

    def close_environment(self, env: SpectrumEnv) -> None:
        pass

    def get_default_config(self) -> dict:
        return {}


def _extra(model: Any) -> dict:
    """A pydantic model's extra fields (public ``model_extra``), {} when none."""
    extra = getattr(model, "model_extra", None)
    return extra if isinstance(extra, dict) else {}


async def _delete_session(app: Any, path: str, host: bytes, port: int, header: bytes, session_id: str) -> None:
    """What a client's DELETE of ``session_id`` would have done, sent by the server to itself through ``app``."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "DELETE",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"host", host), (header, session_id.encode())],
             "client": ("127.0.0.1", 0), "server": ("127.0.0.1", port), "state": {}}
    sent: list[dict] = []

    async def receive():
        if sent:
            return {"type": "http.disconnect"}
        sent.append(True)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def discard(message):
        pass

    await app(scope, receive, discard)


class RowToolsMCP(FastMCP):
    """FastMCP whose ``tools/list`` is the session's own: the row's tools exactly as the env declares them
    (``SpectrumEnv.tools()``: its memory mode's tool set, its preset's schemas, byte for byte what the
    in-process path hands the model), then the protocol's :data:`PROTOCOL_TOOLS`. A call of any other name is
    the env's to judge (its tools are dispatched to the session's env, an unknown name refused there and
    counted), so a new tool in a tool set needs nothing here. A session whose client named no row is refused
    in one line, as its every other request is."""

    def __init__(self, gym: "SpectrumMcp", name: str | None = None, **settings: Any):
        self.gym = gym
        super().__init__(name, **settings)

    async def list_tools(self) -> list[MCPTool]:
        env = self.gym.rollout(self.get_context())
        own = [MCPTool(name=t["function"]["name"], description=t["function"].get("description"),
                       inputSchema=t["function"].get("parameters") or {"type": "object", "properties": {}})
               for t in env.tools()]
        return own + [t for t in await super().list_tools() if t.name in PROTOCOL_TOOLS]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if name in PROTOCOL_TOOLS:
            return await super().call_tool(name, arguments)
        return self.gym.step(self.get_context(), name, arguments)


class SpectrumMcp(McpGym):
    """``McpGym`` over :class:`SpectrumEnv` (see the module docstring)."""

    mcp: FastMCP  # McpGym's server, a RowToolsMCP once _register_tools has run

    def __init__(self, host: str = "127.0.0.1", port: int = 8000, *, session_idle_s: float | None = IDLE_S_DEFAULT,
                 max_sessions: int | None = MAX_SESSIONS_DEFAULT, **kwargs: Any):
        """``session_idle_s``, ``max_sessions``: the bounds of :class:`SessionLimits` (None: off). Every session
        lists its own row's tools (:class:`RowToolsMCP`), so the server has no preset of its own."""
        self.rollouts: weakref.WeakKeyDictionary[Any, SpectrumEnv] = weakref.WeakKeyDictionary()
        self.requests: dict[str, int] = {}  # "METHOD /path STATUS" -> count (see /control/stats)
        self.rollouts_created = 0
        self.session_limits = SessionLimits(session_idle_s, max_sessions)
        super().__init__("spectrum", SpectrumMcpAdapter(), seed=None, **kwargs)
        self.mcp.settings.host = host
        self.mcp.settings.port = port
        self.mcp.settings.log_level = "WARNING"
        # mcp >= 1.30 bounds sessions itself (FastMCP settings, read when the app is built): the same bounds
        fields = type(self.mcp.settings).model_fields
        if "session_idle_timeout" in fields:
            self.mcp.settings.session_idle_timeout = self.session_limits.idle_s
        if "max_sessions" in fields:
            self.mcp.settings.max_sessions = self.session_limits.max_sessions
        self._register_resources()

    # ---- rollouts --------------------------------------------------------------------------------

    def rollout(self, ctx: Context) -> SpectrumEnv:
        """This connection's rollout, created (seeded, configured from the row) on first use."""
        key = ctx.session
        env = self.rollouts.get(key)
        if env is None:
            params = getattr(key, "client_params", None)
            row = _extra(getattr(params, "clientInfo", None)).get(CLIENT_INFO_KEY)
            if not isinstance(row, dict) or not isinstance(row.get("row_id"), str) or not row["row_id"]:
                raise ValueError(f"clientInfo must carry {CLIENT_INFO_KEY}={{'row_id': ..., 'dataset_info': ...}}")
            info = row.get("dataset_info")
            env, seed = env_for_row(row["row_id"], info if isinstance(info, dict) else None)
            env.reset(seed)
            self.rollouts[key] = env
            self.rollouts_created += 1
        return env

    def _reply(self, env: SpectrumEnv, scan_before: int, res: ToolResult | None, text: str,
               meta: dict[str, Any]) -> CallToolResult:
        data: dict[str, Any] = {"scan": env.scan_index, "done": env.done, **meta}
        if res is not None:
            data.update(ok=res.ok, advanced=res.advanced, reward=res.reward, error=res.error, skipped=res.skipped)
        if not env.done and env.scan_index != scan_before:
            data["prompt"] = env.observation()["prompt"]
        if env.done:
            data["result"] = env.result()
        return CallToolResult(content=[TextContent(type="text", text=text)], _meta={META_KEY: data})

    def _begin(self, ctx: Context) -> tuple[SpectrumEnv, dict]:
        """This connection's rollout, with the faults the client counted since its last request applied."""
        env = self.rollout(ctx)
        meta = _extra(ctx.request_context.meta)
        faults = meta.get(FAULTS_KEY)
        if isinstance(faults, dict):
            for kind, n in faults.items():
                if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                    env.record_fault(str(kind)[:60], min(n, 10_000))
        return env, meta

    def step(self, ctx: Context, name: str, arguments: Any, size: int | None = None) -> CallToolResult:
        """One model tool call (``arguments``: a dict, or the text as the model wrote it) on this connection's env."""
        env, meta = self._begin(ctx)
        turn = meta.get(TURN_KEY)
        turn = turn if isinstance(turn, dict) else {}
        first, last = bool(turn.get("first", True)), bool(turn.get("last", True))  # default: one call, one turn
        scan = env.scan_index
        res = env.call_tool(name, arguments, first=first, last=last, size=size)
        return self._reply(env, scan, res, res.content, {})

    def _event(self, ctx: Context, event: str, reason: str) -> CallToolResult:
        env, _ = self._begin(ctx)
        scan = env.scan_index
        reason = str(reason or event)[:40]
        text = ""
        if event == "no_tool_call":
            text = env.no_tool_call() or ""
        elif event == "skip" and not env.done:
            env.skip(reason)
        elif event == "finish":
            env.finish(reason)
        elif event not in EVENTS:
            raise ValueError(f"unknown event {event!r}; one of {', '.join(EVENTS)}")
        return self._reply(env, scan, None, text, {"nudge": bool(text)})

    # ---- MCP surface -----------------------------------------------------------------------------

    def _register_tools(self) -> None:
        # McpGym made a plain FastMCP a moment ago and registers its own endpoints on it after this hook: the
        # server that lists each session's own tools takes its place (same name; host and port set later)
        self.mcp = RowToolsMCP(self, self.mcp.name)
        def model_tool_call(ctx: Context, name: str, arguments: str = "", arguments_b64: str = "",
                            size: int = 0) -> CallToolResult:
            # ``str`` annotations: FastMCP parses JSON-looking strings given for any other type
            if arguments_b64:
                arguments = base64.b64decode(arguments_b64).decode("utf-8", "surrogatepass")
            return self.step(ctx, name, None if size and not arguments else arguments, size=size or None)

        self.mcp.add_tool(model_tool_call, name=RAW_TOOL, structured_output=False, description=(
            "A tool call exactly as the model wrote it (any name; arguments as text, or base64 of their UTF-8, "
            "or only their size in bytes when too large to send): the env judges it like any other call."))

        def episode_event(ctx: Context, event: str, reason: str = "") -> CallToolResult:
            return self._event(ctx, event, reason)

        self.mcp.add_tool(episode_event, name=EVENT_TOOL, structured_output=False, description=(
            "A rollout event that is not a tool call: no_tool_call (a model reply without one), skip (close "
            "the open scan as an empty report, e.g. after failed model calls), finish (close every scan)."))

    def _register_resources(self) -> None:
        @self.mcp.resource(EPISODE_URI, name="episode", mime_type="application/json",
                           description="This connection's rollout: the open scan, the system prompt.")
        def episode() -> str:
            env = self.rollout(self.mcp.get_context())
            return json.dumps({"prompt": env.observation()["prompt"], "scan": env.scan_index, "done": env.done,
                               "system_prompt": env.system_prompt(),
                               "memory_mode": env.config.memory_mode, "n_scans": env.n_scans,
                               "max_calls_per_scan": env.config.max_calls_per_scan})

        async def stats(request: Request) -> JSONResponse:
            """Request counts, live rollouts and sessions: how tests prove the per-call waste stays gone and
            the server's state stays bounded."""
            return JSONResponse({"requests": dict(self.requests), "rollouts_created": self.rollouts_created,
                                 "rollouts_alive": len(self.rollouts), "sessions": self.session_limits.stats()})

        self.mcp.custom_route("/control/stats", methods=["GET"])(stats)

    # ---- serving ---------------------------------------------------------------------------------

    def app(self):
        """The Starlette app, MCP endpoint at ``/mcp`` and ``/mcp/`` (no 307 redirect for either), every
        request counted by method, path and status, the sessions bounded (:class:`SessionLimits`; the idle
        reaper runs for the app's lifespan)."""
        import anyio  # noqa: PLC0415
        from starlette.routing import Route  # noqa: PLC0415

        app = self.mcp.streamable_http_app()
        path = self.mcp.settings.streamable_http_path.rstrip("/")
        mcp_route = next(r for r in app.router.routes if getattr(r, "path", None) == path)
        app.router.routes.insert(0, Route(path + "/", endpoint=mcp_route.endpoint))
        counts, sessions = self.requests, self.session_limits
        header = MCP_SESSION_ID_HEADER.lower().encode()
        host = f"{self.mcp.settings.host}:{self.mcp.settings.port}".encode()

        async def reap_idle() -> None:
            while True:
                await anyio.sleep(sessions.tick)
                for session_id in sessions.idle():
                    sessions.forget(session_id)
                    sessions.reaped += 1
                    try:
                        await _delete_session(app, path, host, self.mcp.settings.port, header, session_id)
                    except Exception as e:  # noqa: BLE001 - one session's failure must not stop the reaper
                        logger.warning("ending idle session %s failed: %s: %s", session_id[:16], type(e).__name__, e)

        async def refuse(scope, receive, send) -> None:
            await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": sessions.refusal()}},
                               status_code=503)(scope, receive, send)

        async def bounded(scope, receive, send):
            if scope["type"] == "lifespan":  # the app's life: the reaper runs beside it
                async with anyio.create_task_group() as tg:
                    if sessions.idle_s is not None:
                        tg.start_soon(reap_idle)
                    await app(scope, receive, send)
                    tg.cancel_scope.cancel()
                return
            if scope["type"] != "http":
                return await app(scope, receive, send)
            method, status = scope["method"], [0]
            on_mcp = scope["path"].rstrip("/") == path
            session_id = _header(scope.get("headers"), header) if on_mcp else None
            opens = on_mcp and session_id is None  # mcp opens a session for it
            try:
                if opens and not sessions.admit():
                    status[0] = 503
                    return await refuse(scope, receive, send)
                pending = [opens]
                if session_id is not None:
                    sessions.begin(session_id)

                async def send_(message):
                    if message["type"] == "http.response.start":
                        status[0] = message["status"]
                        if pending[0]:
                            pending[0] = False
                            sessions.answered(_header(message.get("headers"), header), status[0])
                    await send(message)

                try:
                    await app(scope, receive, send_)
                finally:
                    if pending[0]:
                        sessions.answered(None, 500)
                    if session_id is not None:
                        sessions.end(session_id, method, status[0])
            finally:
                key = f"{method} {scope['path']} {status[0]}"
                counts[key] = counts.get(key, 0) + 1

        return bounded

    def run(self, transport: str = "streamable-http", **kwargs: Any) -> None:  # noqa: ARG002
        import anyio  # noqa: PLC0415
        import uvicorn  # noqa: PLC0415

        config = uvicorn.Config(self.app(), host=self.mcp.settings.host, port=self.mcp.settings.port,
                                log_level="warning", access_log=False, timeout_keep_alive=120,
                                limit_concurrency=None)
        anyio.run(uvicorn.Server(config).serve)
