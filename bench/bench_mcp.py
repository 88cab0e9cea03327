"""MCP path throughput: SpectrumMcpRolloutProcessor -> the real spectrum_server.py process, litellm ->
an instantly answering loopback chat server (a separate process playing the accumulate policy), 96 rows
x 12 scans at 96 concurrency; the baseline is the in-process path (bench/bench_turn.py: the same rollout
loop without MCP) run in the same invocation, and the ratios are against it.

    python bench/bench_mcp.py [--rows 96] [--concurrency 96] [--memory-mode scaffold] [--repeat 1]
        [--no-turn] [--profile cprofile] [--json]

"CPU ms per scan" = (this process's ``time.process_time()`` + the MCP server process's CPU from /proc)
/ scans; the model server's CPU is not included (reported separately). Server peak memory = the MCP
server's VmHWM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from rollout_bench import (null_logger, parser, print_profile, proc_cpu_s, run_profiled,  # noqa: E402
                           set_offline, start_loopback)


def _vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def run_turn_bench(rows: int, concurrency: int, memory_mode: str) -> dict | None:
    """The in-process path's figures from bench/bench_turn.py, run now (same machine state)."""
    script = ROOT / "bench" / "bench_turn.py"
    if not script.exists():
        return None
    out = subprocess.run([sys.executable, str(script), "--rows", str(rows), "--concurrency", str(concurrency),
                          "--memory-mode", memory_mode, "--json"], capture_output=True, text=True, cwd=str(ROOT),
                         timeout=900)
    try:
        return json.loads(out.stdout[out.stdout.index("["):])[0]
    except (ValueError, IndexError):
        return {"error": (out.stderr or out.stdout)[-500:]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = parser(__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-turn", action="store_true", help="skip the in-process path's bench")
    ap.add_argument("--profile", choices=("cprofile",), default=None)
    ap.add_argument("--server-profile", default=None, metavar="PATH", help="cProfile the MCP server into PATH")
    ap.add_argument("--json", action="store_true")
    return ap.parse_args(argv)


def figures(out: list, wall: float, cpu: float, server_cpu: float | None, model_cpu: tuple, server_pid: int) -> dict:
    """One measured batch's figures (``model_cpu``: the loopback server's CPU before/after, None off Linux)."""
    scans = sum(len(r.execution_metadata.extra["spectrum"]["per_scan_reward"]) for r in out)
    m0, m1 = model_cpu
    return {
        "path": "mcp", "rows": len(out), "scans": scans, "errors": sum(1 for r in out if r.rollout_status.is_error()),
        "scans_skipped": sum(r.execution_metadata.extra["spectrum"]["scans_skipped"] for r in out),
        "wall_s": round(wall, 3), "rollouts_per_s": round(len(out) / wall, 2),
        "client_cpu_ms_per_scan": round(1000 * cpu / scans, 2),
        "server_cpu_ms_per_scan": round(1000 * server_cpu / scans, 2) if server_cpu is not None else None,
        "cpu_ms_per_scan": round(1000 * (cpu + (server_cpu or 0.0)) / scans, 2),
        "model_server_cpu_ms_per_scan": round(1000 * (m1 - m0) / scans, 2) if m0 is not None else None,
        "llm_calls": sum(r.execution_metadata.extra["spectrum_rollout"]["llm_requests"] for r in out),
        "server_peak_mb": round(_vm_hwm_mb(server_pid) or 0.0, 1),
        "mean_score": round(sum(r.execution_metadata.extra["spectrum"]["score"] for r in out) / len(out), 4),
    }


def measure(a: argparse.Namespace) -> tuple[list[dict], object]:
    """Warm up, then ``a.repeat`` measured batches over MCP; (figures, profiler)."""
    from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: PLC0415

    from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows  # noqa: PLC0415
    from spectrum_rft.rollouts.mcp_client import SERVER_SCRIPT, SpectrumMcpRolloutProcessor, SpectrumServer  # noqa: PLC0415

    loopback, lport = start_loopback(a.policy)
    server = SpectrumServer(extra_args=["--profile", a.server_profile] if a.server_profile else None).start()
    params = {"model": "openai/loopback", "api_base": f"http://127.0.0.1:{lport}/v1", "use_caching": False}
    raw = make_rows(a.rows, memory_mode=a.memory_mode, prefix="bench")
    processor = SpectrumMcpRolloutProcessor(log_final=False)

    async def batch(n_rows: int) -> list:
        cfg = RolloutProcessorConfig(completion_params=params, mcp_config_path="", server_script_path=SERVER_SCRIPT,
                                     steps=144, semaphore=asyncio.Semaphore(a.concurrency), logger=null_logger(),
                                     kwargs={"start_server": False, "port": server.port})
        return await asyncio.gather(*processor(dataset_adapter(raw[:n_rows]), cfg))

    async def run() -> list[dict]:
        await batch(min(8, a.rows))  # warm-up: imports, litellm's client, the server's first sessions
        results = []
        for _ in range(a.repeat):
            s0, m0 = proc_cpu_s(server.pid), proc_cpu_s(loopback.pid)
            t0, c0 = time.perf_counter(), time.process_time()
            out = await batch(a.rows)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            s1, m1 = proc_cpu_s(server.pid), proc_cpu_s(loopback.pid)
            server_cpu = (s1 - s0) if s0 is not None and s1 is not None else None
            results.append(figures(out, wall, cpu, server_cpu, (m0, m1), server.pid))
        return results
    try:
        return run_profiled(run, a.profile)
    finally:
        server.stop(timeout=60 if a.server_profile else 5)
        loopback.terminate()
        loopback.wait(timeout=10)


def print_results(a: argparse.Namespace, results: list[dict], turn: dict | None) -> None:
    if a.json:
        print(json.dumps({"mcp": results, "turn": turn}, indent=2))
        return
    print(f"bench_mcp: {a.rows} rows x 12 scans, concurrency {a.concurrency}, memory mode {a.memory_mode}, "
          f"loopback model = {a.policy} policy in a separate process, real spectrum_server.py process")
    base = turn if turn is not None and "error" not in turn else None
    for r in results:
        vs = (f" ({r['rollouts_per_s'] / base['rollouts_per_s']:.2f}x the in-process path's rollouts/s, "
              f"{r['cpu_ms_per_scan'] / base['cpu_ms_per_scan']:.2f}x its CPU/scan)") if base else ""
        print(f"  mcp : {r['rollouts_per_s']:.2f} rollouts/s | {r['cpu_ms_per_scan']:.2f} ms CPU/scan{vs} "
              f"(client {r['client_cpu_ms_per_scan']:.2f} + server {r['server_cpu_ms_per_scan']}) | server peak "
              f"{r['server_peak_mb']} MB | model server {r['model_server_cpu_ms_per_scan']} ms/scan | wall "
              f"{r['wall_s']:.2f} s | scans {r['scans']} (skipped {r['scans_skipped']}, errors {r['errors']}) | "
              f"model calls {r['llm_calls']} | mean score {r['mean_score']}")
    if a.no_turn:
        print("  turn: not measured (--no-turn)")
    elif turn is None:
        print("  turn: bench/bench_turn.py not found (in-process path not measured)")
    elif "error" in turn:
        print(f"  turn: bench_turn failed: {turn['error']}")
    else:
        print(f"  turn: {turn['rollouts_per_s']:.2f} rollouts/s | {turn['cpu_ms_per_scan']:.2f} ms CPU/scan "
              f"(single process; sqlite row logging) | wall {turn['wall_s']:.2f} s | scans {turn['scans']} "
              f"| mean score {turn['mean_score']}   (in-process path, bench/bench_turn.py, same run)")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    set_offline()
    results, profiler = measure(a)
    turn = None if a.no_turn else run_turn_bench(a.rows, a.concurrency, a.memory_mode)
    print_results(a, results, turn)
    print_profile(profiler, sort="cumulative", limit=40)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
