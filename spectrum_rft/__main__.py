"""``python -m spectrum_rft <command>``: the same as the ``spectrum-rft`` command."""

from spectrum_rft.tools.cli import main

raise SystemExit(main())
