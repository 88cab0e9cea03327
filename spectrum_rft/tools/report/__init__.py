"""``spectrum-rft report``: per-epoch analysis of evaluated rows (usage: :mod:`.cli`, docs/LAUNCH.md).

One module per job, imports pointing down the list:

* :mod:`.validate`  one EvaluationRow JSON object -> :class:`~.validate.Rollout` (or a located error)
* :mod:`.load`      JSONL files/folders and eval-protocol's sqlite store -> runs; split by model, dedupe
* :mod:`.stats`     least-squares fit with R^2, standard error
* :mod:`.checks`    group integrity and freshness checks
* :mod:`.analysis`  x-axis, per-epoch means, trends, control comparison, the report dict
* :mod:`.render`    text and PNG
* :mod:`.cli`       argparse -> load -> report -> output
"""

from .cli import main

__all__ = ["main"]
