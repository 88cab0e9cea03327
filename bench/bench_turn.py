"""In-process rollout path throughput: SpectrumTurnRolloutProcessor -> litellm -> an instantly answering
loopback chat server (a separate process playing the accumulate policy), 96 rows x 12 scans at 96
concurrency.

    python bench/bench_turn.py [--rows 96] [--concurrency 96] [--memory-mode scaffold]
        [--logger sqlite|null] [--repeat 1] [--profile cprofile|pyinstrument] [--json]

"CPU ms per scan" is ``time.process_time()`` of this process only (the processor, litellm, the env and
the row logging); the model server's CPU is reported separately. The sqlite logger writes to a temporary
database, and each finished row is logged once more as eval-protocol's ``@evaluation_test`` does.

Baseline, measured in the same invocation against the same model server: the same number of bare
``litellm.acompletion`` calls (one per scan, same concurrency, a fixed two-message prompt, no env, no
rollout loop, no logging). The ratios say what the rollout path costs on top of the model calls it makes
on this machine today, not against numbers from another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from rollout_bench import (null_logger, parser, print_profile, proc_cpu_s, run_profiled,  # noqa: E402
                           set_offline, start_loopback)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = parser(__doc__.split("\n\n")[0])
    ap.add_argument("--logger", choices=("sqlite", "null"), default="sqlite")
    ap.add_argument("--repeat", type=int, default=1, help="measured batches (reported separately)")
    ap.add_argument("--profile", choices=("cprofile", "pyinstrument"), default=None)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args(argv)


async def bare_calls(params: dict, concurrency: int, n_calls: int) -> tuple[float, float]:
    """The baseline: ``n_calls`` bare litellm calls at the same concurrency; (wall s, CPU s)."""
    import litellm  # noqa: PLC0415

    sem = asyncio.Semaphore(concurrency)
    messages = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Scan 1/12 | band "}]

    async def one() -> None:
        async with sem:
            await litellm.acompletion(messages=messages, tools=None, cache={"no-cache": True}, max_retries=0,
                                      **params)

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(n_calls)))
    return time.perf_counter() - t0, time.process_time() - c0


def figures(out: list, wall: float, cpu: float, server_cpu: tuple, base: tuple, base_server_cpu: tuple) -> dict:
    """One measured batch's figures against its baseline (CPU pairs: before/after, None off Linux)."""
    scans = sum(len(r.execution_metadata.extra["spectrum"]["per_scan_reward"]) for r in out)
    requests = sum(r.execution_metadata.extra["spectrum_rollout"]["llm_requests"] for r in out)
    (s0, s1), (b0, b1), (base_wall, base_cpu) = server_cpu, base_server_cpu, base
    return {
        "baseline_wall_s": round(base_wall, 3),
        "baseline_cpu_ms_per_request": round(1000 * base_cpu / requests, 3),
        "baseline_server_cpu_ms_per_request": round(1000 * (b1 - b0) / requests, 3) if b0 is not None else None,
        "wall_ratio": round(wall / base_wall, 2),
        "cpu_ratio": round(cpu / base_cpu, 2),
        "rows": len(out), "scans": scans, "errors": sum(1 for r in out if not r.rollout_status.is_finished()),
        "scans_skipped": sum(r.execution_metadata.extra["spectrum"]["scans_skipped"] for r in out),
        "llm_requests": requests, "wall_s": round(wall, 3),
        "rollouts_per_s": round(len(out) / wall, 2),
        "cpu_ms_per_scan": round(1000 * cpu / scans, 3),
        "cpu_ms_per_request": round(1000 * cpu / requests, 3),
        "server_cpu_ms_per_request": round(1000 * (s1 - s0) / requests, 3) if s0 is not None else None,
        "mean_score": round(sum(r.execution_metadata.extra["spectrum"]["score"] for r in out) / len(out), 4),
    }


def measure(a: argparse.Namespace) -> tuple[list[dict], object]:
    """Warm up, then ``a.repeat`` measured batches, each followed by its baseline; (figures, profiler)."""
    from eval_protocol.dataset_logger.sqlite_dataset_logger_adapter import SqliteDatasetLoggerAdapter  # noqa: PLC0415
    from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: PLC0415

    from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows  # noqa: PLC0415
    from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor  # noqa: PLC0415

    tmp = tempfile.TemporaryDirectory(prefix="bench_turn_")
    logger = SqliteDatasetLoggerAdapter(db_path=os.path.join(tmp.name, "logs.db")) if a.logger == "sqlite" \
        else null_logger()
    server, port = start_loopback(a.policy)
    params = {"model": "openai/loopback", "api_base": f"http://127.0.0.1:{port}/v1"}
    processor = SpectrumTurnRolloutProcessor(log_final=True)  # + eval-protocol's end-of-rollout log
    raw = make_rows(a.rows, memory_mode=a.memory_mode, prefix="bench")

    async def batch(n_rows: int) -> list:
        cfg = RolloutProcessorConfig(completion_params=params, mcp_config_path="",
                                     semaphore=asyncio.Semaphore(a.concurrency), logger=logger)
        return await asyncio.gather(*processor(dataset_adapter(raw[:n_rows]), cfg))

    async def run() -> list[dict]:
        await batch(min(8, a.rows))  # warm-up: imports, litellm's client, template compilation
        await bare_calls(params, a.concurrency, min(8, a.rows))
        results = []
        for _ in range(a.repeat):
            s0 = proc_cpu_s(server.pid)
            t0, c0 = time.perf_counter(), time.process_time()
            out = await batch(a.rows)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            s1 = proc_cpu_s(server.pid)
            requests = sum(r.execution_metadata.extra["spectrum_rollout"]["llm_requests"] for r in out)
            b0 = proc_cpu_s(server.pid)
            base = await bare_calls(params, a.concurrency, requests)
            b1 = proc_cpu_s(server.pid)
            results.append(figures(out, wall, cpu, (s0, s1), base, (b0, b1)))
        return results

    try:
        return run_profiled(run, a.profile)
    finally:
        server.terminate()
        server.wait(timeout=10)
        tmp.cleanup()


def print_results(a: argparse.Namespace, results: list[dict]) -> None:
    print(f"bench_turn: {a.rows} rows x 12 scans, concurrency {a.concurrency}, memory mode {a.memory_mode}, "
          f"logger {a.logger}, loopback model = {a.policy} policy in a separate process")
    for r in results:
        print(f"  {r['rollouts_per_s']:.2f} rollouts/s   {r['cpu_ms_per_scan']:.2f} ms CPU/scan (this process)   "
              f"{r['cpu_ms_per_request']:.2f} ms CPU/request   server {r['server_cpu_ms_per_request']} ms CPU/request"
              f"   wall {r['wall_s']:.2f} s   scans {r['scans']} (skipped {r['scans_skipped']}, errors "
              f"{r['errors']})   mean score {r['mean_score']}")
        print(f"  baseline ({r['llm_requests']} bare litellm calls, same model server, same run): wall "
              f"{r['baseline_wall_s']:.2f} s, {r['baseline_cpu_ms_per_request']:.2f} ms CPU/request -> the "
              f"rollout path takes {r['wall_ratio']:.2f}x the wall time and {r['cpu_ratio']:.2f}x the CPU of "
              "its model calls alone")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    set_offline()
    results, profiler = measure(a)
    if a.json:
        print(json.dumps(results, indent=2))
    else:
        print_results(a, results)
    print_profile(profiler, sort="tottime", limit=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
