"""``spectrum-rft channel``: what a scan episode's memory channel is worth, measured before any training run.

A scan episode (:mod:`.trl_data`) shows the model scan k alone with the mode's memory in the scan text: the
scaffold's echo of the previous report (scans 1..k-1 played by the row's ``echo_history`` policy,
:func:`.trl_env.play_prefix`), or the scrambled control's echo of random centres of the same count. On the
rows a run trains on (same salt and row ids), this scores what a model could report from what it is shown:

* ``memoryless``: the current peaks (what the warm start is taught);
* ``echo+current``: every echoed centre kept and the current peaks added (perfect use of the channel), in the
  real arm and in the scrambled control (same bands, same scans: paired by row).

For each, the mean gain over memoryless and ``beyond_current`` (the score a report earns beyond its centres
at current peaks), with standard errors. A checkpoint's own use of the channel is ``spectrum-rft scan-eval``'s
``gain_vs_memoryless`` and ``beyond_current`` on rows of the same ``--echo-history``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from typing import Any

from spectrum_rft.baselines.policies import make_policy
from spectrum_rft.common.stats import mean, standard_error
from spectrum_rft.task.arms import ARMS
from spectrum_rft.task.memory import memory_mode
from spectrum_rft.task.scan_format import parse_scan
from spectrum_rft.training.spectrum.trl_data import grpo_rows
from spectrum_rft.training.spectrum.trl_env import ECHO_HISTORIES, memoryless_report, tool_env_for

REPORTS = ("memoryless", "echo+current")


def _scores(row: dict) -> dict[str, dict[str, float]]:
    """Each report of :data:`REPORTS` on the row's scan, judged by a copy of the row's env."""
    env = tool_env_for(row)
    text = env.reset(**row)
    scan = parse_scan(text)
    acc = make_policy("accumulate")  # reads the echo too: every echoed centre kept, the current peaks added
    acc.observe(scan)
    reports = {"memoryless": memoryless_report(text)["center_freqs"], "echo+current": acc.act()["center_freqs"]}
    out = {}
    for name, centres in reports.items():
        judge = copy.deepcopy(env)
        judge.submit_report(center_freqs=centres)
        m = judge.metrics()
        out[name] = {"score": m["score"], "beyond_current": m["beyond_current"]}
    return out


def _summary(values: list[float]) -> dict[str, Any]:
    return {"mean": mean(values), "se": standard_error(values), "n": len(values)}


def channel_value(rows: int, *, arm: str = "weak-scaffold", control: str = "weak-scrambled", salt: str = "trl",
                  prefix: str = "channel", echo_history: str = "accumulate", preset: str = "default",
                  reward: str = "default") -> dict:
    """Perfect use of the echo vs the memoryless report on ``rows`` scan episodes of ``arm`` and ``control``
    (the same row ids: the same bands and scans), paired by row."""
    per_arm = {}
    for a in (arm, control):
        spec = ARMS[a]
        rs = grpo_rows(rows, prompt=spec.prompt, memory_mode=spec.memory_mode, preset=preset, reward=reward,
                       salt=salt, prefix=prefix, episode="scan", echo_history=echo_history)
        preset, reward = rs[0]["environment_context"]["preset"], rs[0]["environment_context"]["reward"]
        per_arm[a] = [_scores(r) for r in rs]
    out: dict[str, Any] = {"rows": rows, "arm": arm, "control": control, "salt": salt, "prefix": prefix,
                           "echo_history": echo_history, "preset": preset, "reward": reward}
    base = [s["memoryless"]["score"] for s in per_arm[arm]]
    out["memoryless"] = _summary(base)
    gains = {}
    for a in (arm, control):
        gains[a] = [s["echo+current"]["score"] - s["memoryless"]["score"] for s in per_arm[a]]
        out[a] = {"gain": _summary(gains[a]),
                  "beyond_current": _summary([s["echo+current"]["beyond_current"] for s in per_arm[a]])}
    out["real_minus_control"] = _summary([x - y for x, y in zip(gains[arm], gains[control])])
    return out


def format_channel(r: dict) -> str:
    def f(s: dict) -> str:
        return f"{s['mean']:+.4f} +- {s['se']:.4f}" if s["se"] is not None else f"{s['mean']:+.4f}"

    return "\n".join([
        f"channel value: {r['rows']} scan episodes (rows {r['prefix']}-*, salt {r['salt']!r}, preset {r['preset']}, "
        f"reward {r['reward']}, echo_history {r['echo_history']}), perfect use of the echo (echo+current) vs the "
        "memoryless report",
        f"  memoryless score                      {r['memoryless']['mean']:.4f}",
        f"  {r['arm']:<16} gain {f(r[r['arm']]['gain'])}   beyond_current {f(r[r['arm']]['beyond_current'])}",
        f"  {r['control']:<16} gain {f(r[r['control']]['gain'])}   beyond_current "
        f"{f(r[r['control']]['beyond_current'])}",
        f"  real - control (paired)      {f(r['real_minus_control'])}",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft channel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300, help="scan episodes per arm")
    ap.add_argument("--arm", default="weak-scaffold", choices=sorted(ARMS))
    ap.add_argument("--control", default="weak-scrambled", choices=sorted(ARMS))
    ap.add_argument("--salt", default="trl", help="band salt of the rows (train's default: trl)")
    ap.add_argument("--prefix", default="channel", help="row id prefix (train's rows: grpo-s<seed>)")
    ap.add_argument("--echo-history", default="accumulate", choices=ECHO_HISTORIES)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--reward", default="default")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.rows < 2:
        print("spectrum-rft channel: --rows must be >= 2", file=sys.stderr)
        return 2
    for name in (a.arm, a.control):
        if memory_mode(ARMS[name].memory_mode).echo is None:
            print(f"spectrum-rft channel: arm {name} shows no echo (memory mode {ARMS[name].memory_mode})",
                  file=sys.stderr)
            return 2
    try:
        r = channel_value(a.rows, arm=a.arm, control=a.control, salt=a.salt, prefix=a.prefix,
                          echo_history=a.echo_history, preset=a.preset, reward=a.reward)
    except ValueError as e:  # an unknown preset or reward, a preset rows cannot play
        print(f"spectrum-rft channel: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=1) if a.json else format_channel(r))
    return 0
