"""The in-process rollout path: the rollout processor (:mod:`spectrum_rft.rollouts.loop`) over the env itself.

Scans arrive as user messages (on the MCP path: in tool results), the model answers with tool calls, :class:`SpectrumEnv` (in this process)
judges them. The loop, its retry and failure rules and the row it fills are the MCP path's too.

Where the time goes (``bench/bench_turn.py``): litellm's request/response path dominates; the env, the
window and the bookkeeping here are a small fraction of a millisecond per scan.
"""

from __future__ import annotations

from eval_protocol.models import EvaluationRow
from eval_protocol.pytest.types import RolloutProcessorConfig

from spectrum_rft.rollouts.loop import SpectrumRolloutProcessor, in_process_episode


class SpectrumTurnRolloutProcessor(SpectrumRolloutProcessor):
    """In-process rollouts of the spectrum task (arguments: :class:`SpectrumRolloutProcessor`)."""

    transport = "turn"

    def episode(self, row: EvaluationRow, config: RolloutProcessorConfig):
        return in_process_episode(row)
