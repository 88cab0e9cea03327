"""Environment throughput: a scripted policy end to end (generation + rendering + the policy reading the
text + validation + scoring + metrics, played through the episode driver as the audit plays it: the
transcript, the tool call's JSON and the tool result's text included) against the environment alone, single
process, same episodes.

    python bench/bench_env.py [--episodes 3000] [--preset default] [--policy accumulate] [--repeats 3]

Both are measured in this invocation, on this machine: the baseline is the environment alone (reset, a
fixed report every scan, metrics: no policy, no parsing), the measured run adds the policy. The ratio
between them is what the policy's side costs; no figure from another machine is involved. The two are
run alternately ``--repeats`` times and the best of each is kept (the least disturbed by other load).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spectrum_rft.baselines.audit import run_episode  # noqa: E402
from spectrum_rft.task.config import EnvConfig  # noqa: E402
from spectrum_rft.task.environment import SpectrumEnv  # noqa: E402
from spectrum_rft.task.seeding import seed_for_row  # noqa: E402


def _env_alone(env: SpectrumEnv, seeds: list[int], report: dict) -> tuple[float, float]:
    """(wall, cpu) seconds of the environment alone: reset, the same report every scan, metrics."""
    t0, c0 = time.perf_counter(), time.process_time()
    for s in seeds:
        env.reset(s)
        while not env.done:
            env.step(report)
        env.metrics()
    return time.perf_counter() - t0, time.process_time() - c0


def _with_policy(env: SpectrumEnv, seeds: list[int], policy: str) -> tuple[float, float]:
    """(wall, cpu) seconds of the same episodes played by ``policy`` (it reads every scan's text)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for s in seeds:
        run_episode(env, policy, s)
    return time.perf_counter() - t0, time.process_time() - c0


def bench(episodes: int, preset: str, policy: str, memory_mode: str, repeats: int = 3) -> dict:
    env = SpectrumEnv(EnvConfig(preset=preset, memory_mode=memory_mode))
    seeds = [seed_for_row(f"bench-{i}") for i in range(episodes)]
    env.reset(seeds[0])
    report = {"center_freqs": [c for c, _ in env.truth()][:10]}  # a fixed, valid report
    for s in seeds[:50]:  # warm-up (template compilation, caches), both code paths
        run_episode(env, policy, s)
    _env_alone(env, seeds[:50], report)
    base: list[tuple[float, float]] = []
    meas: list[tuple[float, float]] = []
    for _ in range(max(1, repeats)):  # alternated, so slow drift of the machine hits both alike
        base.append(_env_alone(env, seeds, report))
        meas.append(_with_policy(env, seeds, policy))
    (b_wall, b_cpu), (m_wall, m_cpu) = min(base), min(meas)
    scans = episodes * env.n_scans
    return {
        "preset": preset, "policy": policy, "memory_mode": memory_mode, "episodes": episodes, "scans": scans,
        "repeats": len(base),
        "env_only_scans_per_s": scans / b_wall, "env_only_cpu_us_per_scan": b_cpu / scans * 1e6,
        "episodes_per_s": episodes / m_wall, "scans_per_s": scans / m_wall, "cpu_us_per_scan": m_cpu / scans * 1e6,
        # measured now, same episodes: policy run throughput as a share of the environment alone
        "x_env_only": (scans / m_wall) / (scans / b_wall),
        "policy_share_of_time": 1.0 - b_wall / m_wall,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=3000)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--policy", default="accumulate")
    ap.add_argument("--memory-mode", default="none")
    ap.add_argument("--repeats", type=int, default=3, help="alternated runs of each; the best of each is kept")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = bench(a.episodes, a.preset, a.policy, a.memory_mode, a.repeats)
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"{r['policy']} on preset {r['preset']} ({r['memory_mode']}), {r['episodes']} episodes, "
              f"best of {r['repeats']} alternated runs each")
        base, meas = "environment alone (fixed report, baseline):", f"with the {r['policy']} policy:"
        w = max(len(base), len(meas))
        print(f"  {base:<{w}} {r['env_only_scans_per_s']:8.0f} scans/s   {r['env_only_cpu_us_per_scan']:6.1f} us CPU/scan")
        print(f"  {meas:<{w}} {r['scans_per_s']:8.0f} scans/s   {r['cpu_us_per_scan']:6.1f} us CPU/scan   "
              f"{r['episodes_per_s']:6.0f} episodes/s")
        print(f"  ratio: {r['x_env_only']:.2f}x the environment alone, measured now "
              f"(the policy's side takes {100 * r['policy_share_of_time']:.0f}% of the time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
