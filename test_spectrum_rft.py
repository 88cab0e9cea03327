"""Evaluation entry of the McpGym path: ``pytest test_spectrum_rft.py::test_spectrum_rft``.

eval-protocol's ``MCPGymRolloutProcessor`` machinery (via :class:`spectrum_mcp_processor.
SpectrumMcpRolloutProcessor`) starts ``spectrum_server.py`` (absolute path, one shared server per
process) and drives it: the scans arrive as tool results, ``submit_report`` / ``notepad_*`` are MCP tools,
and the per-scan rewards come back from the server as data. The default model is the scripted
``spectrum/accumulate`` baseline, so the entry runs offline with no key; switch models with
``--ep-completion-params '{"model": "accounts/fireworks/models/qwen3-8b", "use_caching": false}'`` and
datasets with ``--ep-jsonl-path``. Same ``EvaluateResult`` as ``test_spectrum_turn.py``.
"""

from pathlib import Path

from eval_protocol.models import EvaluationRow
from eval_protocol.pytest import evaluation_test

from make_spectrum_dataset import dataset_adapter
from spectrum_eval_result import evaluate_row
from spectrum_mcp_processor import SERVER_SCRIPT, SpectrumMcpRolloutProcessor

DATASET = Path(__file__).resolve().parent / "data" / "spectrum_default16.jsonl"
# Tool calls per rollout: 12 scans x (up to 4 model calls per scan, a notepad read + write + report each),
# so the env's own call budget, not eval-protocol's step cap, decides when a scan is given up.
STEPS = 12 * 4 * 3


@evaluation_test(
    input_dataset=[str(DATASET)],
    dataset_adapter=dataset_adapter,
    completion_params=[{"model": "spectrum/accumulate", "temperature": 0.0, "use_caching": False}],
    rollout_processor=SpectrumMcpRolloutProcessor(),
    rollout_processor_kwargs={"server_mode": "shared"},
    server_script_path=SERVER_SCRIPT,
    steps=STEPS,
    mode="pointwise",
    num_runs=1,
    max_concurrent_rollouts=32,
)
def test_spectrum_rft(row: EvaluationRow) -> EvaluationRow:
    """Score = the row's configured reward, averaged over every scan (skipped scans count as empty
    reports); metrics = every environment metric; step_outputs = one reward per scan."""
    return evaluate_row(row)
