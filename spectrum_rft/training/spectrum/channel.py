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

**The echoes themselves** (:func:`echo_stats`), in the training rows and, with ``--whole DIR``, in whole
episodes an evaluation played (``spectrum-rft eval --out DIR``: there the echo is the model's own previous
report): how many centres an echo holds, how often it is at the region cap (no room to add a new peak), the
share of its centres that find a transmitter (``true_share``: a maximum matching, as ``match_iou`` counts) and
the share of the band's transmitters it holds (``recall``). The difference between the two is how far the
echoes a run trains on are from those the evaluator shows.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

from spectrum_rft.baselines.policies import make_policy
from spectrum_rft.common.stats import mean_se
from spectrum_rft.task.arms import ARMS
from spectrum_rft.task.memory import memory_mode
from spectrum_rft.task.environment import env_for_row
from spectrum_rft.task.reward import match_count, regions
from spectrum_rft.task.scan_format import HEADER, parse_scan
from spectrum_rft.training.spectrum.trl_data import grpo_rows
from spectrum_rft.training.spectrum.trl_env import SCRIPTED_HISTORIES, memoryless_report, tool_env_for

REPORTS = ("memoryless", "echo+current")


def _scores(row: dict) -> dict[str, dict[str, float]]:
    """Each report of :data:`REPORTS` on the row's scan, judged by a copy of the row's env."""
    env = tool_env_for(row)
    text = env.reset(**row)
    scan = parse_scan(text)
    acc = make_policy("accumulate")  # reads the echo too: every echoed centre kept, the current peaks added
    assert acc is not None and scan is not None  # a text policy (only the oracle is None), on the env's scan text
    acc.observe(scan)
    reports = {"memoryless": memoryless_report(text)["center_freqs"], "echo+current": acc.act()["center_freqs"]}
    out = {}
    for name, centres in reports.items():
        judge = copy.deepcopy(env)
        judge.call("submit_report", {"center_freqs": centres})  # what its declared submit_report tool hands on
        m = judge.metrics()
        out[name] = {"score": m["score"], "beyond_current": m["beyond_current"]}
    return out


def _truth(row_id: str, environment_context: dict) -> list[tuple[float, float]]:
    """The row's transmitters as occupied intervals (its env, reset with the row's seed: the one rule)."""
    env, seed = env_for_row(row_id, {"environment_context": environment_context})
    env.reset(seed=seed)
    truth = env.truth()
    return regions([c for c, _ in truth], [w for _, w in truth])


def echo_stats(echoes: list[tuple[list[float], list[tuple[float, float]], int]]) -> dict[str, Any]:
    """Summaries over scans of ``(echo centres, the band's transmitters as intervals, the region cap)``:
    ``size``, ``at_cap`` (share of echoes holding the cap's count), ``true_share`` (of the centres of each
    non-empty echo, the share a maximum matching gives a transmitter) and ``recall`` (the share of the band's
    transmitters the echo holds)."""
    sizes = [float(len(e)) for e, _, _ in echoes]
    return {"scans": len(echoes), "size": mean_se(sizes),
            "at_cap": mean_se([float(len(e) >= cap) for e, _, cap in echoes]),
            "true_share": mean_se([match_count(e, t) / len(e) for e, t, _ in echoes if e]),
            "recall": mean_se([match_count(e, t) / len(t) for e, t, _ in echoes if t])}


def training_echoes(rows: list[dict]) -> list[tuple[list[float], list[tuple[float, float]], int]]:
    """The echo each scan-episode row shows (scans 1..k-1 played by its ``echo_history`` policy)."""
    out = []
    for row in rows:
        scan = parse_scan(tool_env_for(row).reset(**row))
        if scan is not None and scan.echo is not None:
            out.append((scan.echo, _truth(row["row_id"], row["environment_context"]), scan.max_regions))
    return out


class WholeEpisodesError(ValueError):
    """An evaluation folder with no rows, or rows without echoes (one line)."""


def whole_episode_echoes(folder: Path) -> dict[str, list[tuple[list[float], list[tuple[float, float]], int]]]:
    """Per model (``input_metadata.completion_params.model``), the echo of every scan it was shown in the whole
    episodes of an evaluation folder (``rows.jsonl``: user messages or, on the MCP path, tool results that
    carry a scan)."""
    path = folder / "rows.jsonl" if folder.is_dir() else folder
    try:
        lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    except OSError as e:
        raise WholeEpisodesError(f"{path}: {e.strerror or e}") from None
    out: dict[str, list] = {}
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
            meta = row["input_metadata"]
            ctx = meta["dataset_info"]["environment_context"]
            if ctx.get("salt") == "process":
                raise WholeEpisodesError(f"{path}:{n}: row {meta['row_id']!r} has salt 'process' (a band drawn per "
                                         "process): its transmitters cannot be rebuilt here")
            truth = _truth(meta["row_id"], ctx)
            model = str((meta.get("completion_params") or {}).get("model") or "?")
        except (ValueError, KeyError, TypeError) as e:
            raise WholeEpisodesError(f"{path}:{n}: not an evaluated spectrum row ({type(e).__name__}: {e})") from None
        for m in row.get("messages") or []:
            text = m.get("content")
            if m.get("role") in ("user", "tool") and isinstance(text, str) and HEADER.search(text):
                scan = parse_scan(text)
                if scan is not None and scan.echo is not None:
                    out.setdefault(model, []).append((scan.echo, truth, scan.max_regions))
    if not out:
        raise WholeEpisodesError(f"{path}: no scan with an echo (a memory mode that shows none, or no rows)")
    return out


def channel_value(rows: int, *, arm: str = "weak-scaffold", control: str = "weak-scrambled", salt: str = "trl",
                  prefix: str = "channel", echo_history: str = "accumulate", preset: str = "default",
                  reward: str = "default") -> dict:
    """Perfect use of the echo vs the memoryless report on ``rows`` scan episodes of ``arm`` and ``control``
    (the same row ids: the same bands and scans), paired by row."""
    per_arm, echoes = {}, {}
    for a in (arm, control):
        spec = ARMS[a]
        rs = grpo_rows(rows, prompt=spec.prompt, memory_mode=spec.memory_mode, preset=preset, reward=reward,
                       salt=salt, prefix=prefix, episode="scan", echo_history=echo_history)
        preset, reward = rs[0]["environment_context"]["preset"], rs[0]["environment_context"]["reward"]
        per_arm[a] = [_scores(r) for r in rs]
        echoes[a] = echo_stats(training_echoes(rs))
    out: dict[str, Any] = {"rows": rows, "arm": arm, "control": control, "salt": salt, "prefix": prefix,
                           "echo_history": echo_history, "preset": preset, "reward": reward}
    base = [s["memoryless"]["score"] for s in per_arm[arm]]
    out["memoryless"] = mean_se(base)
    gains = {}
    for a in (arm, control):
        gains[a] = [s["echo+current"]["score"] - s["memoryless"]["score"] for s in per_arm[a]]
        out[a] = {"gain": mean_se(gains[a]),
                  "beyond_current": mean_se([s["echo+current"]["beyond_current"] for s in per_arm[a]]),
                  "echo": echoes[a]}
    out["real_minus_control"] = mean_se([x - y for x, y in zip(gains[arm], gains[control])])
    return out


ECHO_COLUMNS = ("size", "at_cap", "true_share", "recall")


def _echo_line(label: str, e: dict, width: int) -> str:
    def cell(s: dict) -> str:
        if s["mean"] is None:
            return f"{'-':>16}"
        return f"{s['mean']:7.3f} +- {s['se']:.3f}" if s["se"] is not None else f"{s['mean']:16.3f}"

    return f"  {label:<{width}} {e['scans']:>6} " + " ".join(f"{cell(e[k]):>16}" for k in ECHO_COLUMNS)


def format_echoes(r: dict) -> str:
    """The echo table: the training rows of both arms, each ``--whole`` folder, and how far each folder's
    echoes are from the real arm's training echoes (difference of means)."""
    whole = r.get("whole") or {}
    width = max([len(f"training rows, {r['control']}"), len(f"training rows, {r['arm']}")] + [len(n) for n in whole])
    lines = ["echoes shown (per scan: centres, share at the region cap, share of centres on a transmitter, "
             "share of the band's transmitters held); whole episodes: the model's own previous report",
             f"  {'source':<{width}} {'scans':>6} " + " ".join(f"{k:>16}" for k in ECHO_COLUMNS),
             _echo_line(f"training rows, {r['arm']}", r[r["arm"]]["echo"], width),
             _echo_line(f"training rows, {r['control']}", r[r["control"]]["echo"], width)]
    base = r[r["arm"]]["echo"]
    for name, e in whole.items():
        lines.append(_echo_line(name, e, width))
        diff = ["-" if e[k]["mean"] is None or base[k]["mean"] is None else f"{e[k]['mean'] - base[k]['mean']:+.3f}"
                for k in ECHO_COLUMNS]
        lines.append(f"  {'  minus training, ' + r['arm']:<{width}} {'':>6} " + " ".join(f"{d:>16}" for d in diff))
    return "\n".join(lines)


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
        "",
        format_echoes(r),
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft channel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300, help="scan episodes per arm")
    ap.add_argument("--arm", default="weak-scaffold", choices=sorted(ARMS))
    ap.add_argument("--control", default="weak-scrambled", choices=sorted(ARMS))
    ap.add_argument("--salt", default="trl", help="band salt of the rows (train's default: trl)")
    ap.add_argument("--prefix", default="channel", help="row id prefix (train's rows: grpo-s<seed>)")
    ap.add_argument("--echo-history", default="accumulate", choices=SCRIPTED_HISTORIES)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--reward", default="default")
    ap.add_argument("--whole", action="append", default=[], metavar="DIR",
                    help="an evaluation folder (spectrum-rft eval --out) of whole episodes: its echoes (the model's "
                         "own previous reports) beside the training rows'; repeatable")
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
        r["whole"] = {}
        for d in a.whole:
            found = whole_episode_echoes(Path(d))
            r["whole"].update({(d if len(found) == 1 else f"{d} {m}"): echo_stats(e) for m, e in found.items()})
    except ValueError as e:  # an unknown preset or reward, a preset rows cannot play, a folder without echoes
        print(f"spectrum-rft channel: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=1) if a.json else format_channel(r))
    return 0
