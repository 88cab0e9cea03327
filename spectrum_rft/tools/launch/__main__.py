"""``python -m spectrum_rft.tools.launch`` (same as ``spectrum-rft launch``)."""

from .cli import main

raise SystemExit(main())
