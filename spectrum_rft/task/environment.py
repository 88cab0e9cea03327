"""The spectrum environment: one fixed, unknown band watched through a series of noisy, sparse scans.

:class:`SpectrumEnv` owns every rule of an episode (what a scan shows, what each tool does, when a scan is
skipped, when the episode ends); the rollout paths (MCP server, in-process processor, TRL, verifiers) are
thin transports around it. Gymnasium-shaped::

    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="scaffold", reward="default"))
    obs, info = env.reset(seed=seed_for_row("row-0007"))
    obs, reward, terminated, truncated, info = env.step({"center_freqs": [41.5, 97.0]})

One seed drives one ``numpy.random.Generator`` that draws the band *and* the whole scan sequence at
``reset`` (so every rollout of a row sees byte-identical prompts in every process). The memory mode's echo
rule (:mod:`spectrum_rft.task.memory`; the scrambled control's random echo) draws from a second stream
derived from the same seed.

The pieces around it, each in a module of its own (and re-exported here, where callers import them):
``config`` (:class:`EnvConfig`, the memory modes and prompt variants), ``presets`` (the bands and their
scan schedules), ``instructions`` (the system prompt and the tool schemas), ``actions`` (tool-call
arguments: the JSON parser, the size limit, the report's validation), ``reward`` (the scores) and ``rows``
(a dataset row's config and seed; :func:`env_for_row` builds the env from them).
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spectrum_rft.task import reward as sr
from spectrum_rft.task import scan_format
from spectrum_rft.task.actions import (MAX_ARGUMENT_BYTES, InvalidAction, InvalidArguments, argument_bytes,
                                       parse_arguments, parse_report)
from spectrum_rft.task.config import MEMORY_MODES, PROMPT_VARIANTS, EnvConfig
from spectrum_rft.task.episode import EpisodeDraw, Peak, Preset, Scan
from spectrum_rft.task.instructions import render_system_prompt, tool_schemas
from spectrum_rft.task.presets import PRESETS, RoundRobinPreset, get_preset
from spectrum_rft.task.rows import row_config, row_episode, row_seed
from spectrum_rft.task.scan_format import TEMPLATE_DIR
from spectrum_rft.task.seeding import resolve_salt, seed_for_row

__all__ = [  # this module's own names, then the pieces' names re-exported for their callers
    "AFTER_END", "EXTRA_SUBMIT", "NUDGE", "STILL_OPEN", "SpectrumEnv", "ToolResult", "env_for_row",
    "MAX_ARGUMENT_BYTES", "InvalidAction", "InvalidArguments", "argument_bytes", "parse_arguments", "parse_report",
    "MEMORY_MODES", "PROMPT_VARIANTS", "EnvConfig", "EpisodeDraw", "Peak", "Preset", "Scan", "render_system_prompt",
    "tool_schemas", "PRESETS", "RoundRobinPreset", "get_preset", "row_config", "row_episode", "row_seed",
    "TEMPLATE_DIR", "resolve_salt", "seed_for_row",
]


# --------------------------------------------------------------------------------------------------
# The environment
# --------------------------------------------------------------------------------------------------


def _near(sorted_xs: list[float], x: float, tol: float) -> bool:
    """Whether some value of ``sorted_xs`` lies within ``tol`` of ``x``."""
    i = bisect_left(sorted_xs, x - tol)
    return i < len(sorted_xs) and sorted_xs[i] <= x + tol


EXTRA_SUBMIT = ("Error: this scan was already reported by an earlier submit_report in this message; "
                "this call was ignored.")
AFTER_END = "Error: all scans are recorded; this call was ignored."
STILL_OPEN = " The scan is still open; call submit_report again."
NUDGE = "No tool call received. Call submit_report with the centre frequencies of all occupied regions."
# Distinct fault names record_fault adds to an episode's record (the transports' own are ~10); a new name beyond
# them is counted under OTHER_FAULT, so a client sending made-up names cannot grow the record. The env's own
# names are always counted as themselves.
MAX_FAULT_KINDS = 64
OTHER_FAULT = "other"


@dataclass(slots=True)
class ToolResult:
    """What a tool call did. ``content`` is the text for the model; the rest is structured data."""

    content: str
    ok: bool
    advanced: bool = False  # the scan was scored and the episode moved on
    reward: float | None = None  # the scored reward, when ``advanced``
    error: str | None = None
    skipped: bool = False  # this call ended the model turn and the call budget closed the scan


@dataclass(slots=True)
class _State:
    episode: EpisodeDraw
    seed: int
    truth_merged: list[tuple[float, float]]
    bodies: list[str]  # rendered scan bodies (header + peaks), one per scan
    truth_intervals: list[tuple[float, float]]  # one per transmitter, same order as episode.truth
    scan: int = 0  # 0-based index of the open scan; == n_scans when done
    records: list[sr.ScanRecord] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)  # transmitters detected in an earlier scan
    prev_report: list[float] = field(default_factory=list)
    calls_this_scan: int = 0
    turn_open: bool = False  # a model turn (call_tool(first=True)) not yet ended
    reported_this_turn: bool = False  # a submit_report of the open model turn scored the scan
    notepad: str = ""
    faults: dict[str, int] = field(default_factory=dict)
    echo_rng: np.random.Generator | None = None  # the memory mode's echo rule draws from it


class SpectrumEnv:
    """One rollout's environment. Not shared between rollouts (GRPO candidates each own one).

    **The rules of an episode** (every transport only carries them):

    * **Start.** ``reset(seed)`` draws the band and every scan from ``seed`` (a dataset row's seed:
      :func:`env_for_row`); the observation is scan 1's text. Nothing is scored yet.
    * **Scans.** Scan k shows the peaks of the transmitters active in it (noisy, some missed, some false),
      and what the memory mode (:mod:`spectrum_rft.task.memory`) adds: the echo of the previous report, or
      the notepad. The model answers each scan with one ``submit_report``.
    * **Rewards.** A scored report's reward is its score against every transmitter of the band, active or
      dormant (the config's reward, :mod:`spectrum_rft.task.reward`), in [0, 1]; the scan closes and the
      next one opens. The episode's score is the mean over all scans.
    * **Refusals.** Bad input never raises and never scores: a report that does not parse, is off the band
      or over the region cap, arguments over :data:`MAX_ARGUMENT_BYTES`, an unknown tool, a notepad tool in
      a mode without one, a second ``submit_report`` in one model message, a call after the end: each gets
      an error text for the model, leaves the scan open and is counted in ``metrics()["faults"]``. An
      argument the tool's schema does not name is ignored, as JSON Schema allows (``tool_schemas()`` sets no
      ``additionalProperties``; the grammar does not sample one), and so is a field the preset ignores.
    * **Budgets.** Through :meth:`call_tool`, one model message is one turn; a turn that scores nothing
      (refused calls, notepad calls only, or no tool call: :meth:`no_tool_call`) uses one of the scan's
      ``max_calls_per_scan`` turns, and the last one closes the scan as an empty report (skipped, reward of
      the empty report). :meth:`step` is one report outside any turn (a scripted loop): no budget.
    * **End.** The episode ends after the last scan (``done``; ``terminated`` from :meth:`step`); it is
      never truncated. A transport that stops early calls :meth:`finish`, :meth:`skip` for one scan: the
      scans left are scored as skipped empty reports, never dropped, so every episode has ``n_scans``
      rewards. :meth:`metrics` / :meth:`result` are the authoritative scores.
    """

    def __init__(self, config: EnvConfig | None = None):
        self.config = config or EnvConfig()
        self.preset = get_preset(self.config.preset)
        self._s: _State | None = None
        self._echo: list[float] | None = None  # the memory echo shown with the open scan

    # ---- gym API ---------------------------------------------------------------------------------

    def reset(self, seed: int) -> tuple[dict, dict]:
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        seed = int(seed)
        ep = self.preset.episode(seed)
        truth_merged = sr.report_intervals([c for c, _ in ep.truth], [w for _, w in ep.truth], ep.band)
        # the stream the mode's echo rule draws from (the scrambled control's random echo); none without a rule
        echo_rng = np.random.default_rng([seed, 0x5C4A]) if self.config.memory.echo is not None else None
        # Every scan body in one template pass; only the echo/notepad tail is rendered per scan.
        bodies = scan_format.render_bodies(ep)
        truth_iv = [(c - 0.5 * w, c + 0.5 * w) for c, w in ep.truth]
        self._s = _State(ep, seed, truth_merged, bodies, truth_iv, echo_rng=echo_rng)
        self._echo = self._make_echo()
        return self.observation(), {"seed": seed, "n_scans": self.n_scans, "band": ep.band}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        """Score a report for the open scan. An invalid report is refused: reward 0, the scan stays open,
        ``info["error"]`` (and ``obs["error"]``) say why, and the fault is counted."""
        s = self._require_open()
        try:
            centres, widths = parse_report(action, self.preset)
        except InvalidAction as e:
            self._fault("invalid_report")
            obs = self.observation()
            obs["error"] = str(e)
            return obs, 0.0, False, False, {"advanced": False, "error": str(e), "scan": s.scan + 1}
        return self._score(centres, widths, skipped=False)

    def skip(self, reason: str = "skipped") -> tuple[dict, float, bool, bool, dict]:
        """Close the open scan as an empty report, counted in ``scans_skipped`` (never dropped)."""
        self._require_open()
        self._fault(f"skip_{reason}")
        return self._score([], [], skipped=True)

    def finish(self, reason: str = "unfinished") -> None:
        """Skip every remaining scan (a rollout that ended early still scores all of them)."""
        while self._s is not None and not self.done:
            self.skip(reason)

    # ---- tools (the one implementation both rollout paths call) ----------------------------------

    def call_tool(self, name: str, arguments: Any, *, first: bool = False, last: bool = False,
                  size: int | None = None) -> ToolResult:
        """Run one tool call from the model. Never raises for bad model input.

        A model's message is one model turn, whatever its number of calls: ``first`` marks the message's
        first call (it opens the turn, unless the episode is over) and ``last`` its last (it closes the turn;
        a single call is both). Within a turn only the first scored ``submit_report`` counts: a further one
        gets an error and never lands on the next scan. A closed turn counts against the open scan's call
        budget unless one of its ``submit_report`` calls scored the scan; after ``max_calls_per_scan`` such
        turns the scan is skipped, and the last call's text says so. A call with neither flag outside a turn
        (a scripted loop over the env) has no budget: every valid report advances.

        Calls after the last scan get an error; both errors are counted as faults. Arguments written as
        text longer than :data:`MAX_ARGUMENT_BYTES` are refused by size (``size``: that size, from a
        transport that carried only the size)."""
        if first and not self.done:
            self._begin_turn()
        res = self._call_tool(name, arguments, size)
        if last and self._end_turn():
            res.content = (res.content.removesuffix(STILL_OPEN) + f"\nScan {self.scan_index} closed without a "
                           f"valid report ({self.config.max_calls_per_scan} model calls used); it is scored as an "
                           "empty report.")
            res.skipped = True
        return res

    def no_tool_call(self) -> str | None:
        """A model reply without any tool call: one model call against the scan's budget. Returns the
        reminder for the model, or None when the budget closed the scan (the next scan follows)."""
        if self.done:
            return None
        forced = self._end_turn()
        return None if forced or self.done else NUDGE

    def _call_tool(self, name: str, arguments: Any, size: int | None) -> ToolResult:
        s = self._state()
        assert s is not None
        if self.done:
            self._fault("call_after_end")
            return ToolResult(AFTER_END, ok=False, error="episode over")
        if name == "submit_report" and s.turn_open and s.reported_this_turn:
            self._fault("extra_submit")
            return ToolResult(EXTRA_SUBMIT, ok=False, error="extra submit_report")
        size = max(size or 0, argument_bytes(arguments))
        if size > MAX_ARGUMENT_BYTES:
            self._fault("arguments_too_large")
            msg = f"the arguments are {size} bytes; the limit is {MAX_ARGUMENT_BYTES}"
            return ToolResult(f"Error: {msg}. The call was ignored.", ok=False, error=msg)
        if name == "submit_report":
            try:
                arguments = parse_arguments(arguments)
            except InvalidArguments as e:
                self._fault("invalid_report")
                return ToolResult(f"Error: {e}.{STILL_OPEN}", ok=False, error=str(e))
            note = None
            if self.config.memory.notepad_in_scan and isinstance(arguments, dict) and "notepad_update" in arguments:
                note = self._set_notepad(arguments["notepad_update"])
            obs, reward, _, _, info = self.step(arguments)
            if not info["advanced"]:
                return ToolResult(f"Error: {info['error']}.{STILL_OPEN}", ok=False, error=info["error"])
            text = scan_format.render_feedback(info["scan"], self.n_scans, self.done)
            if note is not None and not note.ok:
                text += f" (notepad not updated: {note.error})"
            s.reported_this_turn = True
            return ToolResult(text, ok=True, advanced=True, reward=reward)
        if name in ("notepad_read", "notepad_write"):
            if not self.config.memory.notepad_tools:
                self._fault("notepad_unavailable")
                return ToolResult(f"Error: {name} is not available in memory mode "
                                  f"'{self.config.memory_mode}'. Use submit_report.", ok=False,
                                  error="notepad_unavailable")
            if name == "notepad_read":
                return ToolResult(s.notepad if s.notepad else "(the notepad is empty)", ok=True)
            try:
                args = parse_arguments(arguments)
            except InvalidArguments:
                args = None  # refused below as a notepad text that is not a string
            return self._set_notepad(args.get("text") if isinstance(args, dict) else None)
        self._fault("unknown_tool")
        shown = str(name)[:40]
        return ToolResult(f"Error: unknown tool: {shown}. Valid tools: "
                          + ", ".join(t["function"]["name"] for t in self.tools()) + ".", ok=False,
                          error="unknown_tool")

    def _set_notepad(self, text: Any) -> ToolResult:
        """Replace the notepad. Too long or not a string: refused, the old notepad is kept."""
        s = self._s
        assert s is not None
        if not isinstance(text, str):
            self._fault("invalid_notepad_write")
            return ToolResult("Error: the notepad text must be a string. The notepad was not changed.", ok=False,
                              error="notepad text must be a string")
        cap = self.config.notepad_chars
        if len(text) > cap:
            self._fault("notepad_too_long")
            return ToolResult(f"Error: notepad text is {len(text)} characters; the limit is {cap}. "
                              "The notepad was not changed.", ok=False,
                              error=f"notepad text is {len(text)} characters; the limit is {cap}")
        s.notepad = text
        return ToolResult(f"Notepad saved ({len(text)}/{cap} characters).", ok=True)

    def _begin_turn(self) -> None:
        """A model's message is about to be executed: its tool calls form one turn (see :meth:`call_tool`)."""
        s = self._state()
        s.turn_open, s.reported_this_turn = True, False

    def _end_turn(self) -> bool:
        """Close one model turn: count it against the open scan's budget unless one of its ``submit_report``
        calls scored the scan. After ``max_calls_per_scan`` turns without a scored report the scan is
        skipped. Returns True when this forced the scan to advance."""
        s = self._s
        if s is None:
            return False
        advanced = s.reported_this_turn
        s.turn_open, s.reported_this_turn = False, False
        if self.done or advanced:
            s.calls_this_scan = 0
            return False
        s.calls_this_scan += 1
        if s.calls_this_scan >= self.config.max_calls_per_scan:
            self.skip("call_budget")
            return True
        return False

    def record_fault(self, kind: str, n: int = 1) -> None:
        """Count ``n`` transport-level faults (LLM error, malformed tool call, ...) for the metrics (at most
        :data:`MAX_FAULT_KINDS` distinct names; later new ones are counted as :data:`OTHER_FAULT`)."""
        f = self._state().faults
        self._fault(OTHER_FAULT if kind not in f and len(f) >= MAX_FAULT_KINDS else kind, n)

    # ---- views -----------------------------------------------------------------------------------

    @property
    def n_scans(self) -> int:
        return self.preset.n_scans

    @property
    def done(self) -> bool:
        return self._s is not None and self._s.scan >= self.n_scans

    @property
    def scan_index(self) -> int:
        """0-based index of the open scan (== n_scans once done)."""
        return self._state().scan

    def tools(self) -> list[dict]:
        return tool_schemas(self.config.memory_mode, self.config.preset)

    def system_prompt(self) -> str:
        return render_system_prompt(self.config)

    def observation(self) -> dict:
        s = self._state()
        assert s is not None
        if self.done:
            return {"prompt": scan_format.render_complete(self.n_scans), "scan": self.n_scans,
                    "n_scans": self.n_scans, "done": True}
        return {"prompt": self.render_scan(s.scan), "scan": s.scan + 1, "n_scans": self.n_scans, "done": False}

    def render_scan(self, index: int) -> str:
        """Scan ``index`` as the model reads it (the echo/notepad tail only on the open scan)."""
        s = self._state()
        assert s is not None
        echo = self._echo if index == s.scan else None
        notepad = s.notepad if self.config.memory.notepad_in_scan and index == s.scan else None
        return scan_format.render_scan(s.bodies[index], echo, notepad, self.preset.max_regions)

    def truth(self) -> list[tuple[float, float]]:
        """Privileged: every transmitter's (centre, bandwidth). For oracles and analysis only."""
        return list(self._state().episode.truth)

    def scan_records(self) -> list[dict]:
        return [r.as_dict() for r in self._state().records]

    def result(self) -> dict:
        """What the evaluator reads, on every transport: the metrics with the per-scan records."""
        return {**self.metrics(), "scan_records": self.scan_records()}

    def _band_fingerprint(self) -> str:
        s = self._state()
        assert s is not None
        key = json.dumps([s.episode.band, [[round(c, 6), round(w, 6)] for c, w in s.episode.truth]])
        return hashlib.blake2b(key.encode(), digest_size=6).hexdigest()

    def metrics(self) -> dict:
        """Episode metrics; unplayed scans count as skipped empty reports (see ``spectrum_reward``)."""
        s = self._state()
        assert s is not None
        records = list(s.records)
        if len(records) < self.n_scans:
            empty = sr.score_scan([], s.truth_merged, s.episode.band, centres=[], truth=s.truth_intervals)
            nothing = self.config.reward_def.score(empty)
            records += [
                sr.ScanRecord(scan=i + 1, reward=nothing, occ=empty.occ, avail=empty.avail, skipped=True, report_size=0,
                              dormant_eligible=0, dormant_covered=0, carry_prev=0, carry_kept=0, match=empty.match,
                              current_part=nothing)
                for i in range(len(records), self.n_scans)
            ]
        m = sr.episode_metrics(records)
        m.update(
            per_scan_reward=[r.reward for r in records],
            faults=dict(s.faults),
            band_fingerprint=self._band_fingerprint(),
            seed=s.seed,
            salt=self.config.salt,
            preset=self.config.preset,
            memory_mode=self.config.memory_mode,
            reward_name=self.config.reward,
            n_scans=self.n_scans,
        )
        return m

    # ---- internals -------------------------------------------------------------------------------

    def _state(self) -> _State:
        """The episode's state; an error before the first ``reset``."""
        if self._s is None:
            raise RuntimeError("call reset(seed) first")
        return self._s

    def _require_open(self) -> _State:
        self._state()
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed)")
        return self._s  # type: ignore[return-value]

    def _fault(self, kind: str, n: int = 1) -> None:
        f = self._state().faults
        f[kind] = f.get(kind, 0) + n

    def _score(self, centres: list[float], widths: list[float], skipped: bool):
        s = self._s
        assert s is not None
        ep = s.episode
        report = sr.report_intervals(centres, widths, ep.band)
        sc = sr.score_scan(report, s.truth_merged, ep.band, centres=centres, truth=s.truth_intervals)
        reward = self.config.reward_def.score(sc)
        scan = ep.scans[s.scan]
        current_part = self._current_part(scan, centres, widths, reward)
        dormant_seen = s.seen.difference(scan.active)
        covered = 0
        if dormant_seen and report:
            fracs = sr.coverage(sorted([s.truth_intervals[t] for t in dormant_seen]), report)
            covered = sum(1 for f in fracs if f >= 0.5)
        now = sorted(centres)
        kept = sum(1 for p in s.prev_report if _near(now, p, self.config.carry_tolerance))
        echo = self._echo or []  # the echo shown with this scan (what echo_copy compares in both arms)
        echo_kept = sum(1 for e in echo if _near(now, e, self.config.carry_tolerance))
        peaks, echoed = sorted(p.freq for p in scan.peaks), sorted(echo)
        added = sum(1 for c in now if _near(peaks, c, self._half_width()) and not _near(echoed, c, self.config.carry_tolerance))
        kept_beyond = sum(1 for e in echo if _near(now, e, self.config.carry_tolerance) and not _near(peaks, e, self._half_width()))
        s.records.append(
            sr.ScanRecord(scan=s.scan + 1, reward=reward, occ=sc.occ, avail=sc.avail, skipped=skipped,
                          report_size=len(centres), dormant_eligible=len(dormant_seen), dormant_covered=covered,
                          carry_prev=len(s.prev_report), carry_kept=kept, echo_shown=len(echo), echo_kept=echo_kept,
                          match=sc.match, current_part=current_part, peaks_added=added, echo_kept_beyond=kept_beyond)
        )
        s.seen.update(scan.detected)
        s.prev_report = now
        s.scan += 1
        s.calls_this_scan = 0
        self._echo = self._make_echo()
        info = {"advanced": True, "error": None, "scan": s.scan, "reward": reward, "occ": sc.occ,
                "avail": sc.avail, "match": sc.match, "skipped": skipped}
        return self.observation(), reward, self.done, False, info

    def _half_width(self) -> float:
        """Half a reported region's width: how near a centre must be to a peak to be that peak's."""
        return 0.5 * (self.preset.report_width or self.preset.default_width)

    def _current_part(self, scan: Scan, centres: list[float], widths: list[float], reward: float) -> float:
        """The reward of the report restricted to its centres within half a region width of one of this scan's
        peaks: what the scan alone could have told. ``reward - current_part`` is ``beyond_current``."""
        s = self._s
        assert s is not None
        half = self._half_width()
        peaks = sorted(p.freq for p in scan.peaks)
        keep = [i for i, c in enumerate(centres) if _near(peaks, c, half)]
        if len(keep) == len(centres):
            return reward
        cs, ws = [centres[i] for i in keep], [widths[i] for i in keep]
        sub = sr.score_scan(sr.report_intervals(cs, ws, s.episode.band), s.truth_merged, s.episode.band,
                            centres=cs, truth=s.truth_intervals)
        return self.config.reward_def.score(sub)

    def _make_echo(self) -> list[float] | None:
        """The memory echo for the open scan, by the memory mode's echo rule (the previous report, or the
        control's seeded random centres of the same count); None without one or on the first scan."""
        s = self._s
        rule = self.config.memory.echo
        if s is None or rule is None or s.echo_rng is None or s.scan == 0 or s.scan >= self.n_scans:
            return None
        return rule(s.prev_report, s.episode.band, s.echo_rng)


# --------------------------------------------------------------------------------------------------
# Dataset rows -> environments (the row's config and seed: spectrum_rft.task.rows)
# --------------------------------------------------------------------------------------------------


def env_for_row(row_id: str, dataset_info: dict[str, Any] | None) -> tuple[SpectrumEnv, int]:
    """A fresh env for one rollout of a row, and the seed to reset it with (both rollout paths; the
    row's config and seed: :func:`spectrum_rft.task.rows.row_episode`)."""
    config, seed = row_episode(row_id, dataset_info)
    return SpectrumEnv(config), seed
