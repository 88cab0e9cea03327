"""``python -m spectrum_rft.tools.report`` (same as ``spectrum-rft report``)."""

from .cli import main

raise SystemExit(main())
