"""MCP server state under clients that vanish: live sessions and the server's RSS before and after N
abandoned sessions (each opened, its env created, then dropped: no DELETE, no further request), on the real
``spectrum_server.py`` process. The baseline runs in the same invocation: the same sessions with idle
reaping off (``--session-idle-s 0 --max-sessions 0``: every abandoned session stays, as before bounded
sessions), then with reaping on (``--session-idle-s S``, the default cap).

    python bench/bench_mcp_sessions.py [--sessions 3000] [--idle-s 2] [--concurrency 16] [--json]

Columns: live sessions (``/control/stats`` ``sessions.live``; rollouts = envs alive) and VmRSS of the server
(MB) at start, after a warm-up of 200 sessions ended by the server (reaping on) or left (off), right after
the N sessions, and after waiting ``idle-s`` + 3 s. Peak = the server's VmHWM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402

from spectrum_rft.rollouts.mcp_client import SpectrumServer  # noqa: E402
from spectrum_rft.rollouts.mcp_protocol import CLIENT_INFO_KEY, EPISODE_URI  # noqa: E402

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def abandon(url: str, n: int, concurrency: int, start: int = 0) -> int:
    """Open ``n`` sessions on ``url`` (initialize, initialized, read the episode: the env exists), then drop
    each without DELETE. Returns how many the server refused."""
    refused = 0
    queue = iter(range(start, start + n))

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal refused
        for i in queue:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1", CLIENT_INFO_KEY: {"row_id": f"abandoned-{i}"}}}}
            r = await client.post(url, json=init, headers=HEADERS)
            sid = r.headers.get("mcp-session-id")
            if r.status_code != 200 or not sid:
                refused += 1
                continue
            h = {**HEADERS, "mcp-session-id": sid}
            await client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
            await client.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "resources/read",
                                         "params": {"uri": EPISODE_URI}}, headers=h)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return refused


def measure(idle_s: float, sessions: int, concurrency: int, warmup: int = 200) -> dict:
    args = ["--session-idle-s", str(idle_s)] + (["--max-sessions", "0"] if not idle_s else [])
    server = SpectrumServer(extra_args=args).start()
    base = f"http://127.0.0.1:{server.port}"
    pid = server.pid
    assert pid is not None

    def point() -> dict:
        s = httpx.get(base + "/control/stats", timeout=30).json()
        return {"live": s["sessions"]["live"], "rollouts": s["rollouts_alive"],
                "rss_mb": round(_status_mb(pid, "VmRSS"), 1)}

    def settle() -> None:
        time.sleep(idle_s + 3 if idle_s else 3)

    try:
        out: dict = {"idle_s": idle_s or None, "sessions": sessions, "start": point()}
        asyncio.run(abandon(base + "/mcp", warmup, concurrency, start=-warmup))
        settle()
        out["warm"] = point()
        t0 = time.monotonic()
        out["refused"] = asyncio.run(abandon(base + "/mcp", sessions, concurrency))
        out["open_s"] = round(time.monotonic() - t0, 1)
        out["after"] = point()
        settle()
        out["settled"] = point()
        out["peak_rss_mb"] = round(_status_mb(pid, "VmHWM"), 1)
        out["reaped"] = httpx.get(base + "/control/stats", timeout=30).json()["sessions"]["reaped"]
        out["growth_mb"] = round(out["settled"]["rss_mb"] - out["warm"]["rss_mb"], 1)
        out["kb_per_session"] = round(1024 * out["growth_mb"] / sessions, 1)
        return out
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--idle-s", type=float, default=2.0, help="the idle limit of the reaping run")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    runs = [measure(0, a.sessions, a.concurrency), measure(a.idle_s, a.sessions, a.concurrency)]
    if a.json:
        print(json.dumps(runs, indent=1))
        return 0
    print(f"{a.sessions} abandoned sessions (no DELETE), {a.concurrency} at a time, spectrum_server.py")
    print(f"{'idle limit':>12} | {'phase':>8} | {'live':>5} | {'envs':>5} | {'RSS MB':>7}")
    for r in runs:
        name = f"{r['idle_s']:g} s" if r["idle_s"] else "off"
        for phase in ("start", "warm", "after", "settled"):
            p = r[phase]
            print(f"{name:>12} | {phase:>8} | {p['live']:>5} | {p['rollouts']:>5} | {p['rss_mb']:>7.1f}")
        print(f"{name:>12} | opened in {r['open_s']} s, refused {r['refused']}, reaped {r['reaped']}, "
              f"peak RSS {r['peak_rss_mb']} MB, settled - warm = {r['growth_mb']:+.1f} MB "
              f"({r['kb_per_session']:+.1f} KB/session)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
