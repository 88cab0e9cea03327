"""The memory modes: what the model is shown of earlier scans, which tools it has, and the echo rule.

Each mode is one :class:`MemoryMode` in :data:`MODES`; everything that differs between modes reads it from
here (the env's tools and scan text, the system prompt, the window of messages the model is sent, which
episode shapes TRL can train), so a new mode is one entry here and its tests.

* ``none``: the current scan only (the ICL-off window), no memory channel at all.
* ``icl``: the whole conversation (every earlier scan stays in context).
* ``scaffold``: the ICL-off window; each scan after the first repeats the model's previous report (the echo).
* ``scrambled``: the control of ``scaffold``: the echo holds seeded random centres, as many as the previous
  report had.
* ``notepad``: the ICL-off window and two tools, ``notepad_read`` / ``notepad_write``, over a notepad that
  persists across scans.
* ``icl_notepad`` (CLBench's): the ICL-off window; a notepad is shown with every scan, and the model replaces
  it through ``submit_report``'s ``notepad_update`` field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

# An echo rule: (the previous report's sorted centres, the band, the episode's echo stream) -> the centres
# the next scan repeats. The stream is drawn from the episode's seed (the env: ``[seed, 0x5C4A]``).
EchoRule = Callable[[list[float], tuple[float, float], np.random.Generator], list[float]]


def previous_report(prev: list[float], band: tuple[float, float], rng: np.random.Generator) -> list[float]:
    """The scaffold's echo: the previous report, to 0.1 MHz."""
    return [round(c, 1) for c in prev]


def scrambled_report(prev: list[float], band: tuple[float, float], rng: np.random.Generator) -> list[float]:
    """The control's echo: as many centres as the previous report, uniform over the band, seeded."""
    lo, hi = band
    return sorted(round(float(x), 1) for x in rng.uniform(lo, hi, size=len(prev)))


# The modes other layers name, so that no rule outside task/ spells one (tests/test_layers.py refuses that):
NO_MEMORY = "none"  # no memory channel at all
REAL_ECHO, CONTROL_ECHO = "scaffold", "scrambled"  # the evidence runs' two arms: the real echo and its control
TOOL_SETS: tuple[str, ...] = ("report", "notepad", "notepad_update")  # the values of MemoryMode.tool_set


@dataclass(frozen=True)
class MemoryMode:
    """One memory mode (the module docstring lists them)."""

    name: str
    history: bool = False  # the model is sent every earlier scan (else: the ICL-off window, the current scan)
    echo: EchoRule | None = None  # what each scan after the first repeats as "Your previous report"
    notepad_tools: bool = False  # notepad_read / notepad_write over a notepad that persists across scans
    notepad_in_scan: bool = False  # the notepad shown with every scan, replaced through notepad_update

    @property
    def memory_in_scan_text(self) -> bool:
        """Whether all the mode remembers travels in the scan text (nothing written by the model, no
        history): one scan of an episode can then be trained on its own, its earlier scans played for it."""
        return not (self.history or self.notepad_tools or self.notepad_in_scan)

    @property
    def tool_set(self) -> str:
        """The tools of the mode: ``report`` (``submit_report``), ``notepad`` (+ ``notepad_read`` /
        ``notepad_write``) or ``notepad_update`` (``submit_report`` with a ``notepad_update`` field)."""
        report, notepad, notepad_update = TOOL_SETS
        return notepad if self.notepad_tools else notepad_update if self.notepad_in_scan else report


MODES: dict[str, MemoryMode] = {m.name: m for m in (
    MemoryMode(NO_MEMORY),
    MemoryMode("icl", history=True),
    MemoryMode("notepad", notepad_tools=True),
    MemoryMode(REAL_ECHO, echo=previous_report),
    MemoryMode(CONTROL_ECHO, echo=scrambled_report),
    MemoryMode("icl_notepad", notepad_in_scan=True),
)}

MEMORY_MODES: tuple[str, ...] = tuple(MODES)  # the built-in modes' names (command-line choices)

def memory_mode(name: str) -> MemoryMode:
    """The mode called ``name``; a ValueError naming the choices otherwise."""
    mode = MODES.get(name) if isinstance(name, str) else None
    if mode is None:
        raise ValueError(f"unknown memory_mode {name!r}; choose one of {', '.join(MODES)}")
    return mode
