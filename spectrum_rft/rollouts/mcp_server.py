"""The spectrum task as an eval-protocol ``McpGym`` server: scans arrive as tool results.

A thin transport around :class:`spectrum_adapter.SpectrumEnv` (which owns every rule). What this module
adds is *who owns which env* and *how the control plane reads it*:

* **One env per MCP connection.** eval-protocol opens one MCP connection per rollout, but its session id
  (md5 of seed, config, row id, model) is identical for every GRPO candidate of a row. Envs are therefore
  keyed by the connection (the server-side ``ServerSession`` object, weakly: the env goes away with the
  connection), never by that id. Candidates see identical scans (same row -> same seed) and never share
  a notepad or a score.
* **Seeded on the first call, also on a fresh server.** The env is built from the client's
  ``clientInfo`` extras (``config`` = the row's ``environment_context``, ``dataset_row_id``) the first
  time the connection touches it, with the row's seed (``environment_context["seed"]`` when the row
  carries one, 0 included; else :func:`spectrum_adapter.row_seed`). McpGym's own path builds an
  unseeded env here and applies the seed only through ``reset_session`` after the episode, and its
  ``if seed:`` drops seed 0; neither is used.
* **Initial state over MCP.** The resource ``spectrum://initial_state`` (read on the connection, so it
  knows the row) returns the first scan. ``/control/initial_state`` (an HTTP route that only sees the
  shared session id) answers 404 for a session it cannot identify, which makes eval-protocol's stock
  client fall back to that resource.
* **Control plane as data.** Every tool result carries ``_meta["spectrum"]``: the step's reward (the
  scored reward for ``submit_report``, 0 for anything else, so a notepad call never repeats the previous
  reward), ``terminated`` (after the last scan) and, at the end, the env's metrics (``per_scan_reward``,
  ``scan_records``...). The model only sees the text content. ``/control/reward`` and ``/control/status``
  serve the same numbers for eval-protocol's stock client (best effort when GRPO candidates share a
  session id: the HTTP route cannot tell them apart).
* ``spectrum://finish/{reason}`` closes an episode that ended early (remaining scans scored as skipped
  empty reports) and returns its metrics.
* A tool call's request ``_meta`` may carry ``{"spectrum/turn_end": false}`` when more calls of the same
  model turn follow, so the env's per-scan call budget counts model calls, like the in-process path.
  Clients that do not send it count one model call per tool call.

The FastMCP server listens on 127.0.0.1 by default (McpGym hard-codes 0.0.0.0) and serves the MCP
endpoint at ``/mcp`` and ``/mcp/`` alike, so neither spelling costs a 307 redirect.
"""

from __future__ import annotations

import json
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from mcp.server.fastmcp import Context
from mcp.types import CallToolResult, TextContent
from starlette.requests import Request
from starlette.responses import JSONResponse

from eval_protocol.mcp import McpGym
from eval_protocol.mcp.adapter import EnvironmentAdapter

from spectrum_rft.task.environment import EnvConfig, SpectrumEnv, env_for_row, tool_schemas

logger = logging.getLogger(__name__)

META_KEY = "spectrum"  # key of our control-plane data in a tool result's ``_meta``
TURN_END_KEY = "spectrum/turn_end"  # request ``_meta`` flag: more tool calls of this model turn follow
INITIAL_STATE_URI = "spectrum://initial_state"
FINISH_URI = "spectrum://finish/{reason}"


# --------------------------------------------------------------------------------------------------
# Rows -> envs
# --------------------------------------------------------------------------------------------------


def row_env(row_id: str, config: dict | None) -> tuple[SpectrumEnv, int]:
    """A fresh env and its seed for one rollout of a row (``config`` = the row's environment_context):
    :func:`spectrum_adapter.env_for_row` decides both, as on the in-process path."""
    return env_for_row(row_id, {"environment_context": dict(config or {})})


def first_prompt(row_id: str, config: dict | None) -> str:
    env, seed = row_env(row_id, config)
    env.reset(seed)
    return env.observation()["prompt"]


@dataclass(eq=False)
class Rollout:
    """One rollout's env and control-plane state (owned by one MCP connection)."""

    env: SpectrumEnv
    seed: int
    row_id: str
    config: dict
    session_id: str  # eval-protocol's session id (shared by the GRPO candidates of a row)
    control: dict = field(default_factory=lambda: {"reward": 0.0, "terminated": False, "truncated": False,
                                                   "step_count": 0, "total_reward": 0.0})
    finished: str | None = None  # reason, once finish() closed the episode early

    def result(self) -> dict:
        """The env's metrics with the per-scan records: what the evaluator reads."""
        m = self.env.metrics()
        m["scan_records"] = self.env.scan_records()
        m["row_id"] = self.row_id
        if self.finished:
            m["finished_early"] = self.finished
        return m


class SpectrumAdapter(EnvironmentAdapter):
    """McpGym's adapter hook. Only used for the base class's default env; rollouts use :class:`Rollout`."""

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


def _client_extra(ctx: Context) -> dict:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "clientInfo", None)
    extra = getattr(info, "_extra", None) or getattr(info, "model_extra", None) or {}
    return extra if isinstance(extra, dict) else {}


def _observation(text: str) -> list[TextContent]:
    # JSON with an "observation" key: what eval-protocol's client json-decodes and its prompt formatter
    # unwraps. Nothing else goes here: the stock client shows the whole dict to the model.
    return [TextContent(type="text", text=json.dumps({"observation": text}))]


class SpectrumMcp(McpGym):
    """``McpGym`` over :class:`SpectrumEnv`: tools ``submit_report``, ``notepad_read``, ``notepad_write``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8000, preset: str = "default", **kwargs: Any):
        self._preset = preset
        self._rollouts: weakref.WeakKeyDictionary[Any, Rollout] = weakref.WeakKeyDictionary()
        # eval-protocol session id -> the latest rollout that used it (the HTTP control plane's only key)
        self._by_session_id: weakref.WeakValueDictionary[str, Rollout] = weakref.WeakValueDictionary()
        self.requests: dict[str, int] = {}  # "METHOD /path STATUS" -> count (see /control/stats)
        self.rollouts_created = 0
        super().__init__("spectrum", SpectrumAdapter(), seed=None, **kwargs)
        self.mcp.settings.host = host
        self.mcp.settings.port = port
        self.mcp.settings.log_level = "WARNING"
        self._register_resources()

    # ---- rollouts --------------------------------------------------------------------------------

    def rollout(self, ctx: Context) -> Rollout:
        """This connection's rollout, created (seeded, configured from the row) on first use."""
        key = ctx.session
        r = self._rollouts.get(key)
        if r is None:
            extra = _client_extra(ctx)
            config = extra.get("config") if isinstance(extra.get("config"), dict) else {}
            row_id = str(extra.get("dataset_row_id") or config.get("row_id") or "")
            env, seed = row_env(row_id, config)
            env.reset(seed)
            r = Rollout(env, seed, row_id, config, str(extra.get("session_id") or ""))
            self._rollouts[key] = r
            self.rollouts_created += 1
            if r.session_id:
                self._by_session_id[r.session_id] = r
        return r

    def _step(self, ctx: Context, name: str, arguments: dict) -> CallToolResult:
        r = self.rollout(ctx)
        env = r.env
        meta_in = ctx.request_context.meta
        turn_end = True
        if meta_in is not None:
            turn_end = bool((getattr(meta_in, "model_extra", None) or {}).get(TURN_END_KEY, True))
        # the env applies the extra-submit and after-the-end rules, as on the in-process path; a call
        # after the last one of a turn (turn_end) opens the next turn
        if not env.turn_open:
            env.begin_model_turn()
        n_before = len(env.scan_records())
        res = env.call_tool(name, arguments)
        forced = env.end_model_turn() if turn_end else False
        records = env.scan_records()
        reward = float(sum(rec["reward"] for rec in records[n_before:]))
        text = res.content
        if forced:  # the call budget closed the scan (never together with a scored report)
            text += (f"\nScan {len(records)} closed without a valid report (call budget used up); "
                     "it is scored as an empty report.")
        if not env.done and (res.advanced or forced):
            text += "\n\n" + env.observation()["prompt"]
        res_ok, advanced, error = res.ok, res.advanced or forced, res.error
        c = r.control
        c.update(reward=reward, terminated=env.done, step_count=c["step_count"] + 1,
                 total_reward=c["total_reward"] + reward)
        meta: dict[str, Any] = {"reward": reward, "terminated": env.done, "ok": res_ok, "advanced": advanced,
                                "error": error, "scan": env.scan_index}
        if env.done:
            meta["result"] = r.result()
        return CallToolResult(content=_observation(text), _meta={META_KEY: meta})

    # ---- MCP surface -----------------------------------------------------------------------------

    def _register_tools(self) -> None:
        # One schema definition: the env's (notepad tools from "notepad", notepad_update from
        # "icl_notepad"). Python signatures take Any so that bad model input reaches the env, which
        # refuses it with a clear message and counts the fault, instead of a generic validation error.
        schemas = {t["function"]["name"]: t["function"] for t in tool_schemas("notepad", self._preset_name())}
        icl = {t["function"]["name"]: t["function"] for t in tool_schemas("icl_notepad", self._preset_name())}
        schemas["submit_report"]["parameters"]["properties"].update(
            icl["submit_report"]["parameters"]["properties"])
        schemas["submit_report"]["description"] += (
            " notepad_update is only used in the icl_notepad memory mode.")

        # ``raw_arguments`` (not in the schema the model sees): the client's processor forwards tool-call
        # arguments that are not a JSON object as they were written, so the env answers with its own
        # "not valid JSON" error and counts the fault, instead of the rollout dying in eval-protocol.
        def submit_report(ctx: Context, center_freqs: Any = None, bandwidths: Any = None,
                          notepad_update: Any = None, raw_arguments: Any = None) -> CallToolResult:
            if raw_arguments is not None:
                return self._step(ctx, "submit_report", str(raw_arguments))
            args: dict[str, Any] = {}
            for k, v in (("center_freqs", center_freqs), ("bandwidths", bandwidths),
                         ("notepad_update", notepad_update)):
                if v is not None:
                    args[k] = v
            return self._step(ctx, "submit_report", args)

        def notepad_read(ctx: Context, raw_arguments: Any = None) -> CallToolResult:
            return self._step(ctx, "notepad_read", {})

        def notepad_write(ctx: Context, text: Any = None, raw_arguments: Any = None) -> CallToolResult:
            if raw_arguments is not None:
                return self._step(ctx, "notepad_write", str(raw_arguments))
            return self._step(ctx, "notepad_write", {} if text is None else {"text": text})

        notepad_note = " Only available in the notepad memory mode."
        for fn in (submit_report, notepad_read, notepad_write):
            spec = schemas[fn.__name__]
            desc = spec["description"] + (notepad_note if fn.__name__.startswith("notepad") else "")
            self.mcp.add_tool(fn, name=fn.__name__, description=desc)
            tool = self.mcp._tool_manager.get_tool(fn.__name__)
            tool.parameters = spec["parameters"]  # what list_tools shows: the env's schema

    def _preset_name(self) -> str:
        return getattr(self, "_preset", "default")

    def _register_resources(self) -> None:
        @self.mcp.resource(INITIAL_STATE_URI, name="initial_state", mime_type="application/json",
                           description="The first scan of this connection's rollout.")
        def initial_state() -> str:
            r = self.rollout(self.mcp.get_context())
            return json.dumps({"observation": r.env.observation()["prompt"]})

        @self.mcp.resource(FINISH_URI, name="finish", mime_type="application/json",
                           description="Close this rollout (unplayed scans are scored as skipped) and "
                           "return its metrics.")
        def finish(reason: str, ctx: Context) -> str:
            r = self.rollout(ctx)
            if not r.env.done:
                r.finished = reason[:40]
                r.env.finish(r.finished)
                r.control.update(terminated=True)
            return json.dumps(r.result())

    # ---- HTTP control plane (eval-protocol's stock client) ---------------------------------------

    def _discover_and_register_control_plane_endpoints(self) -> None:
        def by_header(request: Request) -> Rollout | None:
            sid = request.headers.get("mcp-session-id")
            return self._by_session_id.get(sid) if sid else None

        async def reward(request: Request) -> JSONResponse:
            r = by_header(request)
            if r is None:
                return JSONResponse({"error": "unknown session"}, status_code=404)
            return JSONResponse({"reward": r.control["reward"], "step_count": r.control["step_count"]})

        async def status(request: Request) -> JSONResponse:
            r = by_header(request)
            if r is None:
                return JSONResponse({"error": "unknown session"}, status_code=404)
            c = r.control
            return JSONResponse({k: c[k] for k in ("terminated", "truncated", "step_count", "total_reward")})

        async def info(request: Request) -> JSONResponse:
            r = by_header(request)
            if r is None:
                return JSONResponse({"error": "unknown session"}, status_code=404)
            return JSONResponse(r.result())

        async def initial_state(request: Request) -> JSONResponse:
            r = by_header(request)
            if r is None:  # not identifiable over HTTP: the client falls back to the MCP resource
                return JSONResponse({"error": "unknown session; read " + INITIAL_STATE_URI}, status_code=404)
            return JSONResponse({"observation": first_prompt(r.row_id, r.config)})

        async def stats(request: Request) -> JSONResponse:
            """Request counts and live rollouts: how tests prove the per-call waste stays gone."""
            return JSONResponse({"requests": dict(self.requests), "rollouts_created": self.rollouts_created,
                                 "rollouts_alive": len(self._rollouts)})

        for path, fn in (("/control/stats", stats), ("/control/reward", reward), ("/control/status", status), ("/control/info", info),
                         ("/control/initial_state", initial_state)):
            self.mcp.custom_route(path, methods=["GET"])(fn)

    def _register_session_reset_endpoint(self) -> None:
        # Envs live and die with their connection; a "reset" has nothing to do (McpGym's would rebuild a
        # shared env by session id, which concurrent GRPO candidates would then share).
        @self.mcp.custom_route("/control/reset_session", methods=["POST"])
        async def reset_session(request: Request) -> JSONResponse:
            return JSONResponse({"message": "Session reset successfully"})

    # ---- serving ---------------------------------------------------------------------------------

    def app(self):
        """The Starlette app, MCP endpoint at ``/mcp`` and ``/mcp/`` (no 307 redirect for either), every
        request counted by method, path and status."""
        from starlette.routing import Route  # noqa: PLC0415

        app = self.mcp.streamable_http_app()
        path = self.mcp.settings.streamable_http_path.rstrip("/")
        mcp_route = next(r for r in app.router.routes if getattr(r, "path", None) == path)
        app.router.routes.insert(0, Route(path + "/", endpoint=mcp_route.endpoint))
        counts = self.requests

        async def counting(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            status = [0]

            async def send_(message):
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            try:
                await app(scope, receive, send_)
            finally:
                key = f"{scope['method']} {scope['path']} {status[0]}"
                counts[key] = counts.get(key, 0) + 1

        return counting

    def run(self, transport: str = "streamable-http", **kwargs: Any) -> None:  # noqa: ARG002
        import anyio  # noqa: PLC0415
        import uvicorn  # noqa: PLC0415

        config = uvicorn.Config(self.app(), host=self.mcp.settings.host, port=self.mcp.settings.port,
                                log_level="warning", access_log=False, timeout_keep_alive=120,
                                limit_concurrency=None)
        anyio.run(uvicorn.Server(config).serve)
