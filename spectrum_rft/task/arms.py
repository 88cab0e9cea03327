"""The experiment arms: the dataset options that differ between arms (everything else equal). Used by
`spectrum-rft launch` (Fireworks) and `spectrum-rft train` (TRL)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arm:
    """A named experiment arm: its prompt variant and memory mode."""

    name: str
    prompt: str
    memory_mode: str
    summary: str


ARMS: dict[str, Arm] = {a.name: a for a in (
    Arm("explicit-scaffold", "explicit", "scaffold", "explicit memory instruction + env echo of the previous report"),
    Arm("weak-scaffold", "weak", "scaffold", "weak instruction + real echo (the arm with room to learn)"),
    Arm("scrambled-control", "explicit", "scrambled", "control: echo of seeded random content of the same size"),
    Arm("weak-scrambled", "weak", "scrambled", "control matched to weak-scaffold"),
    Arm("notepad", "notepad-explicit", "notepad", "agent-managed notepad tools, ICL-off window"),
    Arm("icl", "explicit", "icl", "full history in context (no memory aid)"),
    Arm("icl-notepad", "notepad-explicit", "icl_notepad", "CLBench's icl_notepad: notepad field in submit_report"),
    Arm("memoryless", "explicit", "none", "ICL-off window, no memory channel at all"),
)}
