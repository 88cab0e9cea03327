"""Evaluation entry of the MCP path: ``pytest test_spectrum_rft.py::test_spectrum_rft``.

:class:`spectrum_rft.rollouts.mcp_client.SpectrumMcpRolloutProcessor` starts the spectrum MCP server
(``SERVER_SCRIPT`` = ``spectrum_rft/rollouts/server_main.py``, which the root's ``spectrum_server.py`` also
runs; an eval-protocol ``McpGym``; absolute path, one shared server per process, stopped by the processor's
``cleanup()``) and runs the project's one rollout loop over an MCP connection per rollout: every tool call
is one MCP call, the server's env judges it, the per-scan rewards come back as data. The default model is
the scripted ``spectrum/accumulate`` baseline (registered by ``prepare_model``), so the entry runs offline
with no key; switch models with ``--ep-completion-params '{"model": "accounts/fireworks/models/qwen3-8b"}'``
and datasets with ``--ep-jsonl-path``. Same rollout and same ``EvaluateResult`` as ``test_spectrum_turn.py``.
"""

from pathlib import Path

from eval_protocol.models import EvaluationRow
from eval_protocol.pytest import evaluation_test

from spectrum_rft.baselines.policy_models import prepare
from spectrum_rft.rollouts.dataset import dataset_adapter
from spectrum_rft.rollouts.mcp_client import SERVER_SCRIPT, SpectrumMcpRolloutProcessor
from spectrum_rft.rollouts.row_result import evaluate_row

DATASET = Path(__file__).resolve().parent / "data" / "spectrum_default16.jsonl"


@evaluation_test(
    input_dataset=[str(DATASET)],
    dataset_adapter=dataset_adapter,
    completion_params=[{"model": "spectrum/accumulate", "temperature": 0.0}],
    rollout_processor=SpectrumMcpRolloutProcessor(prepare_model=prepare),  # registers spectrum/<policy>
    rollout_processor_kwargs={"server_mode": "shared"},
    server_script_path=SERVER_SCRIPT,
    mode="pointwise",
    num_runs=1,
    max_concurrent_rollouts=32,
)
def test_spectrum_rft(row: EvaluationRow) -> EvaluationRow:
    """Score = the row's configured reward, averaged over every scan (skipped scans count as empty
    reports); metrics = every environment metric; step_outputs = one reward per scan."""
    return evaluate_row(row)
