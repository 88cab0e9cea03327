"""Serve the spectrum McpGym over streamable HTTP (the design card's entry point; the code is
:mod:`spectrum_rft.rollouts.server_main`).

    python spectrum_server.py --port 9700 [--host 127.0.0.1] [--parent-pid PID]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run from any cwd (eval-protocol starts it by path)

from spectrum_rft.rollouts.server_main import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
