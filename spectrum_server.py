"""Serve the spectrum McpGym (:mod:`spectrum_mcp`) over streamable HTTP.

    python spectrum_server.py --port 9700 [--host 127.0.0.1] [--preset default] [--parent-pid PID]

eval-protocol's ``MCPGymRolloutProcessor`` starts it as ``python <abs path> --port N``. It listens on
127.0.0.1 unless told otherwise (``--host 0.0.0.0`` exposes it to the network). ``--parent-pid`` makes it
exit when that process is gone, so a killed test run never leaves a server behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run from any cwd


def _exit_with_parent(pid: int, interval: float = 1.0) -> None:
    def watch() -> None:
        while True:
            time.sleep(interval)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum_server.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--preset", default="default", help="preset whose band limits the tool descriptions quote")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process exits")
    a = ap.parse_args(argv)
    # The server never prices a model call: keep litellm (imported by eval_protocol) from fetching its
    # price map over the network at start-up. Set for this server process only.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if a.parent_pid:
        _exit_with_parent(a.parent_pid)

    from spectrum_mcp import SpectrumMcp  # noqa: PLC0415

    SpectrumMcp(host=a.host, port=a.port, preset=a.preset).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
