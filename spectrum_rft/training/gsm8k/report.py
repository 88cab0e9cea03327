"""``spectrum-rft train-report RUN_DIR...``: compare GSM8K card runs of ``spectrum-rft train --task gsm8k``.

Per arm and seed: peak, final and peak-minus-final accuracy (in points: score x 100), then the mean over
seeds per arm; the experiment card's verdict for each baseline/treatment pair (treatment = the baseline
arm with score centring); plots of the eval score and of the stability signals against steps.

The card's rule (2609.20807 replication card): validated if, averaged over seeds, the treatment's drop is
<= 2 points, at least 3 points smaller than the baseline's, and its final accuracy is at most 1.5 points
below the baseline's; failed if the drops differ by less than 3 points (seed noise on 500 items).
Anything else is reported as inconclusive, with the reason.

Runs are only compared when they share an evaluator identity and an item manifest; otherwise the
report says so and gives no verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spectrum_rft.common.stats import mean, mean_or

SIGNALS = ("reward", "loss", "grad_norm", "logprob_gap", "entropy", "centring_l1", "step_time")  # TRL log keys
VALIDATE_MAX_DROP = 2.0
MIN_DROP_GAP = 3.0
MAX_FINAL_DEFICIT = 1.5
CARD_SEEDS = 2


@dataclass
class Run:
    path: Path
    arm: str
    seed: int
    config: dict
    evals: list[dict]
    metrics: list[dict]
    evaluator_id: str | None
    manifest_sha256: str | None
    problems: list[str] = field(default_factory=list)

    @property
    def scores(self) -> list[tuple[int, float]]:
        return [(int(e["step"]), 100.0 * float(e["score"])) for e in self.evals]

    @property
    def peak(self) -> float:
        return max(s for _, s in self.scores)

    @property
    def final(self) -> float:
        return self.scores[-1][1]

    @property
    def drop(self) -> float:
        return self.peak - self.final


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_run(path: str | Path) -> Run:
    p = Path(path)
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"{p}: not a run directory (no config.json)")
    config = json.loads((p / "config.json").read_text())
    evals = sorted(_jsonl(p / "eval.jsonl"), key=lambda e: e["step"])
    metrics = [m for m in _jsonl(p / "metrics.jsonl") if "reward" in m]  # TRL's per-step lines (not its summary)
    evaluator = json.loads((p / "evaluator.json").read_text()) if (p / "evaluator.json").is_file() else {}
    items = json.loads((p / "items.json").read_text()) if (p / "items.json").is_file() else {}
    run = Run(p, str(config.get("arm", "?")), int(config.get("seed", 0)), config, evals, metrics,
              evaluator.get("evaluator_id"), items.get("eval_manifest_sha256"))
    if not evals:
        run.problems.append("no eval results")
    ids = {e.get("evaluator_id") for e in evals}
    if run.evaluator_id is None or ids != {run.evaluator_id}:
        run.problems.append("eval results do not all carry the run's evaluator identity")
    if not (p / "code_revision.json").is_file():
        run.problems.append("no code revision")
    for e in evals:
        if not (p / e.get("predictions", "")).is_file():
            run.problems.append(f"step {e['step']}: predictions file missing")
    return run


def summarise(runs: list[Run]) -> dict:
    """Per-run and per-arm numbers (points), plus the pairing of baseline and treatment arms."""
    per_run: list[dict[str, Any]]  # JSON rows: each run's numbers under its arm's name and seed
    per_run = [{"run": str(r.path), "arm": r.arm, "seed": r.seed, "peak": r.peak, "final": r.final,
                "drop": r.drop, "peak_step": max(r.scores, key=lambda x: x[1])[0], "final_step": r.scores[-1][0],
                "steps_logged": len(r.metrics),
                "mean_step_seconds": mean(m.get("step_time") for m in r.metrics),
                "problems": r.problems} for r in runs if r.evals]
    arms: dict[str, dict] = {}
    for row in per_run:
        arms.setdefault(row["arm"], {"seeds": [], "rows": []})
        arms[row["arm"]]["seeds"].append(row["seed"])
        arms[row["arm"]]["rows"].append(row)
    per_arm = {a: {"seeds": sorted(v["seeds"]), "peak": mean(x["peak"] for x in v["rows"]),
                   "final": mean(x["final"] for x in v["rows"]), "drop": mean(x["drop"] for x in v["rows"])}
               for a, v in arms.items()}
    return {"runs": per_run, "arms": per_arm}


def pairs(arm_names: list[str]) -> list[tuple[str, str]]:
    """(baseline, treatment) pairs: an arm and the same arm with score centring (``+sc``)."""
    out = []
    for a in arm_names:
        if "+sc" in a:
            continue
        loss, _, rest = a.partition("-")
        t = loss + "+sc" + ("-" + rest if rest else "")
        if t in arm_names:
            out.append((a, t))
    return out


def verdict(base: dict, treat: dict) -> tuple[str, str]:
    """The card's verdict from per-arm means (points)."""
    gap = base["drop"] - treat["drop"]
    deficit = base["final"] - treat["final"]
    if abs(gap) < MIN_DROP_GAP:
        return "failed", f"drops differ by {gap:+.2f} points (< {MIN_DROP_GAP:g}: within seed noise)"
    if gap <= -MIN_DROP_GAP:
        return "failed", f"the treatment dropped {-gap:.2f} points more than the baseline"
    if treat["drop"] <= VALIDATE_MAX_DROP and deficit <= MAX_FINAL_DEFICIT:
        return "validated", (f"treatment drop {treat['drop']:.2f} <= {VALIDATE_MAX_DROP:g}, {gap:.2f} points smaller "
                             f"than the baseline's; final {deficit:+.2f} points below the baseline")
    why = []
    if treat["drop"] > VALIDATE_MAX_DROP:
        why.append(f"treatment drop {treat['drop']:.2f} > {VALIDATE_MAX_DROP:g}")
    if deficit > MAX_FINAL_DEFICIT:
        why.append(f"treatment final {deficit:.2f} points below the baseline (> {MAX_FINAL_DEFICIT:g})")
    return "inconclusive", "; ".join(why)


def comparability(runs: list[Run]) -> list[str]:
    issues = []
    ev = {r.evaluator_id for r in runs}
    if len(ev) > 1:
        issues.append(f"runs use {len(ev)} different evaluator identities: scores are not comparable")
    man = {r.manifest_sha256 for r in runs}
    if len(man) > 1:
        issues.append(f"runs use {len(man)} different eval item manifests: scores are not comparable")
    return issues


def plot(runs: list[Run], out: Path) -> list[Path]:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    arms = sorted({r.arm for r in runs})
    colour = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(arms)}
    style = ["-", "--", ":", "-."]
    files = []
    metric = runs[0].evals[0].get("metric", "score") if runs and runs[0].evals else "score"
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in runs:
        if r.evals:
            xs, ys = zip(*r.scores)
            ax.plot(xs, ys, style[r.seed % 4], marker="o", color=colour[r.arm], label=f"{r.arm} s{r.seed}")
    ax.set_xlabel("step")
    ax.set_ylabel(f"{metric} (points)")
    ax.set_title("eval score vs step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(out / "eval_score.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    sig = [s for s in SIGNALS if any(m.get(s) is not None for r in runs for m in r.metrics)]
    if sig:
        fig, axes = plt.subplots(len(sig), 1, figsize=(7, 2.2 * len(sig)), sharex=True)
        axes = [axes] if len(sig) == 1 else list(axes)
        for ax, s in zip(axes, sig):
            for r in runs:
                pts = [(m["step"], m[s]) for m in r.metrics if m.get(s) is not None]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, style[r.seed % 4], color=colour[r.arm], label=f"{r.arm} s{r.seed}")
            ax.set_ylabel(s, fontsize=8)
        axes[0].legend(fontsize=7)
        axes[-1].set_xlabel("step")
        fig.tight_layout()
        files.append(out / "stability.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)
    return files


def signal_table(runs: list[Run]) -> list[str]:
    lines = [f"{'arm':<22}{'seed':>5}{'steps':>6}{'reward':>9}{'gnorm':>10}{'|gap|':>11}{'entropy':>9}"
             f"{'centr_l1':>10}{'s/step':>8}"]
    for r in runs:
        ms = r.metrics

        def avg(k, ms=ms):
            return mean_or((m.get(k) for m in ms), float("nan"))

        lines.append(f"{r.arm:<22}{r.seed:>5}{len(ms):>6}{avg('reward'):>9.4f}{avg('grad_norm'):>10.4g}"
                     f"{avg('logprob_gap'):>11.3g}{avg('entropy'):>9.3f}{avg('centring_l1'):>10.3g}"
                     f"{avg('step_time'):>8.2f}")
    return lines


def render(runs: list[Run], summary: dict, verdicts: list[dict], issues: list[str], plots: list[Path]) -> str:
    metric = runs[0].evals[0].get("metric", "score") if runs and runs[0].evals else "score"
    lines = [f"train-report: {len(runs)} run(s); {metric} in points (x100)", "",
             f"{'arm':<22}{'seed':>5}{'peak':>8}{'@step':>7}{'final':>8}{'@step':>7}{'drop':>8}"]
    for row in summary["runs"]:
        lines.append(f"{row['arm']:<22}{row['seed']:>5}{row['peak']:>8.2f}{row['peak_step']:>7}{row['final']:>8.2f}"
                     f"{row['final_step']:>7}{row['drop']:>8.2f}")
    lines += ["", f"{'arm (mean over seeds)':<22}{'seeds':>7}{'peak':>8}{'final':>8}{'drop':>8}"]
    for arm, a in sorted(summary["arms"].items()):
        lines.append(f"{arm:<22}{','.join(map(str, a['seeds'])):>7}{a['peak']:>8.2f}{a['final']:>8.2f}{a['drop']:>8.2f}")
    lines += ["", "stability signals (means over logged steps):", *signal_table(runs), ""]
    for v in verdicts:
        lines.append(f"verdict {v['treatment']} vs {v['baseline']}: {v['verdict'].upper()} ({v['reason']})")
        if v.get("notes"):
            lines += [f"  note: {n}" for n in v["notes"]]
    if not verdicts:
        lines.append("verdict: none (no baseline/treatment pair: an arm and the same arm with +sc)")
    for i in issues:
        lines.append(f"warning: {i}")
    for r in runs:
        for p in r.problems:
            lines.append(f"warning: {r.path}: {p}")
    if plots:
        lines.append("plots: " + ", ".join(str(p) for p in plots))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft train-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories of spectrum-rft train")
    ap.add_argument("--baseline", help="baseline arm (default: every arm that has a +sc twin)")
    ap.add_argument("--treatment", help="treatment arm (default: the baseline's +sc twin)")
    ap.add_argument("--out", help="folder for the plots and report.json (default: <first run's parent>/report)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    try:
        runs = [load_run(p) for p in args.runs]
    except (FileNotFoundError, json.JSONDecodeError) as e:
        print(f"spectrum-rft train-report: {e}", file=sys.stderr)
        return 2
    runs = sorted(runs, key=lambda r: (r.arm, r.seed, str(r.path)))
    scored = [r for r in runs if r.evals]
    summary = summarise(scored)
    issues = comparability(scored)
    names = sorted(summary["arms"])
    if args.baseline or args.treatment:
        b = args.baseline
        t = args.treatment or (pairs([b, *names]) or [(b, b + "+sc")])[0][1]
        todo = [(b, t)]
    else:
        todo = pairs(names)
    verdicts = []
    for b, t in todo:
        if b not in summary["arms"] or t not in summary["arms"]:
            print(f"spectrum-rft train-report: arm {b if b not in summary['arms'] else t!r} not among {names}",
                  file=sys.stderr)
            return 2
        ba, ta = summary["arms"][b], summary["arms"][t]
        trained = [m.get("n_trained_tokens") for r in scored if r.arm in (b, t) for m in r.metrics]
        if issues:
            v, why = "not comparable", "; ".join(issues)
        elif trained and all(n == 0 for n in trained):
            v, why = "inconclusive", ("no learning signal: every advantage was zero at every step of both arms "
                                      "(no group had differing rewards), so neither policy ever changed")
        else:
            v, why = verdict(ba, ta)
        notes = []
        n = min(len(ba["seeds"]), len(ta["seeds"]))
        if n < CARD_SEEDS:
            notes.append(f"{n} seed(s) per arm; the card averages over {CARD_SEEDS}")
        if b.split("-")[0] == "is":
            notes.append("w(r)=r: IS and IS+centring have identical gradients by construction")
        cl = [c for r in scored if r.arm in (b, t) for m in r.metrics if (c := m.get("centring_l1")) is not None]
        if cl:
            notes.append(f"mean centring term size (logit-space L1 per unit advantage): {mean(cl):.3g}"
                         + (" -- zero: the two arms cannot differ" if max(cl) == 0 else ""))
        verdicts.append({"baseline": b, "treatment": t, "verdict": v, "reason": why, "notes": notes,
                         "baseline_arm": ba, "treatment_arm": ta})
    out = Path(args.out) if args.out else Path(args.runs[0]).resolve().parent / "report"
    plots = [] if args.no_plots or not scored else plot(scored, out)
    report = {"summary": summary, "verdicts": verdicts, "issues": issues}
    if not args.no_plots and scored:
        (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps(report, indent=2, default=str) if args.json else render(scored, summary, verdicts, issues, plots))
    return 0 if scored else 1


if __name__ == "__main__":
    raise SystemExit(main())
