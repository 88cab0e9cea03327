"""What defines an episode besides its seed: :class:`EnvConfig` (preset, memory mode, reward, prompt
variant, call budget, ...), checked when it is made. It travels with the dataset row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spectrum_rft.task.memory import MEMORY_MODES, MemoryMode
from spectrum_rft.task.memory import memory_mode as get_memory_mode
from spectrum_rft.task.presets import resolve_preset
from spectrum_rft.task.reward import Reward, resolve_reward, reward_of

__all__ = ["MEMORY_MODES", "PROMPT_VARIANTS", "EnvConfig", "default_memory_mode"]
PROMPT_VARIANTS: tuple[str, ...] = ("explicit", "weak", "notepad-vague", "notepad-explicit")


def default_memory_mode(prompt: str) -> str:
    """The memory mode a prompt variant is written for when none is given: the notepad for ``notepad-*``,
    else the scaffold (the echo)."""
    return "notepad" if prompt.startswith("notepad") else "scaffold"


@dataclass(frozen=True)
class EnvConfig:
    """Everything that defines an episode besides its seed. Travels with the dataset row.

    ``preset`` and ``reward`` are stored resolved (``default`` -> ``default-v2`` / ``match_iou``), so a row
    or run records the exact definition it was made with, and a later change of the default never
    changes what an old row means."""

    preset: str = "default"
    memory_mode: str = "scaffold"
    reward: str = "default"
    prompt: str = "explicit"
    think: bool = False  # False appends Qwen3's /no_think to the system prompt
    salt: str = ""
    max_calls_per_scan: int = 4  # model calls per scan before it is skipped (notepad calls count)
    notepad_chars: int = 2000
    carry_tolerance: float = 4.0  # MHz: a previous region is "kept" if a new centre lies this close

    def __post_init__(self) -> None:
        object.__setattr__(self, "preset", resolve_preset(self.preset))
        object.__setattr__(self, "reward", resolve_reward(self.reward))
        get_memory_mode(self.memory_mode)  # a ValueError naming the modes
        if self.prompt not in PROMPT_VARIANTS:
            raise ValueError(f"unknown prompt {self.prompt!r}; choose one of {', '.join(PROMPT_VARIANTS)}")
        if self.max_calls_per_scan < 1:
            raise ValueError("max_calls_per_scan must be >= 1")

    @property
    def memory(self) -> MemoryMode:
        """The memory mode itself (:mod:`spectrum_rft.task.memory`)."""
        return get_memory_mode(self.memory_mode)

    @property
    def reward_def(self) -> Reward:
        """The reward itself (:mod:`spectrum_rft.task.reward`): its scoring function, prompt sentence, audit bars."""
        return reward_of(self.reward)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "EnvConfig":
        """Build from a dataset row's ``dataset_info`` (unknown keys ignored)."""
        d = d or {}
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}
