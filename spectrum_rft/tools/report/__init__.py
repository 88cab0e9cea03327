"""``spectrum-rft report``: a model-by-model table of evaluated rows (one eval folder or several), and
per-epoch analysis where the rows span epochs (usage: :mod:`.cli`, docs/LAUNCH.md).

One module per job, imports pointing down the list:

* :mod:`.validate`  one EvaluationRow JSON object -> :class:`~.validate.Rollout` (or a located error)
* :mod:`.load`      JSONL files/folders and eval-protocol's sqlite store -> runs; split by model, dedupe
* :mod:`.stats`     least-squares fit with R^2, standard error
* :mod:`.checks`    group integrity and freshness checks
* :mod:`.table`     the model table (means ± SE over rows), per-scan curves, paired differences on shared bands
* :mod:`.heldout`   a job's held-out evaluation rows: placed by training epoch, figures, control comparison
* :mod:`.analysis`  x-axis, per-epoch means, trends, control comparison, the report dict
* :mod:`.render`    text and PNG
* :mod:`.cli`       argparse -> load -> report -> output
"""

from .cli import main

__all__ = ["main"]
