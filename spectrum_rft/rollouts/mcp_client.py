"""``MCPGymRolloutProcessor`` for the spectrum server, without eval-protocol's McpGym waste and traps.

eval-protocol's dialogue loop (``ExecutionManager``) is kept as it is; three of its collaborators are
subclassed, per processor call, never patched process-wide:

* :class:`SpectrumConnectionManager` (the MCP client): a tool call is ONE request. The reward, the
  termination flag and, at the end, the env's metrics come back in the tool result's ``_meta`` (data,
  never message text), so the stock client's two control-plane GETs per call, each through a newly
  built ``httpx.AsyncClient`` (~20 ms CPU apiece: an SSL context even for http), are gone. The initial
  state is read over the same MCP connection (``spectrum://initial_state``: seeded for this row, also on
  a fresh server); ``reset_session`` closes an episode that ended early (``spectrum://finish/...``: the
  unplayed scans are scored as skipped) instead of POSTing a reset.
* :class:`SpectrumVectorEnv`: the scan reaches the model as plain text (not a JSON-escaped dict), and
  each tool call tells the server whether it ends the model's turn (the env's per-scan call budget
  counts model calls).
* :class:`SpectrumPolicy` (a ``LiteLLMPolicy``): per row, the model sees the ICL-off window of
  :func:`spectrum_context_window.window` and the row's own tool schemas (``SpectrumEnv.tools()``); no
  model call is made after the episode has ended (eval-protocol's loop makes one more); response
  caching is off unless asked for (GRPO candidates would otherwise get identical answers). Model calls are
  retried here (``llm_tries``, ``backoff_base``, ``backoff_max``, ``request_timeout``: as on the in-process
  path; processor arguments or ``rollout_processor_kwargs``), every HTTP request counted, instead of
  litellm's 8 silent retries. When every try of a model call failed the episode ends there (the server
  scores the remaining scans as skipped, ``skip_llm_failure``) instead of an exception that eval-protocol
  would retry three times; a rollout whose model never produced one usable reply becomes an error row
  (:func:`spectrum_turn_processor.mark_model_failure`, the cause from the same
  :func:`spectrum_turn_processor.failure_cause`). Tool-call arguments are kept in the row as
  :func:`spectrum_turn_processor.stored_arguments` bounds them (the server judged the real ones).

The server (``spectrum_server.py``) is started with this Python (``sys.executable``), on 127.0.0.1, on a
free port unless ``port`` is given, logging to a temp file, and exits on its own if this process dies.
``server_mode="shared"`` (default) keeps one server per script for the whole process (rollouts are
isolated per MCP connection, so restarting buys nothing); ``stop_shared_servers()`` stops them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.types import Implementation
from pydantic import AnyUrl

import eval_protocol as ep
from eval_protocol.mcp.client.connection import MCPConnectionManager
from eval_protocol.mcp.execution.manager import ExecutionManager
from eval_protocol.mcp.execution.policy import LiteLLMPolicy
from eval_protocol.mcp.session.manager import GeneralMCPVectorEnv
from eval_protocol.models import EvaluationRow
from eval_protocol.pytest.default_mcp_gym_rollout_processor import MCPGymRolloutProcessor
from eval_protocol.pytest.types import RolloutProcessorConfig
from eval_protocol.pytest.utils import normalize_fireworks_model_for_litellm
from eval_protocol.types import MCPToolCall

from spectrum_rft.task.environment import row_config, tool_schemas
from spectrum_rft.baselines import models as spectrum_models
from spectrum_rft.task.window import window
from spectrum_rft.common.processes import free_port, stop_process
from spectrum_rft.rollouts.turn import (backoff_delay, endpoint_of, failure_cause, failure_detail, mark_model_failure,
                                     stored_arguments)

# Kept in sync with spectrum_mcp (imported lazily there: the server module is heavier than needed here).
META_KEY = "spectrum"
TURN_END_KEY = "spectrum/turn_end"
INITIAL_STATE_URI = "spectrum://initial_state"
FINISH_URI = "spectrum://finish/{reason}"

SERVER_SCRIPT = str(Path(__file__).resolve().parent / "server_main.py")  # or the root's spectrum_server.py


# --------------------------------------------------------------------------------------------------
# Per-row facts the client needs (memory mode, tool schemas)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowSpec:
    memory_mode: str
    tools: list  # OpenAI function schemas of this row (the env's single definition)


def row_spec(row: EvaluationRow) -> RowSpec:
    cfg = row_config(row.input_metadata.dataset_info if row.input_metadata else None)
    return RowSpec(cfg.memory_mode, tool_schemas(cfg.memory_mode, cfg.preset))


@dataclass
class ModelCalls:
    """One rollout's model requests: usable replies, HTTP requests, the last failure."""

    usable: int = 0
    requests: int = 0
    cause: str | None = None
    detail: str = ""


class _ModelGaveUp(Exception):
    """Every try of one model call failed (the cause is in the rollout's :class:`ModelCalls`)."""


_ROW: contextvars.ContextVar[RowSpec | None] = contextvars.ContextVar("spectrum_row", default=None)
_CALLS: contextvars.ContextVar[ModelCalls | None] = contextvars.ContextVar("spectrum_calls", default=None)


def _text_of(result: Any) -> str:
    for c in getattr(result, "content", None) or getattr(result, "contents", None) or []:
        t = getattr(c, "text", None)
        if isinstance(t, str):
            return t
    return ""


def _decode(text: str) -> dict:
    try:
        obs = json.loads(text)
    except ValueError:
        return {"observation": text}
    return obs if isinstance(obs, dict) else {"observation": text}


# --------------------------------------------------------------------------------------------------
# Client side
# --------------------------------------------------------------------------------------------------


_SSL_CONTEXT: ssl.SSLContext | None = None


def _mcp_http_client(headers: dict[str, str] | None = None, timeout: httpx.Timeout | None = None,
                     auth: httpx.Auth | None = None) -> httpx.AsyncClient:
    """mcp's default client, but with ONE shared SSL context: httpx builds a fresh one (loading the CA
    bundle, ~20 ms CPU) for every client, i.e. for every rollout's MCP connection, even for http URLs."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return httpx.AsyncClient(headers=headers, timeout=timeout or httpx.Timeout(30.0, read=300.0), auth=auth,
                             follow_redirects=False, verify=_SSL_CONTEXT)


class SpectrumConnectionManager(MCPConnectionManager):
    """One MCP request per tool call; control-plane data from the result's ``_meta``."""

    async def initialize_session(self, session: Any) -> None:
        """eval-protocol's session set-up (clientInfo extras: session id, seed, row config, row id, model),
        with :func:`_mcp_http_client` and without the mcp client's extra ``list_tools`` on the first call
        (it re-lists the tools to validate structured output; ours declare none)."""
        if session._mcp_session is not None and session._exit_stack is not None:
            await session._exit_stack.aclose()
        session._mcp_session = session._exit_stack = None
        extra: dict[str, Any] = {"session_id": session.session_id}
        if session.seed is not None:
            extra["seed"] = session.seed
        row = session.dataset_row
        if row is not None and row.environment_context:
            extra["config"] = row.environment_context
        if row is not None and row.id:
            extra["dataset_row_id"] = row.id
        if session.model_id:
            extra["model_id"] = session.model_id
        client_info = Implementation(name="reward-kit", version="1.0.0", _extra={})  # eval-protocol's name
        client_info._extra.update(extra)
        stack = AsyncExitStack()
        try:
            read, write, _ = await stack.enter_async_context(streamablehttp_client(
                session.base_url, terminate_on_close=True, httpx_client_factory=_mcp_http_client))
            mcp_session = await stack.enter_async_context(ClientSession(read, write, client_info=client_info))
            await mcp_session.initialize()
        except BaseException:
            await stack.aclose()
            raise
        session._mcp_session, session._exit_stack = mcp_session, stack
        await self._prewarm_tools_cache(session)
        schemas = getattr(mcp_session, "_tool_output_schemas", None)
        if isinstance(schemas, dict):
            for tool in self._tools_cache.get(session.base_url, []):
                schemas.setdefault(tool["name"], None)

    async def get_initial_state(self, session: Any) -> Any:
        if not session._mcp_session:
            raise RuntimeError("Session not initialized")
        res = await session._mcp_session.read_resource(AnyUrl(INITIAL_STATE_URI))
        return _decode(_text_of(res))

    async def call_tool(self, session: Any, tool_name: str, arguments: dict) -> tuple[Any, float, bool, dict]:
        if not session._mcp_session:
            raise RuntimeError("Session not initialized")
        turn_end = bool(getattr(session, "spectrum_turn_end", True))
        result = await session._mcp_session.call_tool(tool_name, arguments, meta={TURN_END_KEY: turn_end})
        text = _text_of(result)
        obs = _decode(text)
        meta = (result.meta or {}).get(META_KEY) or {}
        if result.isError:  # a protocol-level failure (not a refused report: the env answers those)
            obs = {"observation": text or f"Error: tool {tool_name} failed."}
        if isinstance(meta.get("result"), dict):
            session.spectrum_result = meta["result"]
        info = {"control_plane": {"source": "tool_result_meta", "scan": meta.get("scan"),
                                  "advanced": meta.get("advanced"), "error": meta.get("error")}}
        return obs, float(meta.get("reward") or 0.0), bool(meta.get("terminated")), info

    async def reset_session(self, session: Any) -> None:
        # ExecutionManager calls this after every rollout, before close_session. The server's env lives
        # and dies with the connection, so there is nothing to reset; an episode that ended early is
        # closed here (remaining scans scored as skipped) and its metrics collected.
        if getattr(session, "spectrum_result", None) is not None or not session._mcp_session:
            return
        reason = getattr(session, "spectrum_end_reason", None) or "unfinished"
        res = await session._mcp_session.read_resource(AnyUrl(FINISH_URI.format(reason=reason)))
        session.spectrum_result = _decode(_text_of(res))


class SpectrumVectorEnv(GeneralMCPVectorEnv):
    def __init__(self, base: GeneralMCPVectorEnv, last_calls: dict[int, MCPToolCall]):
        super().__init__(base.sessions, base.dataset_rows)
        self.connection_manager = SpectrumConnectionManager()
        self._last_calls = last_calls  # env index -> the last tool call of the current model turn

    async def step(self, env_index: int, tool_call: MCPToolCall):
        session = self.sessions[env_index]
        session.spectrum_turn_end = self._last_calls.get(env_index) is tool_call
        return await super().step(env_index, tool_call)

    def format_tool_response(self, obs: Any):
        if isinstance(obs, dict) and isinstance(obs.get("observation"), str):
            return obs["observation"]
        return super().format_tool_response(obs)


class SpectrumPolicy(LiteLLMPolicy):
    """``LiteLLMPolicy`` with the row's window and tools, and no model call after the episode."""

    def __init__(self, specs: list[RowSpec], sessions: list, *, llm_tries: int = 4, backoff_base: float = 1.0,
                 backoff_max: float = 16.0, **kwargs: Any):
        if llm_tries < 1:
            raise ValueError("llm_tries must be >= 1")
        kwargs.setdefault("use_caching", False)
        kwargs["num_retries"] = 0  # retried (and counted) in _make_llm_call
        kwargs.setdefault("max_retries", 0)  # the OpenAI client would retry twice on its own
        super().__init__(**kwargs)
        self._specs = specs
        self._sessions = sessions
        self.llm_tries, self.backoff_base, self.backoff_max = llm_tries, backoff_base, backoff_max
        self.last_calls: dict[int, MCPToolCall] = {}
        self.model_calls: dict[int, ModelCalls] = {}  # env index -> its rollout's model requests
        self.llm_calls = 0  # HTTP requests made to the model (for tests and benches)
        self.malformed_tool_calls = 0  # tool calls whose arguments were not a JSON object

    async def __call__(self, tool_schemas: list, env_index: int, conversation_history: list):
        last = conversation_history[-1] if conversation_history else {}
        if last.get("role") == "tool" and (last.get("metadata") or {}).get("terminated"):
            # eval-protocol asks for one more reply after the env ended the episode: nothing to ask.
            return [MCPToolCall("_no_tool_call", {"reason": "episode_over"})], None, "control_plane_signal"
        token = _ROW.set(self._specs[env_index])
        calls_token = _CALLS.set(self.model_calls.setdefault(env_index, ModelCalls()))
        try:
            calls, usage, finish = await super().__call__(tool_schemas, env_index, conversation_history)
        except _ModelGaveUp:  # end the episode here: the server scores the remaining scans as skipped
            self._sessions[env_index].spectrum_end_reason = "llm_failure"
            return [MCPToolCall("_no_tool_call", {"reason": "llm_failure"})], None, "control_plane_signal"
        finally:
            _CALLS.reset(calls_token)
            _ROW.reset(token)
        if calls and calls[0].tool_name == "_no_tool_call":
            self._sessions[env_index].spectrum_end_reason = "no_tool_call"
        elif calls:
            self.last_calls[env_index] = calls[-1]
        return calls, usage, finish

    def _convert_mcp_tools_to_llm_format(self, mcp_tools: list) -> list:
        spec = _ROW.get()
        return spec.tools if spec is not None else super()._convert_mcp_tools_to_llm_format(mcp_tools)

    async def _make_llm_call(self, messages: list, tools: list) -> dict:
        spec = _ROW.get()
        if spec is not None:
            messages = window(messages, spec.memory_mode)
        # eval-protocol sends earlier assistant turns with ``content: null``; some OpenAI-compatible
        # servers (llama.cpp's) reject that, and "" means the same
        messages = [{**m, "content": ""} if isinstance(m, dict) and m.get("role") == "assistant"
                    and m.get("content") is None else m for m in messages]
        stats = _CALLS.get() or ModelCalls()
        response = None
        for attempt in range(self.llm_tries):
            if attempt:
                await asyncio.sleep(backoff_delay(attempt, self.backoff_base, self.backoff_max))
            self.llm_calls += 1
            stats.requests += 1
            try:
                response = await super()._make_llm_call(messages, tools)
                break
            except asyncio.CancelledError:
                raise
            except IndexError:  # eval-protocol's LiteLLMPolicy reads choices[0]: a reply without choices
                stats.cause, stats.detail = "empty reply", "HTTP 200 without a choice"
            except Exception as e:  # noqa: BLE001  (classified; the episode ends after the last try)
                stats.cause, stats.detail = failure_cause(e), failure_detail(e)
                if stats.cause == "bad request":  # the same request fails the same way
                    break
        if response is None:
            raise _ModelGaveUp(stats.cause)
        stats.usable += 1
        # eval-protocol json.loads every tool call's arguments and a rollout dies on malformed ones: forward
        # those as written instead, for the env to refuse with a clear error (spectrum_mcp: raw_arguments)
        for choice in response.get("choices") or []:
            for tc in (choice.get("message") or {}).get("tool_calls") or []:
                fn = tc.get("function") or {}
                raw = fn.get("arguments")
                try:
                    ok = isinstance(json.loads(raw), dict) if isinstance(raw, str) else isinstance(raw, dict)
                except (ValueError, RecursionError):
                    ok = False
                if not ok:
                    fn["arguments"] = json.dumps({"raw_arguments": str(raw)[:4000]})
                    self.malformed_tool_calls += 1
        return response

    def add_tool_response(self, env_index: int, tool_call: MCPToolCall, tool_response: Any,
                          conversation_history: list, reward: float = 0.0, terminated: bool = False,
                          info: dict | None = None) -> None:
        """After the server judged a call: its arguments stay in the history (the row, later requests) and in
        eval-protocol's step log (``tool_call.arguments``) only as :func:`stored_arguments` bounds them."""
        refused = bool(((info or {}).get("control_plane") or {}).get("error"))
        for m in reversed(conversation_history):
            if m.get("role") != "assistant":
                continue
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or {}
                if tc.get("id") == tool_call.tool_call_id and isinstance(fn.get("arguments"), str):
                    kept = stored_arguments(fn["arguments"], refused)
                    if kept is not fn["arguments"]:
                        fn["arguments"] = kept
                        tool_call.arguments = json.loads(kept)
            break
        super().add_tool_response(env_index, tool_call, tool_response, conversation_history, reward, terminated,
                                  info)


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
        return f"http://127.0.0.1:{self.port}/mcp/"

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
        log_tail = self.log_path.read_text()[-3000:] if self.log_path.exists() else ""
        self.stop(keep_log=True)
        raise RuntimeError(f"spectrum server did not start on port {self.port}:\n{log_tail}")

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


def stop_shared_servers() -> None:
    with _SHARED_LOCK:
        servers = list(_SHARED.values())
        _SHARED.clear()
    for s in servers:
        s.stop()


atexit.register(stop_shared_servers)


# --------------------------------------------------------------------------------------------------
# The processor
# --------------------------------------------------------------------------------------------------


class SpectrumMcpRolloutProcessor(MCPGymRolloutProcessor):
    """See the module docstring. Rows end up with ``execution_metadata.extra["spectrum"]`` = the env's
    metrics (``per_scan_reward``, ``scan_records``...) as reported by the server."""

    def __init__(self, *, llm_tries: int = 4, backoff_base: float = 1.0, backoff_max: float = 16.0,
                 request_timeout: float = 180.0) -> None:
        super().__init__()
        self.spectrum_server: SpectrumServer | None = None
        self.last_policy: SpectrumPolicy | None = None
        # model-call retries, as on the in-process path; ``rollout_processor_kwargs`` may override them
        self.llm_settings = {"llm_tries": llm_tries, "backoff_base": backoff_base, "backoff_max": backoff_max,
                             "request_timeout": request_timeout}

    def _server(self, config: RolloutProcessorConfig) -> SpectrumServer:
        kw = dict(config.kwargs or {})
        mode = kw.get("server_mode", "shared")
        port = kw.get("port") or None
        script = config.server_script_path or SERVER_SCRIPT
        self.server_mode = mode
        if not kw.get("start_server", True) and port:  # a server that is already running on ``port``
            return SpectrumServer(script, int(port))
        # start_server=False without a port is eval-protocol retrying a failed rollout: reuse ours
        # (started again if it died)
        if mode == "shared":
            key = (str(Path(script).resolve()), port)
            with _SHARED_LOCK:
                server = _SHARED.get(key)
                if server is None or server.process is None or server.process.poll() is not None:
                    server = _SHARED[key] = SpectrumServer(script, port).start()
            return server
        if self.spectrum_server is None or self.spectrum_server.process is None:
            self.spectrum_server = SpectrumServer(script, port).start()
        return self.spectrum_server

    def __call__(self, rows: list[EvaluationRow], config: RolloutProcessorConfig) -> list[asyncio.Task[EvaluationRow]]:
        server = self._server(config)
        completion_params = normalize_fireworks_model_for_litellm(config.completion_params) or {}
        if spectrum_models.is_policy_model(completion_params.get("model")):  # a scripted baseline as a model
            spectrum_models.register()
        for row in rows:
            row.input_metadata.completion_params = completion_params
        specs = [row_spec(r) for r in rows]
        params = {k: v for k, v in completion_params.items() if k not in ("model", "temperature", "max_tokens",
                                                                           "extra_body")}
        kw = config.kwargs or {}
        llm = {k: kw.get(k, v) for k, v in self.llm_settings.items()}
        params.setdefault("timeout", llm.pop("request_timeout"))
        base = ep.make(server.base_url, evaluation_rows=rows, model_id=str(completion_params.get("model")))
        policy = SpectrumPolicy(
            specs, base.sessions, **llm,
            model_id=str(completion_params.get("model") or "gpt-4o-mini"),
            temperature=completion_params.get("temperature", 0.0),
            max_tokens=completion_params.get("max_tokens", 4096),
            **(completion_params.get("extra_body") or {}), **params,
        )
        self.policy = self.last_policy = policy
        envs = SpectrumVectorEnv(base, policy.last_calls)
        inner = ExecutionManager().execute_rollouts(envs, policy=policy, semaphore=config.semaphore,
                                                    steps=config.steps, evaluation_rows=rows)

        async def finish(i: int, task: asyncio.Task) -> EvaluationRow:
            row = await task
            result = getattr(envs.sessions[i], "spectrum_result", None)
            calls = policy.model_calls.get(i) or ModelCalls()
            extra = dict(row.execution_metadata.extra or {})
            if result is not None:
                extra["spectrum"] = result
            extra["spectrum_rollout"] = {"transport": "mcp", "model_calls": calls.usable,
                                         "llm_requests": calls.requests}
            row.execution_metadata.extra = extra
            row.tools = specs[i].tools
            if calls.usable == 0 and calls.cause is not None:
                mark_model_failure(row, calls.cause, calls.requests, calls.detail, endpoint_of(completion_params))
            return row

        return [asyncio.create_task(finish(i, t)) for i, t in enumerate(inner)]

    def cleanup(self) -> None:
        self.policy = None
        if self.server_mode != "shared" and self.spectrum_server is not None:
            self.spectrum_server.stop()
            self.spectrum_server = None
