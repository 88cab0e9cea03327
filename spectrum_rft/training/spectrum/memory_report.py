"""``spectrum-rft memory-report RUN_DIR...``: did GRPO teach memory use? Real-echo arm vs its control.

Reads ``spectrum-rft train`` (TRL) run directories: ``config.json`` (arm, memory mode, seed) and
``rollouts.jsonl`` (one line per completion, the env's own numbers). Per run and step: the score (the
reward), the late-half score (rollouts of scans in the episode's second half), ``gain_vs_memoryless``
(score minus the memoryless policy's on the same scan), ``gain_valid`` (that gain among valid reports only:
memory use with the format failures taken out), ``echo_copy`` (valid reports: the share of the echoed
centres the report reproduces within half a width; the same quantity in both arms, unlike ``carry_rate``,
which compares with the true previous report the control never sees), ``carry_rate`` and the valid-report
rate; from TRL's ``metrics.jsonl``: the share of groups with zero reward variance (no learning signal) and
the tool-call frequency.

**The verdict rule** (issue 19, fixed before the runs it judges):

* per run, delta = mean over the last third of its steps minus mean over the first third, for
  ``gain_valid`` and for ``echo_copy``;
* d = the real arm's mean delta gain_valid minus the control's; SE = the standard error of that difference
  across seeds: the seeds that ran in both arms are paired (one seed = the same rows in the same order in
  both arms), SE = sd(per-seed differences) / sqrt(n);
* **LEARNED** if d > 2 SE and the real arm's delta echo_copy is positive in every seed; **NOT LEARNED** if
  d <= 2 SE (the real arm's delta gain within that noise of the control's, or below it); **INCONCLUSIVE**
  otherwise (d > 2 SE without a rising echo_copy in every real seed), and whenever fewer than 2 seeds ran
  in both arms.

What GRPO's advantages rewarded, per run (:func:`group_signal`, from the groups of ``rollouts.jsonl``):
the mean within-group reward sd (what the advantages are made of), the share of the within-group sum of
squares that is valid vs invalid reports (the format confound of section 8), and the mean within-group
least-squares slope of the reward on ``echo_copy`` among valid reports (positive: within a group, the
completions that reproduce more of the echo score higher, so GRPO pushes towards copying it).

Held-out evaluations (``--heldout NAME=SUMMARY.json``, from ``spectrum-rft eval --json``) are tabulated
beside it.

**The whole-episode rule** (issue 40, fixed before the runs it judges; ``--whole-*``,
:mod:`.episode_verdict`) is the primary one from evidence v4 on, with the two below as secondary.

**The held-out rule** (issue 28, fixed before the runs it judges; :func:`panel_verdict`), the primary one of
evidence v3, with the rule above as secondary. Metric: ``beyond_current`` = a report's score minus the
score of the same report restricted to its centres within half a width of a current peak (the env records
it per scan). Panel: ``spectrum-rft scan-eval`` of every checkpoint on the same >= 64 held-out scan episodes
of the real-echo arm, greedy (temperature 0) under the grammar (``--panel-warm``, ``--panel-real SEED=FILE``,
``--panel-control SEED=FILE``). Per seed s, paired by scan: ``d_s`` = mean beyond_current(real_s) -
beyond_current(control_s), ``u_s`` = mean beyond_current(real_s) - beyond_current(warm start). **LEARNED** if
mean d_s > 2 SE (SE = sd of d_s / sqrt(n seeds)), d_s > 0 and u_s > 0 in every seed; **NOT LEARNED** if mean
d_s <= 2 SE; otherwise INCONCLUSIVE (and with fewer than 2 seeds in both arms).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from spectrum_rft.common.stats import linear_fit, mean, pstdev, standard_error, thirds, trailing_mean
from spectrum_rft.task.memory import CONTROL_ECHO, REAL_ECHO
from spectrum_rft.training.spectrum.episode_verdict import (by_seed, format_power, format_verdict, judge, load_episodes,
                                                          power_check)
from spectrum_rft.training.spectrum.scan_eval import Unpaired, load_result, paired_difference

CURVES = ("score", "late_score", "gain_vs_memoryless", "gain_valid", "echo_copy", "carry_rate", "valid")
GAIN, ECHO = "gain_valid", "echo_copy"  # the verdict's two metrics


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
    group: dict  # group_signal(): what the within-group advantages rewarded


def group_signal(rollouts: list[dict]) -> dict:
    """Per GRPO group (one step's completions of one row): the reward sd, the valid-vs-invalid share of the
    within-group sum of squares (pooled over groups), and the slope of reward on ``echo_copy`` among valid
    reports (groups with >= 3 such completions and more than one echo_copy value); its standard error across
    groups."""
    groups: dict[tuple, list[dict]] = {}
    for r in rollouts:
        groups.setdefault((r["step"], r["row_id"]), []).append(r)
    sds, slopes, ss, ss_valid = [], [], 0.0, 0.0
    for g in groups.values():
        rw = [float(x["reward"]) for x in g]
        m = mean(rw) or 0.0
        ss += sum((x - m) ** 2 for x in rw)
        sds.append(pstdev(rw))
        for part in ([x["reward"] for x in g if x.get("scans_skipped")], [x["reward"] for x in g if not x.get("scans_skipped")]):
            if part:
                ss_valid += len(part) * ((mean(part) or 0.0) - m) ** 2
        pts = [(float(x["echo_copy"]), float(x["reward"])) for x in g
               if not x.get("scans_skipped") and x.get("echo_copy") is not None]
        fit = linear_fit([e for e, _ in pts], [r for _, r in pts]) if len(pts) >= 3 else None
        if fit is not None:  # None: fewer than two distinct echo_copy values
            slopes.append(fit.slope)
    return {"groups": len(groups), "reward_sd": mean(sds), "format_share": ss_valid / ss if ss > 0 else None,
            "echo_slope": mean(slopes), "echo_slope_se": standard_error(slopes),
            "echo_slope_groups": len(slopes)}


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
        curves["echo_copy"].append(mean(r.get("echo_copy") for r in rs if not r.get("scans_skipped")))
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
                  call_freq=[logged.get(s, {}).get("tools/call_frequency") for s in steps], group=group_signal(rollouts))


def change(run: TrlRun, metric: str) -> float | None:
    first, last = thirds(run.curves[metric])
    return None if first is None or last is None else last - first


def verdict(real: list[TrlRun], control: list[TrlRun]) -> dict:
    """The pre-registered rule (module docstring), with every number it used."""
    by_seed = {r.seed: r for r in control}
    pairs = [(r, by_seed[r.seed]) for r in sorted(real, key=lambda r: r.seed) if r.seed in by_seed]
    rows = [{"seed": r.seed, "real_delta_gain": change(r, GAIN), "control_delta_gain": change(c, GAIN),
             "real_delta_echo_copy": change(r, ECHO), "control_delta_echo_copy": change(c, ECHO)} for r, c in pairs]
    rows = [x for x in rows if x["real_delta_gain"] is not None and x["control_delta_gain"] is not None]
    out: dict = {"rule": "LEARNED if d > 2 SE and real delta echo_copy > 0 in every seed; NOT LEARNED if d <= 2 SE",
                 "seeds": rows}
    if len(rows) < 2:
        return {**out, "verdict": "inconclusive",
                "why": f"needs >= 2 seeds that ran in both arms (have {len(rows)})"}
    diffs = [g - c for x in rows  # rows holds both changes: the None checks only narrow their type
             if (g := x["real_delta_gain"]) is not None and (c := x["control_delta_gain"]) is not None]
    d = mean(diffs)
    se = standard_error(diffs)
    assert d is not None and se is not None  # rows (each with both changes) has >= 2 entries: so has diffs
    echo_up = all((x["real_delta_echo_copy"] or 0.0) > 0 for x in rows)
    out.update(d=d, se=se, threshold=2 * se, echo_copy_rises_in_every_real_seed=echo_up,
               real_mean_delta_gain=mean(x["real_delta_gain"] for x in rows),
               control_mean_delta_gain=mean(x["control_delta_gain"] for x in rows))
    if d > 2 * se and echo_up:
        v, why = "learned", f"d = {d:+.4f} > 2 SE = {2 * se:.4f}, and echo_copy rose in every real seed"
    elif d <= 2 * se:
        v, why = "not learned", f"d = {d:+.4f} <= 2 SE = {2 * se:.4f}: the real arm's gain moved within the noise of the control's (or below it)"
    else:
        v, why = "inconclusive", f"d = {d:+.4f} > 2 SE = {2 * se:.4f}, but echo_copy did not rise in every real seed"
    return {**out, "verdict": v, "why": why}


PANEL_MIN_SCANS = 64
PANEL_METRIC = "beyond_current"


def check_panel(result: dict, name: str, min_scans: int = PANEL_MIN_SCANS) -> None:
    """A scan-eval result fit for the held-out panel: greedy, under the grammar, enough scans, the metric
    recorded. Raises :class:`Unpaired` (one line) otherwise."""
    if result.get("temperature") != 0 or not result.get("constrained"):
        raise Unpaired(f"{name}: the panel is greedy under the grammar (scan-eval --temperature 0 --constrained), "
                       f"got temperature {result.get('temperature')}, constrained {result.get('constrained')}")
    if result.get("scans", 0) < min_scans:
        raise Unpaired(f"{name}: {result.get('scans')} scans; the panel needs >= {min_scans}")
    if any(PANEL_METRIC not in r for r in result.get("records", [])):
        raise Unpaired(f"{name}: its records have no {PANEL_METRIC} (made before the metric existed)")


def panel_verdict(warm: dict, real: dict[int, dict], control: dict[int, dict],
                  min_scans: int = PANEL_MIN_SCANS) -> dict:
    """The held-out rule (module docstring) over scan-eval results: the warm start's, and each seed's real-arm
    and control checkpoint's, all on the same scans. Every number it used is in the result."""
    for name, r in [("warm start", warm), *[(f"real s{k}", v) for k, v in real.items()],
                    *[(f"control s{k}", v) for k, v in control.items()]]:
        check_panel(r, name, min_scans)
    rows = []
    for s in sorted(set(real) & set(control)):
        d = paired_difference(control[s], real[s])[PANEL_METRIC]
        u = paired_difference(warm, real[s])[PANEL_METRIC]
        rows.append({"seed": s, "d": d["mean"], "d_se": d["se"], "u": u["mean"], "u_se": u["se"], "scans": d["n"]})
    out: dict = {"rule": "LEARNED if mean d_s > 2 SE, d_s > 0 and u_s > 0 in every seed; NOT LEARNED if mean "
                         "d_s <= 2 SE; else INCONCLUSIVE", "metric": PANEL_METRIC, "seeds": rows}
    if len(rows) < 2:
        return {**out, "verdict": "inconclusive", "why": f"needs >= 2 seeds in both arms (have {len(rows)})"}
    ds = [x["d"] for x in rows]
    d, se = mean(ds), standard_error(ds)
    assert d is not None and se is not None  # len(ds) == len(rows) >= 2
    all_d, all_u = all(x["d"] > 0 for x in rows), all(x["u"] > 0 for x in rows)
    out.update(d=d, se=se, threshold=2 * se, d_positive_in_every_seed=all_d, u_positive_in_every_seed=all_u)
    if d > 2 * se and all_d and all_u:
        v, why = "learned", f"mean d = {d:+.4f} > 2 SE = {2 * se:.4f}; d_s > 0 and u_s > 0 in every seed"
    elif d <= 2 * se:
        v, why = "not learned", f"mean d = {d:+.4f} <= 2 SE = {2 * se:.4f}"
    else:
        v, why = "inconclusive", (f"mean d = {d:+.4f} > 2 SE = {2 * se:.4f}, but not every seed has d_s > 0 "
                                  f"({all_d}) and u_s > 0 ({all_u})")
    return {**out, "verdict": v, "why": why}


def _seed_files(specs: list[str], flag: str) -> dict[int, dict]:
    return by_seed(specs, flag, load_result, "0=real-s0.json")


def plot(runs: list[TrlRun], path: Path) -> Path:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [("score", "score (env reward)"), ("gain_vs_memoryless", "score - memoryless, same scan"),
              ("gain_valid", "score - memoryless, valid reports only"),
              ("echo_copy", "echo_copy (echoed centres reproduced, valid)"),
              ("carry_rate", "carry_rate (previous report kept)"), ("valid", "valid reports"),
              ("zero_std", "groups with zero reward variance"), ("call_freq", "tool calls per completion")]
    fig, axes = plt.subplots(2, 4, figsize=(19, 8))
    colours = {REAL_ECHO: "tab:blue", CONTROL_ECHO: "tab:red"}
    for ax, (key, title) in zip(axes.flat, panels):
        for r in runs:
            ys = r.zero_std if key == "zero_std" else r.call_freq if key == "call_freq" else r.curves[key]
            pts = [(s, y) for s, y in zip(r.steps, ys) if y is not None]
            if not pts:
                continue
            xs, vs = zip(*pts)
            sm = trailing_mean(vs, 3)  # a 3-step running mean over the noisy per-step values
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


def print_whole(a: argparse.Namespace) -> int:
    """The whole-episode verdict (:mod:`.episode_verdict`) of ``--whole-*``, printed (or JSON); 2 on bad input."""
    try:
        v = judge(a.whole_warm, a.whole_real, a.whole_control, a.whole_exclude)
        pc = power_check(load_episodes(a.whole_warm), load_episodes(a.whole_perfect)) if a.whole_perfect else None
    except (ValueError, OSError, KeyError) as e:  # VerdictInputError is a ValueError
        print(f"spectrum-rft memory-report: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps({"whole": v, **({"power": pc} if pc else {})}, indent=2))
    else:
        print("\n".join(format_verdict(v) + (format_power(pc) if pc else [])))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="spectrum-rft memory-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="`spectrum-rft train` run directories (both arms, every seed)")
    ap.add_argument("--panel-warm", metavar="FILE", help="the held-out panel: the warm start's scan-eval --out file")
    ap.add_argument("--panel-real", action="append", default=[], metavar="SEED=FILE",
                    help="the held-out panel: a real-arm checkpoint's scan-eval file (repeatable)")
    ap.add_argument("--panel-control", action="append", default=[], metavar="SEED=FILE",
                    help="the held-out panel: a control checkpoint's scan-eval file (repeatable)")
    ap.add_argument("--heldout", action="append", default=[], metavar="NAME=SUMMARY.json",
                    help="a held-out `spectrum-rft eval --json` summary to tabulate (repeatable)")
    ap.add_argument("--whole-warm", metavar="EVAL_DIR",
                    help="the whole-episode rule (primary from evidence v4): the warm start's spectrum-rft eval folder")
    ap.add_argument("--whole-real", action="append", default=[], metavar="SEED=EVAL_DIR",
                    help="the whole-episode rule: a real-arm checkpoint's eval folder, same bands (repeatable)")
    ap.add_argument("--whole-control", action="append", default=[], metavar="SEED=EVAL_DIR",
                    help="the whole-episode rule: a control checkpoint's eval folder, same bands (repeatable)")
    ap.add_argument("--whole-exclude", action="append", default=[], metavar="PATH",
                    help="a training run folder (its rollouts.jsonl) or SFT/training dataset whose bands the held-out "
                         "bands must not include (repeatable; checked by fingerprint)")
    ap.add_argument("--whole-perfect", metavar="EVAL_DIR",
                    help="with --whole-warm, the power check before any run: perfect use of the echo (spectrum-rft eval "
                         "--model accumulate) on the same bands")
    ap.add_argument("--png", default=None, help="curves PNG (default: <first run's parent>/memory_curves.png)")
    ap.add_argument("--json", action="store_true")
    return ap


def print_panel(panel: dict) -> None:
    """Section 11's held-out panel rule, seed by seed, and its verdict."""
    print("held-out rule (pre-registered, issue 28): per seed, paired by scan, d_s = beyond_current(real_s) - "
          "beyond_current(control_s), u_s = beyond_current(real_s) - beyond_current(warm start)")
    for x in panel["seeds"]:
        print(f"  seed {x['seed']}: d {x['d']:+.4f} (se {fmt(x['d_se'], 4)})  u {x['u']:+.4f} "
              f"(se {fmt(x['u_se'], 4)})  {x['scans']} scans")
    if "d" in panel:
        print(f"  mean d = {panel['d']:+.4f}, SE = {panel['se']:.4f}, 2 SE = {panel['threshold']:.4f}")
    print(f"verdict (held-out, primary): {panel['verdict'].upper()} ({panel['why']})")


def training_result(runs: list, held: list, panel: dict | None, png_arg: str | None, first_run: str) -> dict:
    """Every run's curves (first and last third), learning signal and group signal, section 10's training-curve
    verdict, and the curves' PNG (``png_arg``: a path, "" for none, None for the first run's parent)."""
    real = [r for r in runs if r.memory_mode == REAL_ECHO]
    control = [r for r in runs if r.memory_mode == CONTROL_ECHO]
    result: dict = {"runs": [], "heldout": held, "panel": panel}  # the report's JSON: runs, verdicts, the PNG's path
    for r in sorted(runs, key=lambda r: (r.memory_mode, r.seed)):
        entry = {"run": str(r.path), "arm": r.arm, "seed": r.seed, "steps": len(r.steps),
                 "zero_std_mean": mean(r.zero_std), "call_freq_mean": mean(r.call_freq), "group_signal": r.group}
        for k in CURVES:
            first, last = thirds(r.curves[k])
            entry[k] = {"first_third": first, "last_third": last, "change": change(r, k)}
        result["runs"].append(entry)
    result["verdict"] = verdict(real, control) if real and control else {
        "verdict": "inconclusive", "seeds": [], "why": "needs runs of both arms (scaffold and scrambled)"}
    png = Path(png_arg) if png_arg else Path(first_run).resolve().parent / "memory_curves.png"
    result["png"] = str(plot(runs, png)) if png_arg != "" else None
    return result


def print_training(result: dict, held: list) -> None:
    """The training runs' report as text (what ``--json`` writes as JSON)."""
    print(f"memory-report: {len(result['runs'])} run(s); per run: first third -> last third of its steps (change)")
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
    print("\nwhat the advantages rewarded (within GRPO groups): reward sd, share of it that is valid vs invalid "
          "reports, slope of reward on echo_copy (valid reports; +: copying the echo paid)")
    for e in result["runs"]:
        g = e["group_signal"]
        print(f"  {e['arm']:<16} s{e['seed']:<3} sd {fmt(g['reward_sd'], 4)}  format share {fmt(g['format_share'])}  "
              f"echo slope {fmt(g['echo_slope'], 4)} (se {fmt(g['echo_slope_se'], 4)}, {g['echo_slope_groups']} groups)")
    v = result["verdict"]
    print("\nverdict rule (pre-registered): per run delta = last third - first third of its steps; d = real mean "
          "delta gain_valid - control's, SE over paired seeds; LEARNED if d > 2 SE and real delta echo_copy > 0 in "
          "every seed; NOT LEARNED if d <= 2 SE; else INCONCLUSIVE")
    for x in v.get("seeds", []):
        print(f"  seed {x['seed']}: delta gain_valid real {fmt(x['real_delta_gain'], 4)} control "
              f"{fmt(x['control_delta_gain'], 4)}; delta echo_copy real {fmt(x['real_delta_echo_copy'], 4)} control "
              f"{fmt(x['control_delta_echo_copy'], 4)}")
    if "d" in v:
        print(f"  d = {v['d']:+.4f}, SE = {v['se']:.4f}, 2 SE = {v['threshold']:.4f}; echo_copy rises in every real "
              f"seed: {v['echo_copy_rises_in_every_real_seed']}")
    print(f"verdict: {v['verdict'].upper()} ({v['why']})")
    if held:
        print("\nheld-out evaluation (spectrum-rft eval, whole episodes):")
        print(f"{'checkpoint':<28}{'rows':>5}{'score':>8}{'mem_gain':>10}{'dormant':>9}{'skipped':>10}")
        for h in held:
            skipped = f"{h['scans_skipped_total']}/{h['scans_total']}" if h.get("scans_total") else "-"
            print(f"{h['name']:<28}{h['rows'] or 0:>5}{fmt(h['score']):>8}{fmt(h['memory_gain']):>10}"
                  f"{fmt(h['dormant_recall']):>9}{skipped:>10}")
    if result["png"]:
        print(f"\ncurves: {result['png']}")


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    if not a.runs and not a.panel_warm and not a.whole_warm:
        ap.error("give run directories, a held-out panel (--panel-warm, ...) or whole episodes (--whole-warm, ...)")
    if a.whole_warm:
        code = print_whole(a)
        if code or not (a.runs or a.panel_warm):
            return code
        print()
    try:
        runs = [load_run(Path(p)) for p in a.runs]
        held = heldout_table(a.heldout)
        panel = panel_verdict(load_result(a.panel_warm), _seed_files(a.panel_real, "--panel-real"),
                              _seed_files(a.panel_control, "--panel-control")) if a.panel_warm else None
    except (ValueError, OSError, KeyError, json.JSONDecodeError) as e:  # Unpaired is a ValueError
        print(f"spectrum-rft memory-report: {e}", file=sys.stderr)
        return 2
    if panel is not None:
        if a.json and not runs:
            print(json.dumps({"panel": panel}, indent=2))
            return 0
        print_panel(panel)
        if not runs:
            return 0
        print()
    result = training_result(runs, held, panel, a.png, a.runs[0] if a.runs else "")
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    print_training(result, held)
    return 0
