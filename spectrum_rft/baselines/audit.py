"""The reward audit: every scripted policy against a preset and reward. Does the reward measure memory?

    spectrum-rft audit --preset default --reward default --episodes 500

Memory-free policies (blind tilings carpet-K and random-K, and the memoryless report padded with random
regions, a carpet fill, or shifted or duplicated copies of its own peaks) must not beat the memoryless one
by much; padding must not raise the memoryless or the accumulate report; accumulation must beat memoryless
by a lot; the privileged oracle scores 1 (:func:`audit_checks`).
"""

from __future__ import annotations

from typing import Sequence

from spectrum_rft.baselines.policies import ScriptedModel, is_memory_free, make_policy
from spectrum_rft.common.stats import mean, mean_or, standard_error
from spectrum_rft.rollouts.driver import drive_now, refusals
from spectrum_rft.rollouts.episode import InProcessEpisode
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.environment import SpectrumEnv
from spectrum_rft.task.memory import NO_MEMORY
from spectrum_rft.task.presets import get_preset
from spectrum_rft.task.reward import reward_of
from spectrum_rft.task.seeding import seed_for_row


def run_episode(env: SpectrumEnv, policy_name: str, seed: int, history: bool = True) -> dict:
    """Play one episode with a scripted policy (:class:`~spectrum_rft.baselines.policies.ScriptedModel`
    through the episode driver, in process) and return ``env.metrics()``.

    ``history=True`` lets the policy remember every scan it has read (an ICL-style agent); with False
    it is rebuilt each scan and sees only the current one (plus whatever echo the memory mode renders).
    A report the env refuses is an error: a reference policy must always report validly.
    """
    stats = drive_now(InProcessEpisode(env, seed), ScriptedModel(policy_name, seed, history=history))
    refused = refusals(stats)
    if refused:
        raise RuntimeError(f"{policy_name} produced an invalid report: {refused[0]}")
    return env.metrics()


def default_policies(preset: str) -> list[str]:
    """The whole audit: the ladder, blind tilings, and the memory-free composites (a memoryless report padded
    with random regions, a carpet fill, shifted or duplicated copies of its own peaks), plus the same
    paddings of the accumulate report."""
    cap = get_preset(preset).max_regions
    ks = sorted({1, 2, 4, 8, 12, cap} | set(range(2, cap + 1, 2)))
    policies = ["empty", "memoryless", "accumulate", "oracle"]
    policies += [f"carpet-{k}" for k in ks] + [f"random-{k}" for k in (4, 8, cap)]
    policies += [f"memoryless+{pad}" for pad in ("random-1", "random-4", "random-8", "random", "carpet", "shift-3",
                                                 "shift-4.5", "shift-6", "dup")]
    policies += [f"accumulate+{pad}" for pad in ("random-4", "random", "carpet", "shift-4.5", "dup")]
    return policies


def policy_kind(name: str) -> str:
    """How a policy stands to memory: ``baseline`` (empty, memoryless), ``memory`` (accumulate and its
    paddings), ``privileged`` (oracle), ``blind`` (tilings) or ``padded`` (memoryless padded: memory-free)."""
    if name == "oracle":
        return "privileged"
    if name.startswith("accumulate"):
        return "memory"
    if name.startswith("memoryless+"):
        return "padded"
    return "blind" if is_memory_free(name) else "baseline"


def audit(preset: str, reward: str, episodes: int, policies: Sequence[str] | None = None,
          memory_mode: str = NO_MEMORY) -> dict:
    """The reward audit: every reference policy on the same ``episodes`` bands (row ids ``audit-i``).

    Besides each policy's means, ``padding`` compares every padded policy with its base on the same bands:
    the mean per-episode difference and its standard error (paired)."""
    policies = default_policies(preset) if policies is None else list(policies)
    config = EnvConfig(preset=preset, reward=reward, memory_mode=memory_mode)
    env = SpectrumEnv(config)
    out: dict[str, dict] = {}
    per_episode: dict[str, list[float]] = {}
    for name in policies:
        ms = [run_episode(env, name, seed_for_row(f"audit-{i}")) for i in range(episodes)]
        per_episode[name] = [m["score"] for m in ms]
        out[name] = {  # every episode weighs the same; an undefined memory_gain counts as 0
            "score": mean_or([m["score"] for m in ms], 0.0),
            "memory_gain": mean_or([m["memory_gain"] or 0.0 for m in ms], 0.0),
            "dormant_recall": mean([m["dormant_recall"] for m in ms]),  # over the episodes that define it
        }
    free = {k: v for k, v in out.items() if is_memory_free(k)}
    best_free = max(free, key=lambda k: free[k]["score"]) if free else None
    padding = {}
    for name in out:
        base = name.split("+", 1)[0]
        if "+" in name and base in per_episode:
            d = [a - b for a, b in zip(per_episode[name], per_episode[base])]
            padding[name] = {"base": base, "diff": mean_or(d, 0.0), "se": standard_error(d) or 0.0}
    return {"preset": config.preset, "reward": config.reward, "episodes": episodes, "policies": out,
            "best_memory_free": best_free, "padding": padding}


def audit_checks(result: dict) -> list[tuple[str, bool]]:
    """The acceptance checks of the reward audit, as (description, passed) lines, against the bars the reward
    itself sets (:class:`~spectrum_rft.task.reward.AuditBars`)."""
    bars = reward_of(result["reward"]).audit
    pol = result["policies"]
    ml = pol["memoryless"]["score"]
    checks = [
        (f"memoryless <= {bars.memoryless_max:g} ({ml:.3f})", ml <= bars.memoryless_max),
        (f"accumulate >= {bars.memory_bar:g} x memoryless ({pol['accumulate']['score']:.3f} vs "
         f"{bars.memory_bar * ml:.3f})", pol["accumulate"]["score"] >= bars.memory_bar * ml),
        (f"oracle = 1.0 ({pol['oracle']['score']:.4f})", abs(pol["oracle"]["score"] - 1.0) < 1e-9),
        (f"|memory_gain(memoryless)| <= 0.01 ({pol['memoryless']['memory_gain']:+.4f})",
         abs(pol["memoryless"]["memory_gain"]) <= 0.01),
    ]
    best = result.get("best_memory_free")
    if best:
        b = pol[best]["score"]
        ratio = b / ml if ml else float("inf")
        aim = "within" if ratio <= bars.free_aim else "above"
        checks.append((f"every memory-free policy <= {bars.free_bar:g} x memoryless (best: {best} {b:.3f} = "
                       f"{ratio:.2f}x, {aim} the {bars.free_aim:g}x aim)", b <= bars.free_bar * ml))
    pads = result.get("padding") or {}
    if pads:
        worst = max(pads, key=lambda k: pads[k]["diff"] - pads[k]["se"])
        w = pads[worst]
        checks.append((f"padding never raises its base beyond 1 SE (closest: {worst} {w['diff']:+.4f} vs "
                       f"{w['base']}, SE {w['se']:.4f})", all(p["diff"] <= p["se"] for p in pads.values())))
    return checks


def format_audit_table(result: dict) -> str:
    """The audit as Markdown: the policies (kind, score, ratio to memoryless, memory_gain, dormant_recall),
    then each padding against its base on the same bands (paired mean difference +- SE)."""
    ml = result["policies"]["memoryless"]["score"] if "memoryless" in result["policies"] else None
    lines = [f"preset `{result['preset']}`, reward `{result['reward']}`, {result['episodes']} episodes",
             "", "| policy | kind | score | x memoryless | memory_gain | dormant_recall |", "|---|---|---|---|---|---|"]
    best = result.get("best_memory_free")
    for name, m in result["policies"].items():
        ratio = f"{m['score'] / ml:.2f}" if ml else "-"
        dr = "-" if m["dormant_recall"] is None else f"{m['dormant_recall']:.3f}"
        label = f"{name} (best memory-free)" if name == best else name
        lines.append(f"| {label} | {policy_kind(name)} | {m['score']:.3f} | {ratio} | {m['memory_gain']:+.3f} | {dr} |")
    pads = result.get("padding") or {}
    if pads:
        lines += ["", "| padding | vs | score difference (paired) | SE |", "|---|---|---|---|"]
        lines += [f"| {k} | {p['base']} | {p['diff']:+.4f} | {p['se']:.4f} |" for k, p in pads.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``spectrum-rft audit --preset P --reward R --episodes N [--policies a,b] [--json] [--check]``."""
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415

    ap = argparse.ArgumentParser(prog="spectrum-rft audit", description="Reward audit: does a reward measure memory?")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--reward", default="default")
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--policies", default=None,
                    help="comma-separated (default: the ladder, blind tilings and padded composites)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the acceptance checks pass")
    a = ap.parse_args(argv)
    if a.episodes < 1:
        ap.error("--episodes must be >= 1")
    try:
        if get_preset(a.preset).seed_is_run_index:
            ap.error(f"preset {a.preset!r} plays a fixed schedule by run index, not bands drawn per episode: "
                     "judge it with `spectrum-rft bench90`")
        pols = a.policies.split(",") if a.policies else None
        for p in pols or []:
            make_policy(p)
        result = audit(a.preset, a.reward, a.episodes, pols)
    except ValueError as e:
        ap.error(str(e))
    checks = audit_checks(result) if {"memoryless", "accumulate", "oracle"} <= result["policies"].keys() else []
    if a.json:
        print(json.dumps({k: result[k] for k in ("preset", "reward", "episodes", "policies", "padding")}, indent=2))
    else:
        print(format_audit_table(result))
        if checks:
            print()
            for text, ok in checks:
                print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return 1 if a.check and not all(ok for _, ok in checks) else 0
