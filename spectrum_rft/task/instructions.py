"""What the model is told before its first scan, from the config alone: the system prompt and the tool
schemas (OpenAI function calling). The single definition every path (both rollout transports, TRL, the
verifiers environment, the baselines) hands the model."""

from __future__ import annotations

from typing import Any

from spectrum_rft.task import scan_format
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.memory import memory_mode as get_memory_mode
from spectrum_rft.task.presets import get_preset


def tool_schemas(memory_mode: str, preset: str = "default") -> list[dict]:
    """OpenAI function-calling schemas for a memory mode (its tools: :attr:`MemoryMode.tool_set`). The single
    definition every path uses."""
    mode = get_memory_mode(memory_mode)
    p = get_preset(preset)
    lo, hi = p.band
    report_props: dict[str, Any] = {
        "center_freqs": {
            "type": "array",
            "items": {"type": "number", "minimum": lo, "maximum": hi},  # the band: what actions.parse_report accepts
            "maxItems": p.max_regions,
            "description": f"Centre frequency in MHz of every occupied region ({lo:g}-{hi:g} MHz, at most "
            f"{p.max_regions}).",
        },
    }
    if p.report_width is None:  # a preset that fixes the width has no such field (actions.parse_report ignores it)
        report_props["bandwidths"] = {
            "type": "array",
            "items": {"type": "number", "exclusiveMinimum": 0, "maximum": hi - lo},
            "maxItems": p.max_regions,
            "description": f"Optional: bandwidth in MHz of each region (more than 0, at most {hi - lo:g} MHz), "
            f"same length as center_freqs (at most {p.max_regions}).",
        }
    if mode.notepad_in_scan:
        report_props["notepad_update"] = {
            "type": "string",
            "description": "Optional: replaces your notepad, which is shown to you with every later scan "
            "(your only memory across scans).",
        }
    tools = [
        {
            "type": "function",
            "function": {
                "name": "submit_report",
                "description": "Report the occupied regions of the band for the current scan. Ends the scan.",
                "parameters": {"type": "object", "properties": report_props, "required": ["center_freqs"]},
            },
        }
    ]
    if mode.notepad_tools:
        tools += [
            {
                "type": "function",
                "function": {
                    "name": "notepad_read",
                    "description": "Read your notepad. It persists across scans.",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "notepad_write",
                    "description": "Replace the whole notepad with `text` (it persists across scans).",
                    "parameters": {
                        "type": "object",
                        "properties": {"text": {"type": "string", "description": "The new notepad content."}},
                        "required": ["text"],
                    },
                },
            },
        ]
    return tools


def render_system_prompt(config: EnvConfig) -> str:
    """The system prompt of an episode (the text: :func:`spectrum_rft.task.scan_format.render_system_prompt`)."""
    p = get_preset(config.preset)
    return scan_format.render_system_prompt(variant=config.prompt, memory=config.memory, band=p.band,
                                            n_scans=p.n_scans, max_regions=p.max_regions,
                                            report_width=p.report_width, reward=config.reward_def, think=config.think)
