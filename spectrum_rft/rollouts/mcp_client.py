"""The MCP rollout path: the rollout loop (:mod:`spectrum_rft.rollouts.loop`) over an MCP connection.

Each rollout opens one MCP connection (the ``mcp`` SDK's public ``streamable_http_client`` +
``ClientSession``) to the spectrum server (:mod:`spectrum_rft.rollouts.mcp_server`, a real ``McpGym``), whose
env for that connection judges every call; :class:`McpEpisode` only carries text and tool calls (wire
protocol: :mod:`spectrum_rft.rollouts.mcp_protocol`). Same loop, same retries and failure rules, same row
as the in-process path, so the same model gets the same scores, faults and texts on both paths; only the
carrier of a scan differs: here scans 2..N arrive in the tool result of the ``submit_report`` call that
closed the previous scan (``"<feedback>\n\n<next scan>"``; the loop's docstring says when a user message
carries one instead).

Per rollout: initialize (+ the ``initialized`` notification), one read of the opening and one listing of the
row's tools (which the mcp client also keeps to validate results), then ONE request per tool call (the
reward, the next scan and at the end the env's metrics come back in the result's ``_meta``), one per reply
without a tool call, nothing after the episode (no extra model call either).

The server (``spectrum_server.py``) is started with this Python (``sys.executable``), on 127.0.0.1, on a
free port unless ``port`` is given, logging to a temp file; it exits on its own when this process dies
(``--parent-pid``). ``rollout_processor_kwargs``: ``server_mode`` (``"shared"``, the default: one server per
script for the process, rollouts are isolated per connection anyway; anything else: one per processor),
``port``, ``start_server`` (False with a ``port``: use a server that is already running), and the loop's
``llm_tries``, ``backoff_base``, ``backoff_max``, ``request_timeout``, ``icl_token_budget``. The processor's
``cleanup()`` (eval-protocol calls it after the evaluation) stops the servers it started.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client  # mcp >= 1.24 (pyproject.toml)
from mcp.types import CallToolResult, Implementation
from pydantic import AnyUrl

from eval_protocol.models import EvaluationRow
from eval_protocol.pytest.types import RolloutProcessorConfig

from spectrum_rft.common.processes import free_port, log_tail, stop_process
from spectrum_rft.rollouts.episode import Opening, max_model_calls
from spectrum_rft.rollouts.loop import SpectrumRolloutProcessor
from spectrum_rft.rollouts.mcp_protocol import (CLIENT_INFO_KEY, EPISODE_URI, EVENT_TOOL, FAULTS_KEY,
                                                INLINE_MAX_CHARS, META_KEY, PROTOCOL_TOOLS, RAW_TOOL,
                                                TURN_KEY)
from spectrum_rft.task.actions import MAX_ARGUMENT_BYTES, argument_bytes, is_blank, parse_arguments
from spectrum_rft.task.environment import ToolResult

SERVER_SCRIPT = str(Path(__file__).resolve().parent / "server_main.py")  # or the root's spectrum_server.py


# --------------------------------------------------------------------------------------------------
# One rollout's env over MCP
# --------------------------------------------------------------------------------------------------

_SSL_CONTEXT: ssl.SSLContext | None = None


def _mcp_http_client() -> httpx.AsyncClient:
    """mcp's default client, but with ONE shared SSL context: httpx builds a fresh one (loading the CA
    bundle, ~20 ms CPU) for every client, i.e. for every rollout's MCP connection, even for http URLs."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=300.0), follow_redirects=False, verify=_SSL_CONTEXT)


def _text(result: Any) -> str:
    for c in getattr(result, "content", None) or getattr(result, "contents", None) or []:
        t = getattr(c, "text", None)
        if isinstance(t, str):
            return t
    return ""


class McpEpisode:
    """One rollout's env on the server, reached over one MCP session (see
    :class:`spectrum_rft.rollouts.episode.Episode`). Scans after the first arrive in the ``submit_report`` tool
    result that closed the previous scan."""

    scans_in_tool_results = True

    def __init__(self, session: ClientSession):
        self.session = session
        self.done, self.scan, self.prompt = False, 0, ""
        self.result: dict | None = None
        self.faults: dict[str, int] = {}  # counted here, sent with the next request
        self._schemas: dict[str, tuple[dict, set]] = {}  # tool -> ({parameter: JSON type}, required ones)

    async def start(self) -> Opening:
        d = json.loads(_text(await self.session.read_resource(AnyUrl(EPISODE_URI))))
        self.done, self.scan, self.prompt = bool(d["done"]), int(d["scan"]), d["prompt"]
        listed = (await self.session.list_tools()).tools
        tools: list[dict[str, Any]] = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.inputSchema}}
            for t in listed if t.name not in PROTOCOL_TOOLS]
        for t in tools:
            p = t["function"]["parameters"]
            props = {k: (v or {}).get("type") for k, v in (p.get("properties") or {}).items()}
            self._schemas[t["function"]["name"]] = (props, set(p.get("required") or ()))
        return Opening(d["system_prompt"], tools, d["memory_mode"],
                       max_model_calls(int(d["n_scans"]), int(d["max_calls_per_scan"])))

    def structured(self, name: str, arguments: str) -> dict | None:
        """The arguments as the env tool's MCP arguments, when that carries them unchanged: a small JSON
        object of that tool's declared parameters, every required one present, no null, no NaN/infinity,
        strings exactly where the schema says string (FastMCP parses a JSON-looking string given for any
        other parameter)."""
        schema = self._schemas.get(name)
        if schema is None or len(arguments) > INLINE_MAX_CHARS:
            return None
        try:
            args = {} if is_blank(arguments) else parse_arguments(arguments)
            json.dumps(args, allow_nan=False)
        except (ValueError, RecursionError):  # InvalidArguments (not JSON); NaN/infinity, too deep to re-encode
            return None
        props, required = schema
        if not isinstance(args, dict) or not set(args) <= set(props) or not required <= set(args) \
                or any(v is None or isinstance(v, str) != (props[k] == "string") for k, v in args.items()):
            return None
        return args

    @staticmethod
    def raw(name: str, arguments: str) -> dict:
        """The call as the model wrote it, for :data:`RAW_TOOL`: the text; base64 of its UTF-8 when large
        (or not strict UTF-8); only its size when the env refuses it by size anyway."""
        size = argument_bytes(arguments)
        if size > MAX_ARGUMENT_BYTES:
            return {"name": name, "size": size}
        if len(arguments) <= INLINE_MAX_CHARS:
            try:
                arguments.encode("utf-8")
                return {"name": name, "arguments": arguments}
            except UnicodeEncodeError:  # lone surrogates: not representable in the JSON-RPC text
                pass
        return {"name": name, "arguments_b64": base64.b64encode(arguments.encode("utf-8", "surrogatepass")).decode()}

    def _meta(self, **extra: Any) -> dict:
        meta = dict(extra)
        if self.faults:
            meta[FAULTS_KEY], self.faults = self.faults, {}
        return meta

    async def _send(self, tool: str, arguments: dict, meta: dict) -> tuple[CallToolResult, dict]:
        result = await self.session.call_tool(tool, arguments, meta=meta)
        text = _text(result)
        if result.isError:
            raise RuntimeError(f"spectrum server: {tool} failed: {text[:500]}")
        data = (result.meta or {}).get(META_KEY) or {}
        self.scan, self.done = int(data.get("scan", self.scan)), bool(data.get("done", self.done))
        if isinstance(data.get("prompt"), str):
            self.prompt = data["prompt"]
        if isinstance(data.get("result"), dict):
            self.result = data["result"]
        return result, data

    async def call(self, name: str, arguments: str, *, first: bool, last: bool) -> ToolResult:
        meta = self._meta(**{TURN_KEY: {"first": first, "last": last}})
        args = self.structured(name, arguments)
        result, d = await (self._send(name, args, meta) if args is not None else
                           self._send(RAW_TOOL, self.raw(name, arguments), meta))
        return ToolResult(_text(result), ok=bool(d.get("ok")), advanced=bool(d.get("advanced")),
                          reward=d.get("reward"), error=d.get("error"), skipped=bool(d.get("skipped")))

    async def no_tool_call(self) -> str | None:
        result, d = await self._send(EVENT_TOOL, {"event": "no_tool_call"}, self._meta())
        return _text(result) if d.get("nudge") else None

    async def skip(self, reason: str) -> None:
        await self._send(EVENT_TOOL, {"event": "skip", "reason": reason}, self._meta())

    async def finish(self, reason: str) -> dict:
        if self.result is None or self.faults:  # else the last answer already carried the env's record
            await self._send(EVENT_TOOL, {"event": "finish", "reason": reason}, self._meta())
        assert self.result is not None
        return self.result

    def record_fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


@contextlib.asynccontextmanager
async def _mcp_streams(url: str) -> AsyncIterator[tuple]:
    """mcp's streamable-HTTP transport to ``url`` over :func:`_mcp_http_client` (the session is terminated
    on close)."""
    async with _mcp_http_client() as client, \
            streamable_http_client(url, http_client=client, terminate_on_close=True) as streams:
        yield streams


@contextlib.asynccontextmanager
async def mcp_episode(url: str, row: EvaluationRow) -> AsyncIterator[McpEpisode]:
    """An :class:`McpEpisode` for ``row`` on the server at ``url`` (its own connection and env)."""
    info = Implementation.model_validate({"name": "spectrum-rft", "version": "1", CLIENT_INFO_KEY: {
        "row_id": row.input_metadata.row_id, "dataset_info": dict(row.input_metadata.dataset_info or {})}})
    async with _mcp_streams(url) as (read, write, _):
        async with ClientSession(read, write, client_info=info) as session:
            await session.initialize()
            yield McpEpisode(session)


# --------------------------------------------------------------------------------------------------
# Server lifecycle
# --------------------------------------------------------------------------------------------------


class SpectrumServer:
    """``spectrum_server.py`` as a child process on 127.0.0.1."""

    def __init__(self, script: str = SERVER_SCRIPT, port: int | None = None, extra_args: list[str] | None = None):
        self.script = str(Path(script).resolve())
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.process: subprocess.Popen | None = None
        self.log_path = Path(tempfile.gettempdir()) / f"spectrum_server_{os.getpid()}_{self.port}.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 90.0) -> "SpectrumServer":
        if self.process is not None:
            return self
        env = {**os.environ}
        env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, self.script, "--port", str(self.port), "--parent-pid", str(os.getpid()),
                 *self.extra_args], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(Path(self.script).parent))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        tail = log_tail(self.log_path)
        self.stop(keep_log=True)
        raise RuntimeError(f"spectrum server did not start on port {self.port}:\n{tail}")

    def stop(self, keep_log: bool = False, timeout: float = 5.0) -> None:
        p, self.process = self.process, None
        if p is None:
            return
        stop_process(p, grace=timeout)
        if not keep_log:
            self.log_path.unlink(missing_ok=True)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None


_SHARED: dict[tuple[str, int | None], SpectrumServer] = {}
_SHARED_LOCK = threading.Lock()


# --------------------------------------------------------------------------------------------------
# The processor
# --------------------------------------------------------------------------------------------------


class SpectrumMcpRolloutProcessor(SpectrumRolloutProcessor):
    """Rollouts over MCP (arguments: :class:`SpectrumRolloutProcessor`; server options: the module
    docstring). Rows end up like the in-process path's, with ``extra["spectrum_rollout"]["transport"] ==
    "mcp"``."""

    transport = "mcp"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.server: SpectrumServer | None = None  # the server of the latest batch
        self.started: list[SpectrumServer] = []  # servers this processor started (stopped by cleanup())

    def before_batch(self, config: RolloutProcessorConfig) -> None:
        self.server = self._server(config)

    def _server(self, config: RolloutProcessorConfig) -> SpectrumServer:
        kw = dict(config.kwargs or {})
        port = kw.get("port") or None
        script = config.server_script_path or SERVER_SCRIPT
        if not kw.get("start_server", True) and port:  # a server that is already running on ``port``
            return SpectrumServer(script, int(port))
        if kw.get("server_mode", "shared") == "shared":
            key = (str(Path(script).resolve()), port)
            with _SHARED_LOCK:
                server = _SHARED.get(key)
                if server is None or not server.alive():
                    server = _SHARED[key] = SpectrumServer(script, port).start()
                    self.started.append(server)
            return server
        if self.server is None or not self.server.alive() or self.server not in self.started:
            self.server = SpectrumServer(script, port).start()
            self.started.append(self.server)
        return self.server

    def episode(self, row: EvaluationRow, config: RolloutProcessorConfig):
        return mcp_episode(self._server(config).base_url, row)  # the batch's server (before_batch started it)

    def cleanup(self) -> None:
        started, self.started = self.started, []
        with _SHARED_LOCK:
            for key in [k for k, s in _SHARED.items() if s in started]:
                del _SHARED[key]
        for s in started:
            s.stop()
