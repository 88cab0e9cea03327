"""``python -m spectrum_rft.tools.evaluation``: the same as ``spectrum-rft eval``."""

from spectrum_rft.tools.evaluation.cli import main

raise SystemExit(main())
