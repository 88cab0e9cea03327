"""``spectrum-rft launch``: one Fireworks RFT job per experiment arm (usage: :mod:`.cli`, docs/LAUNCH.md).

One module per job, imports pointing down the list:

* the experiment arms: :mod:`spectrum_rft.task.arms` (shared with `spectrum-rft train`)
* :mod:`.options`  :class:`LaunchOptions` (typed flags), defaults, :class:`LaunchError`
* :mod:`.ids`      resource ids, .env key names, secret redaction (logs and request bodies)
* :mod:`.tarball`  the evaluator source tarball: files git tracks, of the allowlist; refuses secrets
* :mod:`.plan`     :func:`build_plan`: options -> every id, row and request body (writes nothing)
* :mod:`.execute`  the three steps through the fireworks-ai SDK, what exists after a failure
* :mod:`.dryrun`   the same steps over an in-process transport; every uploaded file; the firectl lines
* :mod:`.cli`      argparse -> options -> plan -> dry run or launch
"""

from .cli import main

__all__ = ["main"]
