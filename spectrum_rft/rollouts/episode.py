"""The episode a transport carries: one rollout's :class:`SpectrumEnv`, as the episode driver reaches it.

An :class:`Episode` only *carries* text and tool calls to one env and its answers back:
:class:`InProcessEpisode` holds the env itself (the in-process path, the verifiers harness, and the scripted
policies of the audit, bench90 and the TRL data builders),
:class:`spectrum_rft.rollouts.mcp_client.McpEpisode` reaches it over one MCP connection. The env decides
everything (what a call does, what an unknown tool gets, when the call budget closes a scan, what the model
is told). Imports neither litellm nor eval-protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from spectrum_rft.task.environment import SpectrumEnv, ToolResult, env_for_row


@dataclass
class Opening:
    """What the env shows before the first model call."""

    system_prompt: str
    tools: list[dict]  # OpenAI function schemas of this row (SpectrumEnv.tools())
    memory_mode: str
    max_model_calls: int  # a bound the env's call budget keeps the loop under (a guard, never reached)


# Model calls the loop allows beyond every scan's budget plus one reply per scan (a guard, never reached).
CALL_GUARD_SLACK = 8


def max_model_calls(n_scans: int, max_calls_per_scan: int) -> int:
    """The loop's guard on model calls: every scan's call budget, one more reply per scan, some slack. The
    env's budget closes each scan well before it (both transports compute it from the env's numbers)."""
    return n_scans * (max_calls_per_scan + 1) + CALL_GUARD_SLACK


def opening_of(env: SpectrumEnv) -> Opening:
    return Opening(env.system_prompt(), env.tools(), env.config.memory_mode,
                   max_model_calls(env.n_scans, env.config.max_calls_per_scan))


class Episode(Protocol):
    """One rollout's env as a transport reaches it. ``done``, ``scan`` (0-based open scan) and ``prompt``
    (the open scan's text) are the env's, as of its last answer."""

    done: bool
    scan: int
    prompt: str
    scans_in_tool_results: bool  # the transport's scan delivery (the module docstring)

    async def start(self) -> Opening: ...

    async def call(self, name: str, arguments: str, *, first: bool, last: bool) -> ToolResult:
        """One tool call as the model wrote it (``first``/``last``: its place in the model's message)."""

    async def no_tool_call(self) -> str | None:
        """A reply without tool calls: the env's reminder for the model, or None (the scan was closed)."""

    async def skip(self, reason: str) -> None: ...

    async def finish(self, reason: str) -> dict:
        """Close the episode (remaining scans skipped with ``reason``); the env's metrics with
        ``scan_records``."""

    def record_fault(self, kind: str) -> None:
        """Count a transport-level fault (delivered to the env with the next request at the latest)."""


class InProcessEpisode:
    """The env itself, in this process. Scans arrive as user messages (unless told otherwise)."""

    def __init__(self, env: SpectrumEnv, seed: int | None, *, until: int | None = None,
                 scans_in_tool_results: bool = False):
        """An episode over ``env``. ``seed``: what ``start`` resets the env with; None: the env is already
        open (a caller's own env: the TRL adapter's) and the episode goes on from its open scan. ``until``:
        the episode is done for the driver once scan ``until`` (0-based) is open. ``scans_in_tool_results``:
        each next scan rides in the result that closed the scan before (as TRL and the MCP path show it)
        instead of a user message."""
        self.env, self.seed, self.until = env, seed, until
        self.scans_in_tool_results = scans_in_tool_results
        self.done, self.scan, self.prompt = False, 0, ""

    @classmethod
    def for_row(cls, row_id: str, dataset_info: dict | None) -> "InProcessEpisode":
        """The episode of a dataset row: its env and seed (:func:`~spectrum_rft.task.environment.env_for_row`)."""
        return cls(*env_for_row(row_id, dataset_info))

    def _sync(self) -> None:
        env = self.env
        scan = env.scan_index
        if scan != self.scan or not self.prompt:
            self.prompt = env.observation()["prompt"]
        self.done, self.scan = env.done or (self.until is not None and scan >= self.until), scan

    async def start(self) -> Opening:
        if self.seed is not None:
            self.env.reset(self.seed)
        self.prompt = ""
        self._sync()
        return opening_of(self.env)

    async def call(self, name: str, arguments: str, *, first: bool, last: bool) -> ToolResult:
        return self.call_now(name, arguments, first=first, last=last)

    def call_now(self, name: str, arguments: Any, *, first: bool, last: bool) -> ToolResult:
        res = self.env.call_tool(name, arguments, first=first, last=last)  # a message is one turn
        self._sync()
        return res

    async def no_tool_call(self) -> str | None:
        nudge = self.env.no_tool_call()
        self._sync()
        return nudge

    async def skip(self, reason: str) -> None:
        if not self.env.done:
            self.env.skip(reason)
        self._sync()

    async def finish(self, reason: str) -> dict:
        self.env.finish(reason)
        self._sync()
        return self.env.result()

    def record_fault(self, kind: str) -> None:
        self.env.record_fault(kind)
