"""``spectrum-rft memory-report RUN_DIR...``: did GRPO teach memory use? Real-echo arm vs its control.

Reads ``spectrum-rft train`` (TRL) run directories: ``config.json`` (arm, memory mode, seed) and
``rollouts.jsonl`` (one line per completion, the env's own numbers). Per run and step: the score (the
reward), the late-half score (rollouts of scans in the episode's second half), ``gain_vs_memoryless``
(score minus the memoryless policy's on the same scan), ``carry_rate`` (share of the previous report's
regions kept), the valid-report rate and ``gain_valid`` (the gain over memoryless among valid reports
only: memory use with the format failures taken out); from TRL's ``metrics.jsonl``: the share of groups with zero reward
variance (no learning signal) and the tool-call frequency. Each run's change is its last third of steps
minus its first third.

Verdict (per metric, carry_rate and gain_vs_memoryless): **learned** when every real-arm seed's change
exceeds every control seed's change by more than the seed-to-seed spread (the larger within-arm range of
changes) and the real arm ends with a positive gain over memoryless; at least 2 seeds per arm; **not learned** when the real arm's
changes lie within the control's range or below it; **inconclusive** otherwise. Held-out evaluations
(``--heldout NAME=SUMMARY.json``, from ``spectrum-rft eval --json``) are tabulated beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from spectrum_rft.common.stats import mean

CURVES = ("score", "late_score", "gain_vs_memoryless", "gain_valid", "carry_rate", "valid")
VERDICT_METRICS = ("carry_rate", "gain_vs_memoryless")


@dataclass
class TrlRun:
    path: Path
    arm: str
    memory_mode: str
    seed: int
    steps: list[int]
    curves: dict[str, list[float | None]]  # per step
    zero_std: list[float | None]
    call_freq: list[float | None]


def load_run(path: Path) -> TrlRun:
    try:
        config = json.loads((path / "config.json").read_text())
        rollouts = [json.loads(x) for x in (path / "rollouts.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable `spectrum-rft train` run ({e})") from None
    by_step: dict[int, list[dict]] = {}
    for r in rollouts:
        by_step.setdefault(int(r["step"]), []).append(r)
    steps = sorted(by_step)
    curves: dict[str, list[float | None]] = {k: [] for k in CURVES}
    for s in steps:
        rs = by_step[s]
        curves["score"].append(mean(r["reward"] for r in rs))
        curves["late_score"].append(mean(r["reward"] for r in rs if r.get("late_mean") is not None))
        curves["gain_vs_memoryless"].append(mean(r.get("gain_vs_memoryless") for r in rs))
        curves["gain_valid"].append(mean(r.get("gain_vs_memoryless") for r in rs if not r.get("scans_skipped")))
        curves["carry_rate"].append(mean(r.get("carry_rate") for r in rs))
        curves["valid"].append(mean(1.0 - float(r.get("scans_skipped") or 0) for r in rs))
    logged = {}
    if (path / "metrics.jsonl").is_file():
        for line in (path / "metrics.jsonl").read_text().splitlines():
            m = json.loads(line)
            if "reward" in m:
                logged[int(m["step"]) - 1] = m  # TRL logs after the optimizer step: step 1 = rollouts of step 0
    return TrlRun(path=path, arm=str(config.get("arm")), memory_mode=str(config.get("memory_mode")),
                  seed=int(config.get("seed", 0)), steps=steps, curves=curves,
                  zero_std=[logged.get(s, {}).get("frac_reward_zero_std") for s in steps],
                  call_freq=[logged.get(s, {}).get("tools/call_frequency") for s in steps])


def thirds(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean of the first and of the last third of the values (None entries skipped)."""
    k = max(1, len(values) // 3)
    return mean(values[:k]), mean(values[-k:])


def change(run: TrlRun, metric: str) -> float | None:
    first, last = thirds(run.curves[metric])
    return None if first is None or last is None else last - first


def verdict(real: list[TrlRun], control: list[TrlRun]) -> dict:
    out: dict = {"metrics": {}}
    for metric in VERDICT_METRICS:
        rc = [c for c in (change(r, metric) for r in real) if c is not None]
        cc = [c for c in (change(r, metric) for r in control) if c is not None]
        if len(rc) < 2 or len(cc) < 2:
            out["metrics"][metric] = {"verdict": "inconclusive", "real_changes": rc, "control_changes": cc,
                                      "why": f"needs >= 2 seeds per arm with values (real {len(rc)}, control {len(cc)})"}
            continue
        spread = max(max(rc) - min(rc), max(cc) - min(cc))
        margin = min(rc) - max(cc)
        late_gain = mean(thirds(r.curves["gain_vs_memoryless"])[1] for r in real)
        if margin > spread and (late_gain or 0.0) > 0:
            v, why = "learned", f"every real seed rose by more than every control seed, margin {margin:+.3f} > spread {spread:.3f}"
        elif max(rc) <= max(cc):
            v, why = "not learned", f"the real arm's changes ({', '.join(f'{c:+.3f}' for c in rc)}) are within or below the control's ({', '.join(f'{c:+.3f}' for c in cc)})"
        else:
            v, why = "inconclusive", f"margin {margin:+.3f} vs seed spread {spread:.3f}; late gain over memoryless {late_gain:+.3f}"
        out["metrics"][metric] = {"verdict": v, "why": why, "real_changes": rc, "control_changes": cc,
                                  "spread": spread, "margin": margin}
    verdicts = {m["verdict"] for m in out["metrics"].values()}
    out["verdict"] = "learned" if verdicts == {"learned"} else "not learned" if verdicts == {"not learned"} \
        else "inconclusive"
    return out


def plot(runs: list[TrlRun], path: Path) -> Path:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [("score", "score (env reward)"), ("gain_vs_memoryless", "score - memoryless, same scan"),
              ("gain_valid", "score - memoryless, valid reports only"),
              ("carry_rate", "carry_rate (previous report kept)"), ("valid", "valid reports"),
              ("late_score", "late-half score"), ("zero_std", "groups with zero reward variance"),
              ("call_freq", "tool calls per completion")]
    fig, axes = plt.subplots(2, 4, figsize=(19, 8))
    colours = {"scaffold": "tab:blue", "scrambled": "tab:red"}
    for ax, (key, title) in zip(axes.flat, panels):
        for r in runs:
            ys = r.zero_std if key == "zero_std" else r.call_freq if key == "call_freq" else r.curves[key]
            pts = [(s, y) for s, y in zip(r.steps, ys) if y is not None]
            if not pts:
                continue
            xs, vs = zip(*pts)
            k = 3  # a 3-step running mean over the noisy per-step values
            sm = [sum(vs[max(0, i - k + 1):i + 1]) / len(vs[max(0, i - k + 1):i + 1]) for i in range(len(vs))]
            ax.plot(xs, sm, color=colours.get(r.memory_mode, "tab:gray"),
                    linestyle="-" if r.seed % 2 == 0 else "--", marker="o", markersize=3, label=f"{r.arm} s{r.seed}")
        ax.set_title(title)
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("GRPO on scan episodes: real echo (blue) vs scrambled control (red); 3-step running means")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def heldout_table(specs: list[str]) -> list[dict]:
    rows = []
    for spec in specs:
        name, _, file = spec.partition("=")
        summary = json.loads(Path(file).read_text())
        models = summary.get("models", {})
        for label, m in models.items():
            rows.append({"name": name if len(models) == 1 else f"{name}:{label.split('/')[-1]}", "model": label,
                         "rows": summary.get("rows"),
                         **{k: m.get(k) for k in ("score", "memory_gain", "dormant_recall", "scans_skipped",
                                                  "scans_skipped_total", "scans_total", "rows_errored")}})
    return rows


def fmt(x: float | None, nd: int = 3) -> str:
    return "n/a" if x is None else f"{x:+.{nd}f}" if x < 0 else f"{x:.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft memory-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="`spectrum-rft train` run directories (both arms, every seed)")
    ap.add_argument("--heldout", action="append", default=[], metavar="NAME=SUMMARY.json",
                    help="a held-out `spectrum-rft eval --json` summary to tabulate (repeatable)")
    ap.add_argument("--png", default=None, help="curves PNG (default: <first run's parent>/memory_curves.png)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        runs = [load_run(Path(p)) for p in a.runs]
        held = heldout_table(a.heldout)
    except (ValueError, OSError, KeyError) as e:
        print(f"spectrum-rft memory-report: {e}", file=sys.stderr)
        return 2
    real = [r for r in runs if r.memory_mode == "scaffold"]
    control = [r for r in runs if r.memory_mode == "scrambled"]
    result = {"runs": [], "heldout": held}
    for r in sorted(runs, key=lambda r: (r.memory_mode, r.seed)):
        entry = {"run": str(r.path), "arm": r.arm, "seed": r.seed, "steps": len(r.steps),
                 "zero_std_mean": mean(r.zero_std), "call_freq_mean": mean(r.call_freq)}
        for k in CURVES:
            first, last = thirds(r.curves[k])
            entry[k] = {"first_third": first, "last_third": last, "change": change(r, k)}
        result["runs"].append(entry)
    result["verdict"] = verdict(real, control) if real and control else {
        "verdict": "inconclusive", "metrics": {}, "why": "needs runs of both arms (scaffold and scrambled)"}
    png = Path(a.png) if a.png else Path(a.runs[0]).resolve().parent / "memory_curves.png"
    result["png"] = str(plot(runs, png)) if a.png != "" else None
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"memory-report: {len(runs)} run(s); per run: first third -> last third of its steps (change)")
    for k in CURVES:
        print(f"\n{k}:")
        for e in result["runs"]:
            c = e[k]
            print(f"  {e['arm']:<16} s{e['seed']:<3} {fmt(c['first_third']):>7} -> {fmt(c['last_third']):>7}  "
                  f"({fmt(c['change'])})")
    print("\nlearning signal (means over steps): groups with zero reward variance, tool calls per completion")
    for e in result["runs"]:
        print(f"  {e['arm']:<16} s{e['seed']:<3} {e['steps']:>3} steps  zero-variance {fmt(e['zero_std_mean'], 2)}"
              f"  calls {fmt(e['call_freq_mean'], 2)}")
    v = result["verdict"]
    print(f"\nverdict: {v['verdict'].upper()}")
    for metric, m in v.get("metrics", {}).items():
        print(f"  {metric}: {m['verdict']} ({m['why']})")
    if held:
        print("\nheld-out evaluation (spectrum-rft eval, whole episodes):")
        print(f"{'checkpoint':<28}{'rows':>5}{'score':>8}{'mem_gain':>10}{'dormant':>9}{'skipped':>10}")
        for h in held:
            skipped = f"{h['scans_skipped_total']}/{h['scans_total']}" if h.get("scans_total") else "-"
            print(f"{h['name']:<28}{h['rows'] or 0:>5}{fmt(h['score']):>8}{fmt(h['memory_gain']):>10}"
                  f"{fmt(h['dormant_recall']):>9}{skipped:>10}")
    if result["png"]:
        print(f"\ncurves: {result['png']}")
    return 0
