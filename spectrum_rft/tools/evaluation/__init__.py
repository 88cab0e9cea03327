"""``spectrum-rft eval``: run the evaluator offline on baseline policies or a model, with eval-protocol.

    spectrum-rft eval                                     # the ladder memoryless < accumulate < oracle, 16 rows
    spectrum-rft eval --path mcp --rows 8                 # the same through the McpGym path
    spectrum-rft eval --model local --rows 2              # SmolLM2-135M served by llama.cpp on 127.0.0.1
    spectrum-rft eval --model openai/qwen3 --api-base http://127.0.0.1:8000/v1 --tool-choice auto

How a run is made (and why): for every model, the evaluation entry itself
(``test_spectrum_turn.py::test_spectrum_turn`` or ``test_spectrum_rft.py::test_spectrum_rft``) is run by
pytest in a child process with eval-protocol's own flags: ``--ep-completion-params`` (the model),
``--ep-jsonl-path`` (a dataset written by :func:`spectrum_rft.rollouts.dataset.make_rows`), ``--ep-max-rows``,
``--ep-max-concurrent-rollouts`` and ``--ep-output-dir``, where eval-protocol persists every finished
row (EvaluationRow JSON with ``evaluation_result`` and ``execution_metadata.extra``). That is exactly
what the Fireworks cloud executes: the entry's own decorator configuration (rollout processor, its
kwargs, the MCP server script, ``steps``, dataset adapter) and its own scoring, with eval-protocol's
retries. Nothing here re-implements a rollout or a score, so the two cannot drift apart; a child
process per model also keeps eval-protocol's environment-variable configuration (its pytest plugin
writes ``os.environ``) out of this process and isolates a crashing model. The cost is ~3 s of imports
per model, which the 2-minute budget of the default ladder absorbs.

The progress bar follows eval-protocol's rollout bar in the child's output (rows done per model); if
that format ever changes, the bar degrades to per-model progress, never to a failure.

Results go under ``--out`` (default ``runs/eval/<path>-<time>``): ``dataset.jsonl`` (the input rows),
``rows.jsonl`` (every scored EvaluationRow), ``summary.json``, ``per_scan_reward.png`` and
``pytest.log`` (the child's pytest output). While the run goes, every row the child scores is appended to
``rows.partial.jsonl`` there (flushed and fsynced as it is scored, labelled with its model); it becomes
``rows.jsonl`` when the run ends and is then removed. Nothing goes to the system temp folder: the child's
output and temp folders are ``--out/.eval-work``, removed when the child is done.

When a run goes wrong:

* **A model that never answered.** Under the table: ``errors`` and the dominant ``cause`` per model
  (``extra["spectrum_rollout"]["model_failure"]["cause"]`` when the rollout processor recorded it, else
  classified from the error row's status message: eval-protocol's own errors), and a fault summary (the
  most frequent environment fault kinds, scans skipped of all scans; totals in ``summary.json``). A model
  whose every row errored, whose every scan was skipped, or whose scans were mostly skipped because its
  requests failed (:func:`spectrum_rft.rollouts.failures.no_result`) has no result: one line naming the cause
  and the log comes before the table, its row says FAILED with no figure, ``summary.json`` has ``failed`` and
  no metric or curve, the plot leaves it out, and the run exits 1; more than half of a model's scans skipped
  is a WARNING.
* **Stopped runs** (``--timeout``, Ctrl-C, SIGTERM, SIGHUP, a watchdog of :func:`run_eval`): the child's
  process group is stopped and every row that finished is kept: rows.jsonl and summary.json are written
  (``stopped``, ``signal``, ``cut_off``, per model ``rows_unfinished``). eval-protocol persists an item's
  rows only when the whole item has finished, so the child streams each row as the entry scores it
  (:func:`.plugin.pytest_configure`). Exit 1 (timeout, watchdog), 130 (Ctrl-C), 143/129 (SIGTERM/SIGHUP):
  one line saying where the rows are and that ``--resume`` goes on.
* **Killed runs** (``kill -9``, an OOM kill, a reboot): the finished rows are in ``rows.partial.jsonl``;
  ``--resume`` keeps them and runs the rest. The child polls its parent and ends its whole process group
  (itself and the MCP server) once the parent is gone.

The package, one job per module (each imports only the ones above it in this list):

* :mod:`.specs`     model names -> :class:`ModelSpec` (label, completion params, privileged, local)
* :mod:`.plugin`    the child's pytest plugin (``-p spectrum_rft.tools.evaluation.plugin``): item marks, row stream
* :mod:`.progress`  the progress bar
* :mod:`.rows`      the run's row stream: read back, the first row of each id per model
* :mod:`.runner`    the pytest child: environment, command, process group, watchdogs, tqdm-fed progress
* :mod:`.summary`   rows -> metrics, per-scan curve, error causes, faults, skipped scans
* :mod:`.render`    the table, the fault summary, skip warnings, the per-scan plot
* :mod:`.cli`       the parser, :func:`run_eval`, :func:`report`, :func:`main`
"""

from __future__ import annotations

from spectrum_rft.tools.entries import PROJECT_ROOT
from spectrum_rft.tools.evaluation.cli import build_parser, main, out_problem, report, run_eval, write_dataset
from spectrum_rft.tools.evaluation.plugin import MODELS_ENV, PARENT_ENV, STREAM_ENV, STREAM_FILE
from spectrum_rft.tools.evaluation.progress import Progress
from spectrum_rft.tools.evaluation.render import (format_fault_summary, format_table, plot_per_scan,
                                                  skip_warnings)
from spectrum_rft.tools.evaluation.rows import first_of_each, load_streamed_rows
from spectrum_rft.tools.evaluation.runner import (OFFLINE_ENV, WATCHDOG_POLL_S, WORK_DIR, EvalError, ModelsRun, Stop,
                                                  Watchdog, child_env, entry_command, run_models)
from spectrum_rft.tools.evaluation.specs import (DEFAULT_LADDER, PATH_PARAM_DEFAULTS, POLICY_PREFIX, PRIVILEGED,
                                                 ModelSpec, model_specs)
from spectrum_rft.tools.evaluation.summary import (FAILURE_CAUSES, METRICS, MODEL_FAILURE, classify_failure_text,
                                                   error_cause, fault_group, is_error_row, per_scan_rewards,
                                                   row_faults, row_metric, row_scans, summarize)

ROOT = PROJECT_ROOT  # the evaluation entries live there

__all__ = [
    "DEFAULT_LADDER", "FAILURE_CAUSES", "METRICS", "MODEL_FAILURE", "OFFLINE_ENV", "PATH_PARAM_DEFAULTS",
    "MODELS_ENV", "PARENT_ENV", "POLICY_PREFIX", "PRIVILEGED", "ROOT", "STREAM_ENV", "STREAM_FILE", "WATCHDOG_POLL_S",
    "WORK_DIR", "EvalError", "ModelSpec", "ModelsRun", "Progress", "Stop", "Watchdog", "build_parser", "child_env",
    "classify_failure_text", "entry_command", "error_cause", "fault_group", "first_of_each", "format_fault_summary",
    "format_table", "is_error_row", "load_streamed_rows", "main", "model_specs", "out_problem", "per_scan_rewards",
    "plot_per_scan", "report", "row_faults", "row_metric", "row_scans", "run_eval", "run_models", "skip_warnings",
    "summarize", "write_dataset",
]
