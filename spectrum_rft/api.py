"""spectrum-rft's public API in one module: what a researcher imports to make rows, play and score episodes, attack
a reward with scripted policies, train on TRL, and add a memory mode, a reward or a model engine.

    from spectrum_rft.api import EnvConfig, SpectrumEnv, make_rows, play, make_policy

Each name is defined once, in its room (the table below: ``docs/ARCHITECTURE.md`` says what each room is), and
imported from there the first time it is used, so ``import spectrum_rft.api`` loads nothing heavy (no torch,
eval-protocol or litellm until a name that needs them is touched). Names elsewhere in the package are internal
and may move; these are the ones to build on.

To add one (each an entry in its table; ``docs/ARCHITECTURE.md``, "Where to add things"):

* a memory mode: a :class:`MemoryMode` in :data:`MODES`;
* a reward: a :class:`Reward` (with its :class:`AuditBars`) in :data:`REWARD_TABLE`;
* a model engine for ``serve-hf`` and ``scan-eval``: :func:`register_engine` with an :class:`EngineKind`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it (its room)
_HOME: dict[str, str] = {
    # task: the environment and its rules
    "EnvConfig": "spectrum_rft.task.config",
    "SpectrumEnv": "spectrum_rft.task.environment",
    "env_for_row": "spectrum_rft.task.environment",
    "tool_schemas": "spectrum_rft.task.instructions",
    "render_system_prompt": "spectrum_rft.task.instructions",
    "MemoryMode": "spectrum_rft.task.memory",
    "MODES": "spectrum_rft.task.memory",
    "memory_mode": "spectrum_rft.task.memory",
    "Reward": "spectrum_rft.task.reward",
    "AuditBars": "spectrum_rft.task.reward",
    "REWARD_TABLE": "spectrum_rft.task.reward",
    "reward_of": "spectrum_rft.task.reward",
    "EPISODE_METRICS": "spectrum_rft.task.reward",
    "PRESETS": "spectrum_rft.task.presets",
    "get_preset": "spectrum_rft.task.presets",
    "parse_scan": "spectrum_rft.task.scan_format",
    # rollouts: rows, the episode driver, the evaluator's two transports, the row result
    "make_rows": "spectrum_rft.rollouts.dataset",
    "dataset_adapter": "spectrum_rft.rollouts.dataset",
    "InProcessEpisode": "spectrum_rft.rollouts.episode",
    "play": "spectrum_rft.rollouts.driver",
    "SpectrumTurnRolloutProcessor": "spectrum_rft.rollouts.turn",
    "SpectrumMcpRolloutProcessor": "spectrum_rft.rollouts.mcp_client",
    "SpectrumServer": "spectrum_rft.rollouts.mcp_client",
    "evaluate_row": "spectrum_rft.rollouts.row_result",
    # baselines: scripted policies and the reward audit
    "make_policy": "spectrum_rft.baselines.policies",
    "audit": "spectrum_rft.baselines.audit",
    "audit_checks": "spectrum_rft.baselines.audit",
    # training: the TRL adapter, evaluation's model engines
    "SpectrumToolEnv": "spectrum_rft.training.spectrum.trl_env",
    "tool_env_class": "spectrum_rft.training.spectrum.trl_env",
    "Engine": "spectrum_rft.training.spectrum.engines",
    "EngineKind": "spectrum_rft.training.spectrum.engines",
    "register_engine": "spectrum_rft.training.spectrum.engines",
    "make_engine": "spectrum_rft.training.spectrum.engines",
}

__all__ = sorted(_HOME)

if TYPE_CHECKING:  # what a type checker and an editor see; at run time each name is imported on first use
    from spectrum_rft.baselines.audit import audit, audit_checks
    from spectrum_rft.baselines.policies import make_policy
    from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows
    from spectrum_rft.rollouts.driver import play
    from spectrum_rft.rollouts.episode import InProcessEpisode
    from spectrum_rft.rollouts.mcp_client import SpectrumMcpRolloutProcessor, SpectrumServer
    from spectrum_rft.rollouts.row_result import evaluate_row
    from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor
    from spectrum_rft.task.config import EnvConfig
    from spectrum_rft.task.environment import SpectrumEnv, env_for_row
    from spectrum_rft.task.instructions import render_system_prompt, tool_schemas
    from spectrum_rft.task.memory import MODES, MemoryMode, memory_mode
    from spectrum_rft.task.presets import PRESETS, get_preset
    from spectrum_rft.task.reward import EPISODE_METRICS, REWARD_TABLE, AuditBars, Reward, reward_of
    from spectrum_rft.task.scan_format import parse_scan
    from spectrum_rft.training.spectrum.engines import Engine, EngineKind, make_engine, register_engine
    from spectrum_rft.training.spectrum.trl_env import SpectrumToolEnv, tool_env_class


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"spectrum_rft.api has no {name!r}; its names: {', '.join(__all__)}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
