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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of another process (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def start_server(policy: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "loopback_llm.py"), "--port", "0",
                             "--policy", policy], stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"loopback server did not start: {line!r}")
    return proc, int(line.split()[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=96)
    ap.add_argument("--memory-mode", default="scaffold")
    ap.add_argument("--policy", default="accumulate")
    ap.add_argument("--logger", choices=("sqlite", "null"), default="sqlite")
    ap.add_argument("--repeat", type=int, default=1, help="measured batches (reported separately)")
    ap.add_argument("--profile", choices=("cprofile", "pyinstrument"), default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    os.environ.setdefault("OPENAI_API_KEY", "dummy")  # the loopback server ignores it; litellm wants one
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("EP_NO_UPLOAD", "1")

    from eval_protocol.dataset_logger.dataset_logger import DatasetLogger  # noqa: PLC0415
    from eval_protocol.dataset_logger.sqlite_dataset_logger_adapter import SqliteDatasetLoggerAdapter  # noqa: PLC0415
    from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: PLC0415

    from spectrum_rft.rollouts.dataset import dataset_adapter, make_rows  # noqa: PLC0415
    from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor  # noqa: PLC0415

    class NullLogger(DatasetLogger):
        def log(self, row):
            return None

        def read(self, rollout_id=None):
            return []

    tmp = tempfile.TemporaryDirectory(prefix="bench_turn_")
    logger = SqliteDatasetLoggerAdapter(db_path=os.path.join(tmp.name, "logs.db")) if a.logger == "sqlite" \
        else NullLogger()
    server, port = start_server(a.policy)
    params = {"model": "openai/loopback", "api_base": f"http://127.0.0.1:{port}/v1"}
    processor = SpectrumTurnRolloutProcessor(log_final=True)  # + eval-protocol's end-of-rollout log
    raw = make_rows(a.rows, memory_mode=a.memory_mode, prefix="bench")

    async def batch(n_rows: int) -> list:
        rows = dataset_adapter(raw[:n_rows])
        cfg = RolloutProcessorConfig(completion_params=params, mcp_config_path="",
                                     semaphore=asyncio.Semaphore(a.concurrency), logger=logger)
        return await asyncio.gather(*processor(rows, cfg))

    async def bare_calls(n_calls: int) -> tuple[float, float]:
        """The baseline: ``n_calls`` bare litellm calls at the same concurrency; (wall s, CPU s)."""
        import litellm  # noqa: PLC0415

        tools = None
        sem = asyncio.Semaphore(a.concurrency)
        messages = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Scan 1/12 | band "}]

        async def one() -> None:
            async with sem:
                await litellm.acompletion(messages=messages, tools=tools, cache={"no-cache": True}, max_retries=0,
                                          **params)

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one() for _ in range(n_calls)))
        return time.perf_counter() - t0, time.process_time() - c0

    async def run() -> list[dict]:
        await batch(min(8, a.rows))  # warm-up: imports, litellm's client, template compilation
        await bare_calls(min(8, a.rows))
        results = []
        for _ in range(a.repeat):
            s0 = _proc_cpu_s(server.pid)
            t0, c0 = time.perf_counter(), time.process_time()
            out = await batch(a.rows)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            s1 = _proc_cpu_s(server.pid)
            scans = sum(len(r.execution_metadata.extra["spectrum"]["per_scan_reward"]) for r in out)
            errors = sum(1 for r in out if not r.rollout_status.is_finished())
            skipped = sum(r.execution_metadata.extra["spectrum"]["scans_skipped"] for r in out)
            requests = sum(r.execution_metadata.extra["spectrum_rollout"]["llm_requests"] for r in out)
            b0 = _proc_cpu_s(server.pid)
            base_wall, base_cpu = await bare_calls(requests)
            b1 = _proc_cpu_s(server.pid)
            results.append({
                "baseline_wall_s": round(base_wall, 3),
                "baseline_cpu_ms_per_request": round(1000 * base_cpu / requests, 3),
                "baseline_server_cpu_ms_per_request": round(1000 * (b1 - b0) / requests, 3) if b0 is not None else None,
                "wall_ratio": round(wall / base_wall, 2),
                "cpu_ratio": round(cpu / base_cpu, 2),
                "rows": len(out), "scans": scans, "errors": errors, "scans_skipped": skipped,
                "llm_requests": requests, "wall_s": round(wall, 3),
                "rollouts_per_s": round(len(out) / wall, 2),
                "cpu_ms_per_scan": round(1000 * cpu / scans, 3),
                "cpu_ms_per_request": round(1000 * cpu / requests, 3),
                "server_cpu_ms_per_request": round(1000 * (s1 - s0) / requests, 3) if s0 is not None else None,
                "mean_score": round(sum(r.execution_metadata.extra["spectrum"]["score"] for r in out) / len(out), 4),
            })
        return results

    profiler = None
    try:
        if a.profile == "cprofile":
            import cProfile  # noqa: PLC0415

            profiler = cProfile.Profile()
            profiler.enable()
            results = asyncio.run(run())
            profiler.disable()
        elif a.profile == "pyinstrument":
            from pyinstrument import Profiler  # noqa: PLC0415

            profiler = Profiler(async_mode="enabled")
            profiler.start()
            results = asyncio.run(run())
            profiler.stop()
        else:
            results = asyncio.run(run())
    finally:
        server.terminate()
        server.wait(timeout=10)
        tmp.cleanup()

    if a.json:
        print(json.dumps(results, indent=2))
    else:
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
    if a.profile == "cprofile" and profiler is not None:
        import pstats  # noqa: PLC0415

        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    elif a.profile == "pyinstrument" and profiler is not None:
        print(profiler.output_text(unicode=False, color=False, show_all=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
