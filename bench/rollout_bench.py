"""What the two rollout-path benches share (bench/bench_turn.py, bench/bench_mcp.py): the loopback model
server, CPU seconds of another process, a row logger that does nothing, the offline settings, and running
a measurement under a profiler."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
OFFLINE = {"OPENAI_API_KEY": "dummy",  # the loopback server ignores it; litellm wants one
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "EP_NO_UPLOAD": "1"}


def parser(description: str) -> argparse.ArgumentParser:
    """The options both benches take: rows, concurrency, memory mode, the loopback model's policy."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=96)
    ap.add_argument("--memory-mode", default="scaffold")
    ap.add_argument("--policy", default="accumulate")
    return ap


def set_offline() -> None:
    """The offline settings, for this bench process only (called from ``main``, never at import)."""
    for k, v in OFFLINE.items():
        os.environ.setdefault(k, v)


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of another process (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def start_loopback(policy: str) -> tuple[subprocess.Popen, int]:
    """The instantly answering loopback chat server (``tests/loopback_llm.py``) playing ``policy``."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "loopback_llm.py"), "--port", "0",
                             "--policy", policy], stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"loopback server did not start: {line!r}")
    return proc, int(line.split()[1])


def null_logger() -> Any:
    """An eval-protocol row logger that logs nothing."""
    from eval_protocol.dataset_logger.dataset_logger import DatasetLogger  # noqa: PLC0415

    class NullLogger(DatasetLogger):
        def log(self, row):
            return None

        def read(self, rollout_id=None):
            return []

    return NullLogger()


def run_profiled(run: Callable[[], Awaitable[Any]], profile: str | None) -> tuple[Any, Any]:
    """``asyncio.run(run())`` under ``profile`` (None, ``"cprofile"`` or ``"pyinstrument"``); (its result,
    the profiler or None)."""
    if profile == "cprofile":
        import cProfile  # noqa: PLC0415

        profiler = cProfile.Profile()
        profiler.enable()
        try:
            return asyncio.run(run()), profiler
        finally:
            profiler.disable()
    if profile == "pyinstrument":
        from pyinstrument import Profiler  # noqa: PLC0415

        profiler = Profiler(async_mode="enabled")
        profiler.start()
        try:
            return asyncio.run(run()), profiler
        finally:
            profiler.stop()
    return asyncio.run(run()), None


def print_profile(profiler: Any, *, sort: str = "tottime", limit: int = 30) -> None:
    """A profiler's report on stdout (cProfile: the top ``limit`` functions by ``sort``)."""
    if profiler is None:
        return
    if hasattr(profiler, "output_text"):  # pyinstrument
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        return
    import pstats  # noqa: PLC0415

    pstats.Stats(profiler).sort_stats(sort).print_stats(limit)
