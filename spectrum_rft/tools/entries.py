"""The two evaluation entries at the project root (what ``eval_protocol upload`` and the cloud run)."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# rollout path -> (entry file at the project root, test function)
ENTRIES: dict[str, tuple[str, str]] = {
    "turn": ("test_spectrum_turn.py", "test_spectrum_turn"),  # in-process SpectrumTurnRolloutProcessor
    "mcp": ("test_spectrum_rft.py", "test_spectrum_rft"),  # McpGym server + our MCP client
}


def entry_spec(path: str) -> str:
    """``file.py::test_fn`` of a rollout path's entry (pytest / ``eval_protocol upload --entry``)."""
    file, fn = ENTRIES[path]
    return f"{file}::{fn}"
