"""Evaluation entry of the in-process path: ``pytest test_spectrum_turn.py::test_spectrum_turn``.

Scans arrive as user messages and the model answers with tool calls, executed in-process by
:class:`spectrum_rft.rollouts.turn.SpectrumTurnRolloutProcessor` (no MCP server). The default model is the
scripted ``spectrum/accumulate`` baseline, so the entry runs offline with no key; switch models with
``--ep-completion-params '{"model": "accounts/fireworks/models/qwen3-8b"}'`` (or a local server:
``'{"model": "openai/x", "api_base": "http://127.0.0.1:8000/v1", "tool_choice": "auto"}'`` with
``OPENAI_API_KEY=dummy``), and datasets with ``--ep-jsonl-path`` (raw or EvaluationRow rows).
"""

from pathlib import Path

from eval_protocol.models import EvaluationRow
from eval_protocol.pytest import evaluation_test

from spectrum_rft.baselines.policy_models import prepare
from spectrum_rft.rollouts.dataset import dataset_adapter
from spectrum_rft.rollouts.row_result import evaluate_row
from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor

DATASET = Path(__file__).resolve().parent / "data" / "spectrum_default16.jsonl"


@evaluation_test(
    input_dataset=[str(DATASET)],
    dataset_adapter=dataset_adapter,
    completion_params=[{"model": "spectrum/accumulate"}],
    rollout_processor=SpectrumTurnRolloutProcessor(prepare_model=prepare),  # registers spectrum/<policy>
    mode="pointwise",
    num_runs=1,
    max_concurrent_rollouts=32,
)
def test_spectrum_turn(row: EvaluationRow) -> EvaluationRow:
    """Score = the row's configured reward, averaged over every scan (skipped scans count as empty
    reports); metrics = every environment metric; step_outputs = one reward per scan."""
    return evaluate_row(row)
