"""``spectrum-rft launch``: one Fireworks RFT job per experiment arm (usage: :mod:`.cli`, docs/LAUNCH.md).

One module per job, imports pointing down the list:

* the experiment arms: :mod:`spectrum_rft.task.arms` (shared with `spectrum-rft train`)
* :mod:`.options`  :class:`LaunchOptions` (typed flags), defaults, the checks before any request, :class:`LaunchError`
* :mod:`.ids`      resource ids, resource names (job_ref), .env key names, secret redaction (logs and request bodies)
* :mod:`.tarball`  the evaluator source tarball: files git tracks, of the allowlist; refuses secrets
* :mod:`.heldout`  the held-out evaluation rows: salt, prefix, band fingerprints (the split
                   marker is a row's: spectrum_rft.rollouts.dataset)
* :mod:`.context`  what one windowed episode of the arm needs of the context
* :mod:`.plan`     :func:`build_plan`: options -> every id, row and request body (writes nothing)
* :mod:`.execute`  the steps through the fireworks-ai SDK, what exists after a failure
* :mod:`.dryrun`   the same steps over an in-process transport; every uploaded file; firectl and eval-protocol lines
* :mod:`.follow`   ``--status`` / ``--resume`` of a job through the SDK
* :mod:`.cli`      argparse -> options -> plan -> dry run or launch
"""

from .cli import main

__all__ = ["main"]
