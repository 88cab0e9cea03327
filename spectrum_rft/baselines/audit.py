"""The reward audit: every scripted policy against a preset and reward. Does the reward measure memory?

    spectrum-rft audit --preset default --reward default --episodes 500

Blind policies (carpet-K, random-K) must not beat the memoryless one by much; accumulation must beat it
by a lot; the privileged oracle scores 1 (:func:`audit_checks`).
"""

from __future__ import annotations

from typing import Sequence

from spectrum_rft.baselines.policies import make_policy, oracle_report
from spectrum_rft.common.stats import mean, mean_or
from spectrum_rft.task.scan_format import parse_scan
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.environment import SpectrumEnv
from spectrum_rft.task.presets import get_preset
from spectrum_rft.task.seeding import seed_for_row


def run_episode(env: SpectrumEnv, policy_name: str, seed: int, history: bool = True) -> dict:
    """Play one episode with a scripted policy and return ``env.metrics()``.

    ``history=True`` lets the policy remember every scan it has read (an ICL-style agent); with False
    it is rebuilt each scan and sees only the current one (plus whatever echo the memory mode renders).
    """
    obs, _ = env.reset(seed=seed)
    policy = make_policy(policy_name, seed)
    while not obs["done"]:
        if policy is None:
            action = oracle_report(env.truth())
        else:
            parsed = parse_scan(obs["prompt"])
            assert parsed is not None, "the environment rendered an unparseable scan"
            if not history:
                policy = make_policy(policy_name, seed + env.scan_index)
            policy.observe(parsed)
            action = policy.act()
        obs, _, _, _, info = env.step(action)
        if not info["advanced"]:
            raise RuntimeError(f"{policy_name} produced an invalid report: {info['error']}")
    return env.metrics()


def audit(preset: str, reward: str, episodes: int, policies: Sequence[str] | None = None,
          memory_mode: str = "none") -> dict:
    """The reward audit: every reference policy on the same ``episodes`` bands (row ids ``audit-i``)."""
    p = get_preset(preset)
    if policies is None:
        ks = sorted({1, 2, 4, 8, 12, p.max_regions} | set(range(2, p.max_regions + 1, 2)))
        policies = ["empty", "memoryless", "accumulate", "oracle"]
        policies += [f"carpet-{k}" for k in ks] + [f"random-{k}" for k in (4, 8, p.max_regions)]
    env = SpectrumEnv(EnvConfig(preset=preset, reward=reward, memory_mode=memory_mode))
    out: dict[str, dict] = {}
    for name in policies:
        ms = [run_episode(env, name, seed_for_row(f"audit-{i}")) for i in range(episodes)]
        out[name] = {  # every episode weighs the same; an undefined memory_gain counts as 0
            "score": mean_or([m["score"] for m in ms], 0.0),
            "memory_gain": mean_or([m["memory_gain"] or 0.0 for m in ms], 0.0),
            "dormant_recall": mean([m["dormant_recall"] for m in ms]),  # over the episodes that define it
        }
    blind = {k: v for k, v in out.items() if k.startswith(("carpet-", "random-"))}
    best_blind = max(blind, key=lambda k: blind[k]["score"]) if blind else None
    return {"preset": preset, "reward": reward, "episodes": episodes, "policies": out,
            "best_blind": best_blind}


def audit_checks(result: dict) -> list[tuple[str, bool]]:
    """The acceptance checks of the reward audit, as (description, passed) lines."""
    pol = result["policies"]
    ml = pol["memoryless"]["score"]
    checks = [
        (f"memoryless <= 0.2 ({ml:.3f})", ml <= 0.2),
        (f"accumulate >= 3 x memoryless ({pol['accumulate']['score']:.3f} vs {3 * ml:.3f})",
         pol["accumulate"]["score"] >= 3 * ml),
        (f"oracle = 1.0 ({pol['oracle']['score']:.4f})", abs(pol["oracle"]["score"] - 1.0) < 1e-9),
        (f"|memory_gain(memoryless)| <= 0.01 ({pol['memoryless']['memory_gain']:+.4f})",
         abs(pol["memoryless"]["memory_gain"]) <= 0.01),
    ]
    if result.get("best_blind"):
        b = pol[result["best_blind"]]["score"]
        checks.append((f"best blind ({result['best_blind']}) <= 1.25 x memoryless ({b:.3f} vs {1.25 * ml:.3f})",
                       b <= 1.25 * ml))
    return checks


def format_audit_table(result: dict) -> str:
    """The audit as a Markdown table (score, memory_gain, dormant_recall, ratio to memoryless)."""
    ml = result["policies"]["memoryless"]["score"] if "memoryless" in result["policies"] else None
    lines = [f"preset `{result['preset']}`, reward `{result['reward']}`, {result['episodes']} episodes",
             "", "| policy | score | x memoryless | memory_gain | dormant_recall |", "|---|---|---|---|---|"]
    for name, m in result["policies"].items():
        ratio = f"{m['score'] / ml:.2f}" if ml else "-"
        dr = "-" if m["dormant_recall"] is None else f"{m['dormant_recall']:.3f}"
        label = f"{name} (privileged)" if name == "oracle" else name
        lines.append(f"| {label} | {m['score']:.3f} | {ratio} | {m['memory_gain']:+.3f} | {dr} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``spectrum-rft audit --preset P --reward R --episodes N [--policies a,b] [--json] [--check]``."""
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415

    ap = argparse.ArgumentParser(prog="spectrum-rft audit", description="Reward audit: does a reward measure memory?")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--reward", default="default")
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--policies", default=None, help="comma-separated (default: the whole ladder + blind sweep)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the acceptance checks pass")
    a = ap.parse_args(argv)
    if a.episodes < 1:
        ap.error("--episodes must be >= 1")
    try:
        get_preset(a.preset)
        pols = a.policies.split(",") if a.policies else None
        for p in pols or []:
            make_policy(p)
        result = audit(a.preset, a.reward, a.episodes, pols)
    except ValueError as e:
        ap.error(str(e))
    checks = audit_checks(result) if {"memoryless", "accumulate", "oracle"} <= result["policies"].keys() else []
    if a.json:
        print(json.dumps({k: result[k] for k in ("preset", "reward", "episodes", "policies")}, indent=2))
    else:
        print(format_audit_table(result))
        if checks:
            print()
            for text, ok in checks:
                print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return 1 if a.check and not all(ok for _, ok in checks) else 0
