"""Serve the spectrum McpGym (:mod:`spectrum_rft.rollouts.mcp_server`) over streamable HTTP.

    python spectrum_server.py --port 9700 [--host 127.0.0.1] [--parent-pid PID]
                              [--session-idle-s 1800] [--max-sessions 1024]

``SpectrumMcpRolloutProcessor`` (``mcp_client.SpectrumServer``) starts it as ``python <abs path> --port N
--parent-pid <its pid>``. It listens on
127.0.0.1 unless told otherwise (``--host 0.0.0.0`` exposes it to the network). ``--parent-pid`` makes it
exit when that process is gone, so a killed test run never leaves a server behind. ``--session-idle-s`` and
``--max-sessions`` bound its sessions under clients that vanish (``mcp_server.SessionLimits``; 0 turns a
bound off).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path



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


class _DropClosedStreamNoise(logging.Filter):
    """mcp logs a full traceback ("Error in standalone SSE writer", ClosedResourceError) every time a
    client closes its session (DELETE) while the server-to-client stream is open: i.e. after every
    rollout. Benign, and rendering it cost more CPU than the whole rollout. Other errors pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (record.getMessage().startswith("Error in standalone SSE writer")
                    and type(exc).__name__ == "ClosedResourceError")


def quiet_logging(level: str) -> None:
    """Plain, cheap logging for this server process. FastMCP installs rich's handler at INFO (one log
    line per request, tracebacks syntax-highlighted with pygments): the biggest CPU cost of the server."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_DropClosedStreamNoise())
    root.addHandler(handler)
    root.setLevel(level.upper())


def main(argv: list[str] | None = None) -> int:
    # The server never prices a model call: keep litellm (imported by eval_protocol) from fetching its
    # price map over the network at start-up. Set for this server process only.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from spectrum_rft.rollouts.mcp_server import IDLE_S_DEFAULT, MAX_SESSIONS_DEFAULT, SpectrumMcp  # noqa: PLC0415

    ap = argparse.ArgumentParser(prog="spectrum_server.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--preset", default=None, help=argparse.SUPPRESS)  # ignored: each session lists its own row's tools
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process exits")
    ap.add_argument("--session-idle-s", type=float, default=IDLE_S_DEFAULT, metavar="S",
                    help="end a session with no request for S seconds (a client that vanished); must exceed a "
                         "rollout's longest model call with retries; 0: never (default: %(default)s)")
    ap.add_argument("--max-sessions", type=int, default=MAX_SESSIONS_DEFAULT, metavar="N",
                    help="refuse a new session (HTTP 503) while N are live; 0: no cap (default: %(default)s)")
    ap.add_argument("--log-level", default="warning")
    ap.add_argument("--profile", default=None, metavar="PATH", help="write cProfile stats here on shutdown")
    a = ap.parse_args(argv)
    if a.session_idle_s < 0 or a.max_sessions < 0:
        ap.error("--session-idle-s and --max-sessions must be >= 0 (0: off)")
    if a.parent_pid:
        _exit_with_parent(a.parent_pid)
    server = SpectrumMcp(host=a.host, port=a.port, session_idle_s=a.session_idle_s or None,
                         max_sessions=a.max_sessions or None)
    quiet_logging(a.log_level)  # after FastMCP's own logging set-up
    if not a.profile:
        server.run()
        return 0
    import cProfile  # noqa: PLC0415
    import signal  # noqa: PLC0415

    profiler = cProfile.Profile()

    def dump(*_: object) -> None:
        profiler.disable()
        profiler.dump_stats(a.profile)
        os._exit(0)

    # uvicorn re-raises SIGTERM after its graceful shutdown, to the handler it found: this one.
    signal.signal(signal.SIGTERM, dump)
    profiler.enable()
    server.run()
    dump()
    return 0


if __name__ == "__main__":  # started as a script (SERVER_SCRIPT): the project root must be importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    raise SystemExit(main())
