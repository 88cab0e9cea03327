"""What a run shows: the metrics table, the fault summary and skip warnings under it, the per-scan plot."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from spectrum_rft.tools.evaluation.summary import METRICS


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return f"{v:+.3f}" if isinstance(v, float) and v < 0 else f"{v:.3f}"


def format_table(models: dict[str, dict[str, Any]], displays: dict[str, str] | None = None) -> str:
    """The metrics table: one line per model; ``rows`` is ``finished/asked`` when some never finished,
    ``cause`` the dominant cause of the model's errored rows. A model whose numbers are no result (its summary's
    ``failed``) shows ``FAILED`` and no figure: never an empty report's score."""
    displays = displays or {}
    names = [displays.get(k, k) for k in models]
    w = max([len("model"), *map(len, names)])
    cols = [*METRICS, "rows", "errors"]
    causes = [str(m.get("error_cause") or "-") for m in models.values()]
    cw = max([len("cause"), *map(len, causes)])
    head = f"{'model':<{w}}  " + "  ".join(f"{c:>14}" for c in cols) + f"  {'cause':<{cw}}"
    lines = [head.rstrip(), "-" * len(head)]
    for key, disp, cause in zip(models, names, causes):
        m = models[key]
        rows = str(m.get("rows", "-"))
        if m.get("rows_unfinished"):
            rows = f"{m['rows']}/{m['rows'] + m['rows_unfinished']}"
        figures = ["FAILED", *["-"] * (len(METRICS) - 1)] if m.get("failed") else [_fmt(m.get(c)) for c in METRICS]
        cells = figures + [rows, str(m.get("rows_errored", "-"))]
        lines.append((f"{disp:<{w}}  " + "  ".join(f"{c:>14}" for c in cells) + f"  {cause:<{cw}}").rstrip())
    return "\n".join(lines)


SKIP_WARN_FRACTION = 0.5  # warn when more than this share of a model's scans was skipped


def _pct(k: int, n: int) -> str:
    return f"{100.0 * k / n:.0f}%" if n else "-"


def format_fault_summary(models: dict[str, dict[str, Any]], displays: dict[str, str] | None = None,
                         top: int = 4) -> str:
    """Under the table: per model its most frequent fault kinds and the scans skipped of all scans."""
    displays = displays or {}
    lines = ["faults (all rows of a model; skipped scans are scored as empty reports):"]
    for key, m in models.items():
        faults = m.get("faults") or {}
        kinds = ", ".join(f"{k} {v}" for k, v in list(faults.items())[:top]) or "none"
        if len(faults) > top:
            kinds += f", +{len(faults) - top} more kinds"
        k, n = m.get("scans_skipped_total", 0), m.get("scans_total", 0)
        skipped = f"scans skipped {k}/{n} ({_pct(k, n)})" if n else "scans skipped -"
        lines.append(f"  {displays.get(key, key)}: {kinds}; {skipped}")
    return "\n".join(lines)


def skip_warnings(models: dict[str, dict[str, Any]], displays: dict[str, str] | None = None) -> list[str]:
    """A WARNING per model that skipped more than half of its scans (its score measures empty reports)."""
    displays = displays or {}
    out = []
    for key, m in models.items():
        k, n = m.get("scans_skipped_total", 0), m.get("scans_total", 0)
        if m.get("rows") and m.get("rows_errored") == m.get("rows"):
            continue  # every rollout errored: said on its own line, with the cause
        if m.get("failed") and n and m.get("scans_skipped_model", 0) / n > SKIP_WARN_FRACTION:
            continue  # skipped because its requests failed: the model failed, said on its own line
        if n and k / n > SKIP_WARN_FRACTION:
            why = f" (model requests failed: {m['llm_failure_cause']})" if m.get("llm_failure_cause") else ""
            out.append(f"WARNING: {displays.get(key, key)}: {k}/{n} scans skipped ({_pct(k, n)}){why}: its score "
                       f"is mostly empty reports, not the model's answers")
    return out


def plot_per_scan(curves: Mapping[str, Sequence[float]], path: Path, title: str,
                  bands: Mapping[str, Sequence[float | None]] | None = None) -> Path:
    """Mean per-scan reward against scan index, one line per model, shaded +- 1 standard error over rows
    where ``bands`` has one (PNG). The Agg canvas is chosen here, for this figure only: nothing global (no
    pyplot, no backend switch at import)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(7.5, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for label, ys in curves.items():
        if ys:
            line, = ax.plot(range(1, len(ys) + 1), ys, marker="o", markersize=3.5, linewidth=1.6, label=label)
            se = list((bands or {}).get(label) or [])
            pts = [(i + 1, y, s) for i, (y, s) in enumerate(zip(ys, se)) if s is not None]
            if pts:
                ax.fill_between([p[0] for p in pts], [p[1] - p[2] for p in pts], [p[1] + p[2] for p in pts],
                                color=line.get_color(), alpha=0.18, linewidth=0)
    ax.set_xlabel("scan")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.05)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    if any(curves.values()):
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
