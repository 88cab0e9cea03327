"""Environment throughput: the accumulate policy end to end (generation + rendering + the policy
reading the text + validation + scoring + metrics), single process.

    python bench/bench_env.py [--episodes 3000] [--preset default] [--policy accumulate]

Reference: the original experiment's environment measured about 3,500 scans/s on the project machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spectrum_rft.task.environment import EnvConfig, SpectrumEnv, seed_for_row  # noqa: E402
from spectrum_rft.baselines.audit import run_episode  # noqa: E402

ORIGINAL_SCANS_PER_S = 3500.0


def bench(episodes: int, preset: str, policy: str, memory_mode: str) -> dict:
    env = SpectrumEnv(EnvConfig(preset=preset, memory_mode=memory_mode))
    seeds = [seed_for_row(f"bench-{i}") for i in range(episodes)]
    for s in seeds[:50]:  # warm-up (template compilation, caches)
        run_episode(env, policy, s)
    t0, c0 = time.perf_counter(), time.process_time()
    for s in seeds:
        run_episode(env, policy, s)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    scans = episodes * env.n_scans
    # the environment alone: reset + steps with a fixed report (no policy, no parsing)
    report = {"center_freqs": [c for c, _ in env.truth()][:10]}
    t1 = time.perf_counter()
    for s in seeds:
        env.reset(s)
        while not env.done:
            env.step(report)
        env.metrics()
    env_wall = time.perf_counter() - t1
    return {
        "preset": preset, "policy": policy, "memory_mode": memory_mode, "episodes": episodes,
        "episodes_per_s": episodes / wall, "scans_per_s": scans / wall, "cpu_us_per_scan": cpu / scans * 1e6,
        "env_only_scans_per_s": scans / env_wall,
        "x_original": scans / wall / ORIGINAL_SCANS_PER_S,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=3000)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--policy", default="accumulate")
    ap.add_argument("--memory-mode", default="none")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = bench(a.episodes, a.preset, a.policy, a.memory_mode)
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"{r['policy']} on preset {r['preset']} ({r['memory_mode']}), {r['episodes']} episodes")
        print(f"  {r['episodes_per_s']:8.0f} episodes/s   {r['scans_per_s']:8.0f} scans/s   "
              f"{r['cpu_us_per_scan']:6.1f} us CPU/scan   ({r['x_original']:.1f}x the original's ~3,500 scans/s)")
        print(f"  environment alone (fixed report, no policy): {r['env_only_scans_per_s']:8.0f} scans/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
