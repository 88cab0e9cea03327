"""Rendering a report: the text table and the per-epoch curves PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from spectrum_rft.tools.evaluation.render import plot_per_scan

from .heldout import BEFORE_TRAINING, HELDOUT_METRICS
from .validate import METRICS, TABLE_METRICS


def _f(v: float | None, fmt: str = ".3f", signed: bool = False) -> str:
    if v is None:
        return "n/a"
    return format(v, ("+" if signed else "") + fmt)


def format_text(report: dict) -> str:
    """The report as text; a failed run (no result) is named first and shows FAILED, never a figure."""
    out: list[str] = [f"FAILED: run {name}: {why}: no result (its figures would be empty reports')"
                      for name, why in (report.get("failed") or {}).items()]
    for note in report["notes"]:
        out.append(f"note: {note}")
    out += format_table(report)
    if not report.get("epoch_analysis"):
        out += _checks_in_brief(report)
    for run in report["runs"] if report.get("epoch_analysis") else []:
        axis = run["axis"]
        if run.get("failed"):
            out.append(f"run {run['run']}: {run['rollouts']} rollouts of {run['rows']} rows: FAILED ({run['failed']}); "
                       "no figure")
            for c in run["checks"]:
                out.append(f"  {c['name']}: {'PASS' if c['ok'] else 'FAIL'} ({c['detail']})")
            out.append("")
            continue
        out.append(f"run {run['run']}: {run['rollouts']} rollouts of {run['rows']} rows in {len(run['per_epoch'])} "
                   f"{axis}s (prompt={run['prompt']}, memory_mode={run['memory_mode']}"
                   + (f", {run['errored']} errored rollouts" if run["errored"] else "") + ")")
        hdr = f"  {axis:>6} {'rollouts':>8} {'rows':>5}  {'score':>15}  {'memory_gain':>11}  {'dormant_recall':>14}  " \
              f"{'carry_rate':>10}"
        out.append(hdr)
        for p in run["per_epoch"]:
            sc = _f(p["score"]) + (f" ± {p['score_se']:.3f}" if p["score_se"] is not None else "")
            out.append(f"  {p[axis]:>6} {p['rollouts']:>8} {p['rows']:>5}  {sc:>15}  {_f(p['memory_gain'], '+.3f'):>11}"
                       f"  {_f(p['dormant_recall']):>14}  {_f(p['carry_rate']):>10}")
        hv = run["halves"]
        if hv["early"]:
            out.append(f"  early half ({_span(axis, hv['early'])}) vs late half ({_span(axis, hv['late'])}):")
            for m in METRICS:
                d = hv["metrics"][m]
                out.append(f"    {m:<15} {_f(d['early'])} -> {_f(d['late'])}  ({_f(d['delta'], '.3f', True)})")
        else:
            out.append(f"  early vs late half: n/a (one {axis})")
        out.append(f"  least-squares trend over per-{axis} means:")
        for m in METRICS:
            t = run["trend"][m]
            if t is None:
                out.append(f"    {m:<15} n/a (fewer than two {axis}s with a value)")
            else:
                r2 = "n/a (constant)" if t["r2"] is None else f"{t['r2']:.2f}"
                out.append(f"    {m:<15} slope {t['slope']:+.4f}/{axis}  R^2 {r2}")
        for c in run["checks"]:
            out.append(f"  {c['name']}: {'PASS' if c['ok'] else 'FAIL'} ({c['detail']})")
        out.append("")
    for cmp in report["comparisons"] if report.get("epoch_analysis") else []:
        out.append(f"control comparison: {cmp['treatment']} (treatment) vs {cmp['control']} (control)")
        for m in METRICS:
            d = cmp["metrics"][m]
            out.append(f"  {m:<15} mean {_f(d['treatment_mean'])} vs {_f(d['control_mean'])};  "
                       f"slope {_f(d['treatment_slope'], '+.4f')} vs {_f(d['control_slope'], '+.4f')} "
                       f"(diff {_f(d['slope_difference'], '+.4f')});  late-early {_f(d['treatment_delta'], '+.3f')} "
                       f"vs {_f(d['control_delta'], '+.3f')} (diff {_f(d['delta_difference'], '+.3f')})")
        pr = cmp["paired"]
        if pr["shared_bands"]:
            se = f" ± {pr['se']:.3f}" if pr["se"] is not None else ""
            out.append(f"  paired over {pr['shared_bands']} bands both runs saw: score difference "
                       f"{_f(pr['mean_difference'], '+.3f')}{se}")
        else:
            out.append("  paired: no band seen by both runs")
        out.append("")
    out += format_heldout(report)
    sk = report["skipped"]
    out.append(f"input: {sk['incomplete']} unscored rows skipped (no evaluation_result), {sk['malformed']} malformed "
               f"rows skipped, {sk['duplicates']} duplicate rollouts merged")
    if report.get("png"):
        out.append(f"png: {report['png']}")
    return "\n".join(out)


def _x(axis: str, x: int | None) -> str:
    if x is None:
        return "all"
    return "before" if x == BEFORE_TRAINING else str(x)


def format_heldout(report: dict) -> list[str]:
    """Held-out bands per run (per training epoch in progress when scored: mean ± SE over bands) and treatment vs
    control on them."""
    h = report.get("heldout") or {}
    out: list[str] = []
    for run in h.get("runs", []):
        axis = run["axis"]
        out.append(f"held-out bands of run {run['run']} (scored during the job, never trained on): {run['rollouts']} "
                   f"rollouts of {run['bands']} bands, by the training {axis} in progress when scored")
        out.append(f"  {axis:>6} {'rollouts':>8} {'bands':>5}  " + "  ".join(f"{m:>15}" for m in HELDOUT_METRICS))
        for p in run["per_epoch"]:
            cells = [(_f(p[m], "+.3f" if m == "memory_gain" else ".3f")
                      + (f" ± {p[m + '_se']:.3f}" if p[m + "_se"] is not None else "")) for m in HELDOUT_METRICS]
            out.append(f"  {_x(axis, p['x']):>6} {p['rollouts']:>8} {p['bands']:>5}  "
                       + "  ".join(f"{c:>15}" for c in cells))
        slopes = [f"{m} {t['slope']:+.4f}" if (t := run["trend"][m]) else f"{m} n/a" for m in HELDOUT_METRICS]
        out.append(f"  least-squares slope per {axis}: " + "; ".join(slopes))
        for c in run["checks"]:
            out.append(f"  {c['name']}: {'PASS' if c['ok'] else 'FAIL'} ({c['detail']})")
        out.append("")
    axes = {run["run"]: run["axis"] for run in h.get("runs", [])}
    for cmp in h.get("comparisons", []):
        axis = axes.get(cmp["treatment"], "epoch")
        out.append(f"held-out control comparison: {cmp['treatment']} (treatment) vs {cmp['control']} (control), "
                   "treatment vs control (difference)")
        for p in cmp["per_epoch"]:
            out.append(f"  {_x('', p['x']):>6}  " + ";  ".join(
                f"{m} {_f(p[m]['treatment'])} vs {_f(p[m]['control'])} ({_f(p[m]['difference'], '.3f', True)})"
                for m in HELDOUT_METRICS[1:]))
        out.append("  slope: " + ";  ".join(
            f"{m} {_f(d['treatment'], '+.4f')} vs {_f(d['control'], '+.4f')} (diff {_f(d['difference'], '+.4f')})"
            for m, d in cmp["slopes"].items()))
        pr = cmp["paired"]
        n = max(d["bands"] for d in pr.values())
        at = cmp.get("paired_at")
        stage = "before training" if at == BEFORE_TRAINING else f"{axis} {at}"
        where = "the held-out rows are one group" if at is None else \
            f"at {stage}, the last evaluation group both runs reached"
        out.append(f"  paired ({where}) over {n} held-out bands both runs saw: " + ";  ".join(
            f"{m} {_f(d['mean_difference'], '.3f', True)}" + (f" ± {d['se']:.3f}" if d["se"] is not None else "")
            for m, d in pr.items()))
        out.append("")
    return out


def _cell(d: dict | None, signed: bool) -> str:
    if d is None or d["mean"] is None:
        return "-"
    return _f(d["mean"], "+.3f" if signed else ".3f") + (f" ± {d['se']:.3f}" if d["se"] is not None else "")


def format_table(report: dict) -> list[str]:
    """Model by model: the mean ± SE over rows of each of :data:`TABLE_METRICS` (a failed run: FAILED, no
    figure), then the paired score differences on shared bands."""
    table = report.get("table") or []
    if not table:
        return []
    w = max(len("model"), *(len(t["name"]) for t in table))
    cw = 15
    out = [f"{'model':<{w}}  {'rows':>5}  " + "  ".join(f"{m:>{cw}}" for m in TABLE_METRICS)]
    out.append("-" * len(out[0]))
    for t in table:
        if t["failed"]:
            cells = ["FAILED", *["-"] * (len(TABLE_METRICS) - 1)]
        else:
            cells = [_cell(t["metrics"][m], m == "memory_gain") for m in TABLE_METRICS]
        out.append(f"{t['name']:<{w}}  {t['rows']:>5}  " + "  ".join(f"{c:>{cw}}" for c in cells))
    out.append("(mean ± standard error over rows; a row's rollouts averaged first)")
    names = {t["run"]: t["name"] for t in table}
    if report.get("paired"):
        out.append("paired score differences on the bands both saw (mean ± SE over those bands):")
        pw = max(len(f"{names[d['a']]} - {names[d['b']]}") for d in report["paired"])
        for d in report["paired"]:
            se = f" ± {d['se']:.3f}" if d["se"] is not None else ""
            out.append(f"  {names[d['a']] + ' - ' + names[d['b']]:<{pw}}  {_f(d['mean_difference'], '.3f', True)}{se}"
                       f"  ({d['bands']} band{'s' if d['bands'] != 1 else ''})")
    elif sum(not t["failed"] for t in table) >= 2:
        out.append("paired: no band seen by two runs (different salts or presets): no paired difference")
    out.append("")
    return out


def _checks_in_brief(report: dict) -> list[str]:
    """Without epochs: one line when every check passes, else each failing one with its run."""
    bad = [(r["run"], c) for r in report["runs"] for c in r["checks"] if not c["ok"]]
    if not bad:
        axis = report["runs"][0]["axis"] if report["runs"] else "epoch"
        return [f"checks: group integrity PASS for {len(report['runs'])} run(s); one {axis}: no per-{axis} analysis", ""]
    return [f"{run}: {c['name']}: FAIL ({c['detail']})" for run, c in bad] + [""]


def _span(axis: str, xs: Sequence[int]) -> str:
    return f"{axis} {xs[0]}" if len(xs) == 1 else f"{axis}s {xs[0]}-{xs[-1]}"


MAX_LABELLED_TICKS = 12  # up to this many x values, each gets its own tick


def figure(report: dict):  # noqa: ANN201 (a matplotlib Figure)
    """The figure :func:`plot_png` saves: per-epoch curves of the four metrics, one line per run, dashed
    least-squares fits, and a run's held-out bands as dotted squares (x = -1: before training); the x ticks are
    the groups themselves (one epoch: one tick, not -0.045..0.045)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")  # explicit: a report must never need a display
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    xs = sorted({p[run["axis"]] for run in report["runs"] for p in run["per_epoch"]})
    colour = {run["run"]: f"C{i % 10}" for i, run in enumerate(report["runs"])}  # a run's training and held-out lines
    for ax, m in zip(axes.flat, METRICS):
        for run in report["runs"]:
            axis = run["axis"]
            pts = [(p[axis], p[m]) for p in run["per_epoch"] if p[m] is not None]
            if not pts:
                continue
            color = colour[run["run"]]
            ax.plot([a for a, _ in pts], [b for _, b in pts], "o-", color=color, label=run["run"])
            t = run["trend"][m]
            if t is not None:
                x0, x1 = pts[0][0], pts[-1][0]
                ax.plot([x0, x1], [t["intercept"] + t["slope"] * x0, t["intercept"] + t["slope"] * x1], "--",
                        color=color, alpha=0.6)
        for run in (report.get("heldout") or {}).get("runs", []):  # held-out bands: dotted squares, the run's colour
            pts = [(p["x"], p[m]) for p in run["per_epoch"] if m in p and p["x"] is not None and p[m] is not None]
            if pts:
                ax.plot([a for a, _ in pts], [b for _, b in pts], "s:", color=colour[run["run"]], alpha=0.8,
                        label=f"{run['run']} held-out")
                xs = sorted(set(xs) | {a for a, _ in pts})
        ax.set_title(m)
        if xs and len(xs) <= MAX_LABELLED_TICKS:
            ax.set_xticks(xs)
            ax.set_xlim(xs[0] - 0.5, xs[-1] + 0.5)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(report["runs"][0]["axis"] if report["runs"] else "epoch")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize="small")
    held = " ; dotted squares: held-out bands, -1 = before training" if (report.get("heldout") or {}).get("runs") else ""
    fig.suptitle(f"spectrum-rft report: per-epoch means (dashed: least-squares fit{held})")
    return fig


def plot_png(report: dict, path: str) -> str:
    """Save :func:`figure` as a PNG at ``path``."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig = figure(report)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_per_scan_png(report: dict, path: str) -> str | None:
    """Rows of one epoch: the mean per-scan reward of every run that has a result, ± 1 SE over rows
    (:func:`~spectrum_rft.tools.evaluation.render.plot_per_scan`, eval's own figure); None when no row
    carries per-scan rewards."""
    runs = [t for t in report.get("table") or [] if not t["failed"] and t["per_scan_reward"]]
    if not runs:
        return None
    title = "spectrum-rft report: mean per-scan reward (± 1 SE over rows)"
    return str(plot_per_scan({t["name"]: t["per_scan_reward"] for t in runs}, Path(path), title,
                             {t["name"]: t["per_scan_reward_se"] for t in runs}))
