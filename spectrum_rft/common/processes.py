"""Child processes and ports: the one implementation every server and runner uses (stdlib only)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

# How much of a child's log an error message quotes (its last characters).
LOG_TAIL_CHARS = 3000


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Terminate, then kill after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace)


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_process_group(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """Stop a child started with ``start_new_session=True`` and everything in its process group:
    SIGTERM, then SIGKILL after ``grace`` seconds. A no-op when the group is already gone."""
    pgid = proc.pid
    if proc.poll() is None or group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (proc.poll() is None or group_alive(pgid)):
            time.sleep(0.1)
        if proc.poll() is None or group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait()


def log_tail(path: Path, n: int = LOG_TAIL_CHARS) -> str:
    """The end of a child process's log for an error message: its last ``n`` bytes as text, or
    ``"(no server output)"`` when there is none (or it cannot be read)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return "(no server output)"
    return data[-n:].decode("utf-8", "replace").strip() or "(no server output)"
