"""The environment (the design card's entry point; the code is :mod:`spectrum_rft.task`).

    from spectrum_adapter import SpectrumEnv, EnvConfig, seed_for_row
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="scaffold", reward="default"))
    obs, info = env.reset(seed=seed_for_row("row-0007"))
"""

from spectrum_rft.task.environment import (AFTER_END, EXTRA_SUBMIT, MEMORY_MODES, PROMPT_VARIANTS, EnvConfig,
                                           InvalidAction, SpectrumEnv, ToolResult, env_for_row, parse_report,
                                           render_system_prompt, row_config, row_seed, tool_schemas)
from spectrum_rft.task.episode import EpisodeDraw, Peak, Preset, Scan
from spectrum_rft.task.presets import PRESETS, RoundRobinPreset, get_preset
from spectrum_rft.task.seeding import resolve_salt, seed_for_row

__all__ = ["AFTER_END", "EXTRA_SUBMIT", "MEMORY_MODES", "PRESETS", "PROMPT_VARIANTS", "EnvConfig", "EpisodeDraw",
           "InvalidAction", "Peak", "Preset", "RoundRobinPreset", "Scan", "SpectrumEnv", "ToolResult", "env_for_row",
           "get_preset", "parse_report", "render_system_prompt", "resolve_salt", "row_config", "row_seed",
           "seed_for_row", "tool_schemas"]
