"""What travels between the OpenEnv client and the spectrum server: one action, one observation, one state.

These are OpenEnv's own pydantic types (``openenv.core.env_server.types``) with the spectrum task's fields.
Nothing here decides anything: :class:`spectrum_rft.task.environment.SpectrumEnv`, on the server, judges
every action.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class SpectrumAction(Action):
    """One move of the episode driver (``spectrum_rft.rollouts.driver.drive``) on this session's env.

    ``call``: one tool call exactly as the model wrote it (``arguments``: the text of the call's arguments,
    or an already parsed JSON value); ``first``/``last`` place it in the model's message (a message is one
    model turn: ``SpectrumEnv.call_tool``). ``no_tool_call``: a reply without tool calls. ``skip``: close the
    open scan as an empty report (``reason``: why). ``finish``: close the episode (unplayed scans skipped).
    ``faults``: transport-level faults the client counted since its last action (``record_fault``)."""

    op: Literal["call", "no_tool_call", "skip", "finish"] = "call"
    tool: str = ""
    arguments: Any = None
    first: bool = True
    last: bool = True
    reason: str = ""
    faults: dict[str, int] = Field(default_factory=dict)


class SpectrumObservation(Observation):
    """What the session's env says after a reset or an action.

    ``reward`` (OpenEnv's field) is the part of the env's score this action settled: the rewards of the scans
    it closed (scored, or skipped), divided by ``n_scans``; so a session's rewards add up to its score (the mean
    over every scan). The scan's own reward is ``scan_reward``; the env's whole record, once ``done``, is
    ``result`` (``SpectrumEnv.result()``: score, per-scan rewards and records, faults, band fingerprint)."""

    prompt: str = ""  # the open scan as the model reads it (the completion text once done)
    scan: int = 0  # 0-based index of the open scan (== n_scans once done)
    n_scans: int = 0
    text: str | None = None  # for the model: the tool result, or the env's reminder after a reply without a call
    ok: bool = True
    advanced: bool = False  # the call's report was scored and the scan closed
    skipped: bool = False  # the call budget closed the scan as an empty report
    error: str | None = None
    scan_reward: float | None = None  # the scored report's reward (when ``advanced``)
    # set by reset: what the model is given before its first call
    row_id: str | None = None
    seed: int | None = None
    system_prompt: str | None = None
    tool_schemas: list[dict] | None = None  # OpenAI function schemas of this row (SpectrumEnv.tools())
    memory_mode: str | None = None
    max_calls_per_scan: int | None = None
    result: dict | None = None  # SpectrumEnv.result(), once done


class SpectrumState(State):
    """The session's episode as the env records it (``state()``): authoritative, never parsed from text."""

    row_id: str | None = None
    seed: int | None = None
    memory_mode: str | None = None
    n_scans: int = 0
    scan: int = 0
    done: bool = False
    score: float | None = None  # the env's score so far (unplayed scans count as skipped empty reports)
    per_scan_reward: list[float] = Field(default_factory=list)  # of the closed scans
    band_fingerprint: str | None = None
    faults: dict[str, int] = Field(default_factory=dict)
