"""``spectrum-rft report``: per-epoch analysis of evaluated spectrum rows.

    spectrum-rft report out/eval/                          # one run, grouped by environment_context.epoch
    spectrum-rft report weak=runs/weak.jsonl control=runs/ctrl.jsonl --png curves.png
    spectrum-rft report --logs-db                          # ~/.eval_protocol/logs.db (latest experiment)
    spectrum-rft report --logs-db --experiment ID1 --experiment ID2
    spectrum-rft report ck1=e1.jsonl ck1=e2.jsonl ck1=e3.jsonl --group-by input   # one point per input

Inputs are EvaluationRow JSON: eval-protocol's experiment JSONL (``--ep-output-dir``), the rows of
``spectrum-rft eval --out DIR`` (a directory: every ``*.jsonl`` under it), or eval-protocol's sqlite store
(``logs.db``: table of ``rollout_id`` + ``data`` JSON, read-only). ``LABEL=PATH`` names a run; inputs with
the same label form one run. Each row's numbers come from ``execution_metadata.extra["spectrum"]`` (the
environment's own metrics) and, where that is absent, from ``evaluation_result.metrics``.

The x-axis (``--group-by``): ``epoch`` (default) = the dataset epoch in the row's
``input_metadata.dataset_info.environment_context["epoch"]`` (``make_spectrum_dataset.py --epochs``, and
``spectrum-rft launch``'s fresh-band datasets); ``input`` = the position of the input within its run (one
eval per checkpoint); ``run-id`` = eval-protocol's ``execution_metadata.run_id`` in order of first row;
``order:K`` = K equal buckets of rows by ``created_at`` (a training-time proxy).

Exit status: 0 report written, 2 unusable input (every problem listed as FILE:LINE: reason),
1 with ``--fail-on-check`` when an integrity or freshness check fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sqlite3
import statistics
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Sequence

METRICS = ("score", "memory_gain", "dormant_recall", "carry_rate")
OPTIONAL_METRICS = METRICS[1:]
DEFAULT_DB = os.path.join("~", ".eval_protocol", "logs.db")
STATUS_INTERNAL = 13  # eval-protocol Status.Code.INTERNAL: a failed rollout
MAX_EPOCH = 10**6
MAX_ABS_VALUE = 1e9  # scores and metrics are O(1); anything beyond this is corrupt input, not data


class ReportError(Exception):
    """Unusable input or options; the message is for the user."""


class RowError(ValueError):
    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


# --------------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rollout:
    """One evaluated rollout, reduced to what the report needs."""

    where: str  # FILE:LINE or DB#rollout_id
    run: str
    input_index: int
    seq: int  # position in the input (stable tie-break)
    row_id: str
    rollout_id: str | None
    run_id: str | None
    experiment_id: str | None
    epoch: int | None
    created_at: str | None
    score: float
    values: dict[str, float | None]  # OPTIONAL_METRICS
    fingerprint: str | None
    prompt: str | None
    memory_mode: str | None
    errored: bool
    model: str | None = None  # input_metadata.completion_params.model


def _finite(x: Any) -> bool:
    """A usable number: finite and within +-MAX_ABS_VALUE (so means and fits cannot overflow)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= MAX_ABS_VALUE


def _obj(parent: dict, key: str, where: str, path: str) -> dict | None:
    """``parent[key]`` if it is an object, None if absent/null; a RowError if it is something else."""
    v = parent.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise RowError(where, f"{path} must be an object, got {type(v).__name__}")
    return v


def _metric_value(name: str, spectrum: dict | None, metrics: dict | None, where: str) -> float | None:
    if spectrum is not None and name in spectrum:
        v = spectrum[name]
        if v is None:
            return None
        if not _finite(v):
            raise RowError(where, f"execution_metadata.extra.spectrum.{name} must be a finite number or null, "
                                  f"got {_show(v)}")
        return float(v)
    if metrics is not None and name in metrics:
        m = metrics[name]
        if m is None:
            return None
        if not isinstance(m, dict):
            raise RowError(where, f"evaluation_result.metrics.{name} must be an object, got {type(m).__name__}")
        if m.get("is_score_valid", True) is False:
            return None
        v = m.get("score")
        if not _finite(v):
            raise RowError(where, f"evaluation_result.metrics.{name}.score must be a finite number, got {_show(v)}")
        return float(v)
    return None


def _fingerprint(spectrum: dict | None, metrics: dict | None, where: str) -> str | None:
    if spectrum is not None and spectrum.get("band_fingerprint") is not None:
        fp = spectrum["band_fingerprint"]
        if not isinstance(fp, str) or not fp:
            raise RowError(where, f"execution_metadata.extra.spectrum.band_fingerprint must be a non-empty string, "
                                  f"got {_show(fp)}")
        return fp
    m = metrics.get("band_fingerprint") if metrics is not None else None
    if isinstance(m, dict):
        data = m.get("data")
        if isinstance(data, dict) and isinstance(data.get("value"), str) and data["value"]:
            return data["value"]
        reason = m.get("reason")
        if isinstance(reason, str):
            hit = re.fullmatch(r"band_fingerprint=(\S+)", reason.strip())
            if hit:
                return hit.group(1)
    return None


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def parse_row(obj: Any, where: str, run: str = "run", input_index: int = 0, seq: int = 0) -> Rollout | None:
    """An EvaluationRow JSON object -> :class:`Rollout`; None for a row not evaluated yet (no
    ``evaluation_result``: a rollout in progress). Raises :class:`RowError` for a malformed row."""
    if not isinstance(obj, dict):
        raise RowError(where, f"expected an EvaluationRow object, got {type(obj).__name__}")
    if "id" in obj and "environment_context" in obj and "evaluation_result" not in obj:
        return None  # a raw dataset row (make_spectrum_dataset's compact format): input, not a result
    if not any(k in obj for k in ("input_metadata", "evaluation_result", "execution_metadata", "messages")):
        raise RowError(where, "not an EvaluationRow (none of input_metadata, evaluation_result, "
                              "execution_metadata, messages)")
    im = _obj(obj, "input_metadata", where, "input_metadata") or {}
    em = _obj(obj, "execution_metadata", where, "execution_metadata") or {}
    er = _obj(obj, "evaluation_result", where, "evaluation_result")
    if er is None:
        return None
    score = er.get("score")
    if not _finite(score):
        raise RowError(where, f"evaluation_result.score must be a finite number, got {_show(score)}")
    metrics = _obj(er, "metrics", where, "evaluation_result.metrics")
    extra = _obj(em, "extra", where, "execution_metadata.extra")
    spectrum = _obj(extra, "spectrum", where, "execution_metadata.extra.spectrum") if extra else None

    row_id = im.get("row_id")
    if not isinstance(row_id, str) or not row_id:
        raise RowError(where, f"input_metadata.row_id must be a non-empty string, got {_show(row_id)}")
    info = _obj(im, "dataset_info", where, "input_metadata.dataset_info") or {}
    ctx = _obj(info, "environment_context", where, "input_metadata.dataset_info.environment_context")
    ctx = ctx if ctx is not None else info
    epoch = ctx.get("epoch")
    if epoch is not None and not (isinstance(epoch, int) and not isinstance(epoch, bool) and 0 <= epoch < MAX_EPOCH):
        raise RowError(where, f"environment_context.epoch must be a non-negative integer, got {_show(epoch)}")
    status = _obj(obj, "rollout_status", where, "rollout_status") or {}
    ids = {}
    for k in ("rollout_id", "run_id", "experiment_id"):
        v = em.get(k)
        if v is not None and not isinstance(v, str):
            raise RowError(where, f"execution_metadata.{k} must be a string, got {_show(v)}")
        ids[k] = v
    cp = im.get("completion_params")
    model = cp.get("model") if isinstance(cp, dict) and isinstance(cp.get("model"), str) else None
    created = obj.get("created_at")
    prompt, mode = ctx.get("prompt"), ctx.get("memory_mode")
    return Rollout(
        where=where, run=run, input_index=input_index, seq=seq, row_id=row_id, epoch=epoch,
        created_at=created if isinstance(created, str) else None, score=float(score),
        values={m: _metric_value(m, spectrum, metrics, where) for m in OPTIONAL_METRICS},
        fingerprint=_fingerprint(spectrum, metrics, where),
        prompt=prompt if isinstance(prompt, str) else None, memory_mode=mode if isinstance(mode, str) else None,
        errored=status.get("code") == STATUS_INTERNAL, model=model, **ids)


@dataclass
class Loaded:
    rollouts: list[Rollout] = field(default_factory=list)
    incomplete: int = 0  # rows without an evaluation_result (in progress)
    errors: list[str] = field(default_factory=list)
    duplicates: int = 0
    notes: list[str] = field(default_factory=list)


def _jsonl_files(path: Path) -> list[Path]:
    if path.is_dir():
        if (path / "rows.jsonl").is_file() and (path / "summary.json").is_file():
            return [path / "rows.jsonl"]  # a `spectrum-rft eval --out` folder: its scored rows
        files = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        if not files:
            raise ReportError(f"{path}: no *.jsonl files in this directory")
        return files
    if not path.exists():
        raise ReportError(f"{path}: no such file or directory")
    return [path]


def load_jsonl(path: Path, run: str, input_index: int, out: Loaded) -> None:
    seq = len(out.rollouts)
    for f in _jsonl_files(path):
        try:
            fh = f.open("r", encoding="utf-8", errors="strict")
        except OSError as e:
            raise ReportError(f"{f}: cannot read ({e.strerror or e})") from None
        with fh:
            try:
                for n, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    where = f"{f}:{n}"
                    try:
                        obj = json.loads(line)
                    except (ValueError, RecursionError) as e:
                        out.errors.append(f"{where}: not valid JSON ({str(e)[:60]})")
                        continue
                    try:
                        r = parse_row(obj, where, run, input_index, seq)
                    except RowError as e:
                        out.errors.append(str(e))
                        continue
                    except RecursionError:
                        out.errors.append(f"{where}: nested too deeply")
                        continue
                    seq += 1
                    if r is None:
                        out.incomplete += 1
                    else:
                        out.rollouts.append(r)
            except UnicodeDecodeError as e:
                raise ReportError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _db_tables(con: sqlite3.Connection) -> list[str]:
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    out = []
    for t in names:
        cols = {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')}
        if {"rollout_id", "data"} <= cols:
            out.append(t)
    return out


def load_db(path: Path, label: str | None, experiments: Sequence[str], input_index: int) -> tuple[dict[str, Loaded], list[str]]:
    """Rows of eval-protocol's sqlite store (opened read-only), one run per experiment id. Without
    ``experiments`` only the most recent experiment is reported (the store holds every run ever made)."""
    path = path.expanduser()
    if not path.is_file():
        raise ReportError(f"{path}: no such database (run an evaluation first, or pass its path)")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = _db_tables(con)
            if not tables:
                raise ReportError(f"{path}: no eval-protocol row table (rollout_id, data) in this database")
            raw = []
            for t in tables:
                raw += con.execute(f'SELECT rollout_id, data FROM "{t}"').fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise ReportError(f"{path}: cannot read as sqlite ({e})") from None
    everything = Loaded()
    for i, (rid, data) in enumerate(raw):
        where = f"{path.name}#{rid}"
        try:
            obj = json.loads(data) if isinstance(data, (str, bytes)) else data
            r = parse_row(obj, where, "", input_index, i)
        except (ValueError, RecursionError) as e:
            everything.errors.append(str(e) if isinstance(e, RowError) else f"{where}: not valid JSON")
            continue
        if r is None:
            everything.incomplete += 1
        else:
            everything.rollouts.append(r)
    by_exp: dict[str, list[Rollout]] = {}
    for r in everything.rollouts:
        by_exp.setdefault(r.experiment_id or "(no experiment id)", []).append(r)
    notes = []
    chosen = list(experiments)
    if chosen:
        missing = [e for e in chosen if e not in by_exp]
        if missing:
            raise ReportError(f"{path}: no scored rows for experiment(s) {', '.join(missing)}; present: "
                              + ", ".join(sorted(by_exp)[:10]))
    elif by_exp:
        latest = max(by_exp, key=lambda e: max((r.created_at or "") for r in by_exp[e]))
        chosen = [latest]
        if len(by_exp) > 1:
            notes.append(f"{path.name}: {len(by_exp)} experiments; reporting the latest, {latest} "
                         f"(others: {', '.join(e for e in sorted(by_exp) if e != latest)[:300]}; "
                         "choose with --experiment)")
    runs = {}
    for e in chosen:
        name = label if (label and len(chosen) == 1) else (f"{label}:{e}" if label else e)
        ld = Loaded(rollouts=[_with_run(r, name) for r in by_exp[e]])
        runs[name] = ld
    if runs:
        first = next(iter(runs.values()))
        first.errors, first.incomplete = everything.errors, everything.incomplete
    return runs, notes


def _with_run(r: Rollout, run: str) -> Rollout:
    return Rollout(**{**r.__dict__, "run": run})


def parse_input_spec(spec: str) -> tuple[str | None, Path]:
    m = re.fullmatch(r"([A-Za-z0-9_.:+-]+)=(.+)", spec)
    if m and not Path(spec).exists():
        return m.group(1), Path(m.group(2))
    return None, Path(spec)


def load_inputs(specs: Sequence[str], logs_db: str | None, experiments: Sequence[str]) -> tuple[dict[str, Loaded], list[str]]:
    """Runs by label, in the order first seen."""
    runs: dict[str, Loaded] = {}
    notes: list[str] = []
    counters: dict[str, int] = {}
    for spec in specs:
        label, path = parse_input_spec(spec)
        if path.suffix in (".db", ".sqlite", ".sqlite3") and path.is_file():
            got, n = load_db(path, label, experiments, 0)
            notes += n
            for k, v in got.items():
                _merge(runs, k, v)
            continue
        name = label or (path.stem if path.is_file() else path.name) or str(path)
        idx = counters.get(name, 0)
        counters[name] = idx + 1
        ld = runs.setdefault(name, Loaded())
        load_jsonl(path, name, idx, ld)
    if logs_db is not None:
        got, n = load_db(Path(logs_db), None, experiments, 0)
        notes += n
        for k, v in got.items():
            _merge(runs, k, v)
    return runs, notes


def _merge(runs: dict[str, Loaded], name: str, ld: Loaded) -> None:
    cur = runs.setdefault(name, Loaded())
    cur.rollouts += ld.rollouts
    cur.errors += ld.errors
    cur.incomplete += ld.incomplete


def split_by_model(runs: dict[str, Loaded], notes: list[str]) -> dict[str, Loaded]:
    """A run whose rows come from several models (``spectrum-rft eval`` writes one file for its whole
    ladder) becomes one run per model, labelled ``LABEL:MODEL``: a curve mixing models means nothing."""
    out: dict[str, Loaded] = {}
    for name, ld in runs.items():
        models = sorted({r.model or "?" for r in ld.rollouts})
        if len(models) <= 1:
            out[name] = ld
            continue
        notes.append(f"run {name} holds rows of {len(models)} models ({', '.join(models)}): one run per model")
        for i, m in enumerate(models):
            part = Loaded(rollouts=[_with_run(r, f"{name}:{m}") for r in ld.rollouts if (r.model or "?") == m])
            if i == 0:
                part.errors, part.incomplete = ld.errors, ld.incomplete
            out[f"{name}:{m}"] = part
    return out


def dedupe(ld: Loaded) -> None:
    """The same rollout given twice (e.g. a JSONL and the store) counts once (the later copy)."""
    seen: dict[str, int] = {}
    keep: list[Rollout] = []
    for r in ld.rollouts:
        if r.rollout_id and r.rollout_id in seen:
            keep[seen[r.rollout_id]] = r
            ld.duplicates += 1
            continue
        if r.rollout_id:
            seen[r.rollout_id] = len(keep)
        keep.append(r)
    ld.rollouts = keep


# --------------------------------------------------------------------------------------------------
# Math
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    slope: float
    intercept: float
    r2: float | None  # None when y is constant (R^2 undefined)
    n: int


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> Fit | None:
    """Ordinary least squares ``y = intercept + slope * x`` with R^2; None with fewer than two distinct x."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    pts = [(float(x), float(y)) for x, y in zip(xs, ys)]
    if any(not (math.isfinite(x) and math.isfinite(y)) for x, y in pts):
        raise ValueError("linear_fit needs finite numbers")
    n = len(pts)
    if n < 2 or min(x for x, _ in pts) == max(x for x, _ in pts):
        return None
    mx = math.fsum(x for x, _ in pts) / n
    my = math.fsum(y for _, y in pts) / n
    sxx = math.fsum((x - mx) ** 2 for x, _ in pts)
    sxy = math.fsum((x - mx) * (y - my) for x, y in pts)
    slope = sxy / sxx
    intercept = my - slope * mx
    # R^2 on y deviations scaled to at most 1, so tiny (subnormal) spreads do not underflow to 0
    scale = max(abs(y - my) for _, y in pts)
    if min(y for _, y in pts) == max(y for _, y in pts) or scale == 0.0:
        r2 = None
    else:
        syy = math.fsum(((y - my) / scale) ** 2 for _, y in pts)
        sxy_s = math.fsum((x - mx) * ((y - my) / scale) for x, y in pts)
        r2 = min(1.0, max(0.0, (sxy_s * sxy_s) / (sxx * syy)))
    return Fit(slope, intercept, r2, n)


def _mean(vals: Iterable[float | None]) -> float | None:
    v = [x for x in vals if x is not None]
    return math.fsum(v) / len(v) if v else None


def _se(vals: Sequence[float]) -> float | None:
    return statistics.stdev(vals) / math.sqrt(len(vals)) if len(vals) >= 2 else None


# --------------------------------------------------------------------------------------------------
# Analysis
# --------------------------------------------------------------------------------------------------


def assign_x(rollouts: Sequence[Rollout], group_by: str) -> list[tuple[int, Rollout]]:
    """The x-axis value of every rollout under ``group_by``."""
    if group_by == "epoch":
        missing = [r.where for r in rollouts if r.epoch is None]
        if missing:
            raise ReportError(f"{len(missing)} rows have no environment_context.epoch (first: {missing[0]}); "
                              "use --group-by input|run-id|order:K")
        return [(r.epoch, r) for r in rollouts]  # type: ignore[misc]
    if group_by == "input":
        return [(r.input_index, r) for r in rollouts]
    if group_by == "run-id":
        first: dict[str, tuple[str, int]] = {}
        for r in rollouts:
            key = r.run_id or "(none)"
            cand = (r.created_at or "", r.seq)
            if key not in first or cand < first[key]:
                first[key] = cand
        rank = {k: i for i, k in enumerate(sorted(first, key=lambda k: first[k]))}
        return [(rank[r.run_id or "(none)"], r) for r in rollouts]
    m = re.fullmatch(r"order:(\d+)", group_by)
    if m:
        k = int(m.group(1))
        if k < 1:
            raise ReportError("--group-by order:K needs K >= 1")
        ordered = sorted(rollouts, key=lambda r: (_ts(r.created_at), r.input_index, r.seq))
        n = len(ordered)
        return [(min(k - 1, i * k // n), r) for i, r in enumerate(ordered)]
    raise ReportError(f"unknown --group-by {group_by!r}")


def _ts(s: str | None) -> float:
    if not s:
        return 0.0
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def check_integrity(rollouts: Sequence[Rollout]) -> list[dict]:
    """Group integrity (every rollout of a row shares one band; different rows have different bands)."""
    missing = [r for r in rollouts if r.fingerprint is None]
    by_row: dict[str, set[str]] = {}
    rollouts_per_row: dict[str, int] = {}
    by_fp: dict[str, set[str]] = {}
    for r in rollouts:
        rollouts_per_row[r.row_id] = rollouts_per_row.get(r.row_id, 0) + 1
        if r.fingerprint is not None:
            by_row.setdefault(r.row_id, set()).add(r.fingerprint)
            by_fp.setdefault(r.fingerprint, set()).add(r.row_id)
    unverifiable = (f"{len(missing)} of {len(rollouts)} rollouts carry no band_fingerprint (first: "
                    f"{missing[0].where}): cannot verify") if missing else None
    split = {k: v for k, v in by_row.items() if len(v) > 1}
    counts = sorted(set(rollouts_per_row.values()))
    per_row = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    if unverifiable:
        same = {"ok": False, "detail": unverifiable}
    elif split:
        ex = next(iter(split))
        same = {"ok": False, "detail": f"{len(split)} rows saw several bands (e.g. {ex}: "
                                       f"{', '.join(sorted(split[ex])[:3])})"}
    else:
        same = {"ok": True, "detail": f"{len(by_row)} rows, {per_row} rollout(s) each"
                                      + (": trivially true" if counts == [1] else "")}
    shared = {k: v for k, v in by_fp.items() if len(v) > 1}
    if unverifiable:
        differ = {"ok": False, "detail": unverifiable}
    elif shared:
        ex = next(iter(shared))
        differ = {"ok": False, "detail": f"{len(shared)} bands shared by different rows (e.g. {ex}: "
                                         f"{', '.join(sorted(shared[ex])[:3])})"}
    else:
        differ = {"ok": True, "detail": f"{len(by_fp)} distinct bands for {len(by_row)} rows"}
    return [{"name": "group integrity (rollouts of a row share one band)", **same},
            {"name": "group integrity (rows differ)", **differ}]


def check_freshness(points: Sequence[tuple[int, Rollout]], axis: str) -> dict:
    """No band fingerprint in more than one epoch (group)."""
    name = f"freshness (no band repeats across {axis}s)"
    missing = [r for _, r in points if r.fingerprint is None]
    if missing:
        return {"name": name, "ok": False, "detail": f"{len(missing)} rollouts carry no band_fingerprint: "
                                                     "cannot verify"}
    where: dict[str, set[int]] = {}
    for x, r in points:
        where.setdefault(r.fingerprint, set()).add(x)  # type: ignore[arg-type]
    xs = {x for x, _ in points}
    repeats = {k: v for k, v in where.items() if len(v) > 1}
    if repeats:
        ex = next(iter(repeats))
        return {"name": name, "ok": False,
                "detail": f"{len(repeats)} of {len(where)} bands repeat across {axis}s (e.g. {ex} in "
                          f"{axis}s {', '.join(map(str, sorted(repeats[ex])[:5]))})"}
    return {"name": name, "ok": True, "detail": f"{len(where)} bands, each in one of {len(xs)} {axis}s"}


def analyze_run(name: str, rollouts: Sequence[Rollout], group_by: str) -> dict:
    points = assign_x(rollouts, group_by)
    axis = {"epoch": "epoch", "input": "input", "run-id": "run"}.get(group_by, "bucket")
    groups: dict[int, list[Rollout]] = {}
    for x, r in points:
        groups.setdefault(x, []).append(r)
    per = []
    for x in sorted(groups):
        rs = groups[x]
        scores = [r.score for r in rs]
        row = {axis: x, "rollouts": len(rs), "rows": len({r.row_id for r in rs}),
               "errored": sum(r.errored for r in rs), "score": _mean(scores), "score_se": _se(scores)}
        for m in OPTIONAL_METRICS:
            vals = [r.values[m] for r in rs if r.values[m] is not None]
            row[m] = _mean(vals)
            row[f"{m}_n"] = len(vals)
        per.append(row)
    xs = [p[axis] for p in per]
    trend, halves = {}, {}
    h = len(per) // 2
    for m in METRICS:
        pairs = [(p[axis], p[m]) for p in per if p[m] is not None]
        fit = linear_fit([a for a, _ in pairs], [b for _, b in pairs]) if pairs else None
        trend[m] = None if fit is None else {"slope": fit.slope, "intercept": fit.intercept, "r2": fit.r2,
                                            "points": fit.n}
        if h >= 1:
            early, late = _mean(p[m] for p in per[:h]), _mean(p[m] for p in per[-h:])
            halves[m] = {"early": early, "late": late,
                         "delta": (late - early) if early is not None and late is not None else None}
    modes = sorted({r.memory_mode or "?" for r in rollouts})
    prompts = sorted({r.prompt or "?" for r in rollouts})
    checks = check_integrity(rollouts) + [check_freshness(points, axis)]
    overall = {m: _mean(r.score if m == "score" else r.values[m] for r in rollouts) for m in METRICS}
    return {
        "run": name, "axis": axis, "rollouts": len(rollouts), "overall": overall, "rows": len({r.row_id for r in rollouts}),
        "errored": sum(r.errored for r in rollouts), "memory_mode": ",".join(modes), "prompt": ",".join(prompts),
        "per_epoch": per, "halves": {"early": xs[:h], "late": xs[-h:] if h else [], "metrics": halves},
        "trend": trend, "checks": checks,
    }


def compare(treat: dict, ctrl: dict, t_rows: Sequence[Rollout], c_rows: Sequence[Rollout]) -> dict:
    """Treatment vs control: slopes, late-minus-early changes and their differences, per-epoch gaps, and a
    paired score difference over bands both runs saw (same salt and prefix give the same bands)."""
    axis = treat["axis"]
    cmp: dict[str, Any] = {"treatment": treat["run"], "control": ctrl["run"], "metrics": {}}
    for m in METRICS:
        ts, cs = treat["trend"].get(m), ctrl["trend"].get(m)
        th, ch = treat["halves"]["metrics"].get(m, {}), ctrl["halves"]["metrics"].get(m, {})
        td, cd = th.get("delta"), ch.get("delta")
        cmp["metrics"][m] = {
            "treatment_mean": treat["overall"][m], "control_mean": ctrl["overall"][m],
            "treatment_slope": ts and ts["slope"], "control_slope": cs and cs["slope"],
            "slope_difference": (ts["slope"] - cs["slope"]) if ts and cs else None,
            "treatment_delta": td, "control_delta": cd,
            "delta_difference": (td - cd) if td is not None and cd is not None else None,
        }
    c_by = {p[axis]: p for p in ctrl["per_epoch"]}
    cmp["per_epoch"] = [{axis: p[axis], "treatment": p["score"], "control": c_by[p[axis]]["score"],
                         "difference": p["score"] - c_by[p[axis]]["score"]}
                        for p in treat["per_epoch"] if p[axis] in c_by]

    def by_band(rows: Sequence[Rollout]) -> dict[str, float]:
        acc: dict[str, list[float]] = {}
        for r in rows:
            if r.fingerprint:
                acc.setdefault(r.fingerprint, []).append(r.score)
        return {k: math.fsum(v) / len(v) for k, v in acc.items()}

    tb, cb = by_band(t_rows), by_band(c_rows)
    shared = sorted(set(tb) & set(cb))
    diffs = [tb[k] - cb[k] for k in shared]
    cmp["paired"] = {"shared_bands": len(shared), "mean_difference": _mean(diffs), "se": _se(diffs)}
    return cmp


def pick_pairs(runs: dict[str, dict], control: str | None) -> list[tuple[str, str]]:
    """(treatment, control) pairs: every other run against ``--control``; without it, two runs are compared
    with the scrambled-memory run (if exactly one) as the control, else the second run."""
    names = list(runs)
    if control is not None:
        if control not in runs:
            raise ReportError(f"--control {control!r} is not a run (runs: {', '.join(names)})")
        return [(n, control) for n in names if n != control]
    if len(names) != 2:
        return []
    scrambled = [n for n in names if runs[n]["memory_mode"] == "scrambled"]
    if len(scrambled) == 1:
        return [(next(n for n in names if n not in scrambled), scrambled[0])]
    return [(names[0], names[1])]


# --------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------


def _f(v: float | None, fmt: str = ".3f", signed: bool = False) -> str:
    if v is None:
        return "n/a"
    return format(v, ("+" if signed else "") + fmt)


def format_text(report: dict) -> str:
    out: list[str] = []
    for note in report["notes"]:
        out.append(f"note: {note}")
    for run in report["runs"]:
        axis = run["axis"]
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
    for cmp in report["comparisons"]:
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
    sk = report["skipped"]
    out.append(f"input: {sk['incomplete']} unscored rows skipped (no evaluation_result), {sk['malformed']} malformed "
               f"rows skipped, {sk['duplicates']} duplicate rollouts merged")
    if report.get("png"):
        out.append(f"png: {report['png']}")
    return "\n".join(out)


def _span(axis: str, xs: Sequence[int]) -> str:
    return f"{axis} {xs[0]}" if len(xs) == 1 else f"{axis}s {xs[0]}-{xs[-1]}"


def plot_png(report: dict, path: str) -> str:
    """Per-epoch curves of the four metrics, one line per run, dashed least-squares fits."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")  # explicit: a report must never need a display
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for ax, m in zip(axes.flat, METRICS):
        for i, run in enumerate(report["runs"]):
            axis = run["axis"]
            pts = [(p[axis], p[m]) for p in run["per_epoch"] if p[m] is not None]
            if not pts:
                continue
            color = f"C{i % 10}"
            ax.plot([a for a, _ in pts], [b for _, b in pts], "o-", color=color, label=run["run"])
            t = run["trend"][m]
            if t is not None:
                x0, x1 = pts[0][0], pts[-1][0]
                ax.plot([x0, x1], [t["intercept"] + t["slope"] * x0, t["intercept"] + t["slope"] * x1], "--",
                        color=color, alpha=0.6)
        ax.set_title(m)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(report["runs"][0]["axis"] if report["runs"] else "epoch")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize="small")
    fig.suptitle("spectrum-rft report: per-epoch means (dashed: least-squares fit)")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def build_report(runs: dict[str, Loaded], group_by: str, control: str | None, notes: list[str]) -> dict:
    notes = list(notes)
    runs = split_by_model(runs, notes)
    analyzed, rows = {}, {}
    for name, ld in runs.items():
        dedupe(ld)
        if not ld.rollouts:
            raise ReportError(f"run {name}: no scored rows (unscored: {ld.incomplete}, malformed: {len(ld.errors)})")
        analyzed[name] = analyze_run(name, ld.rollouts, group_by)
        rows[name] = ld.rollouts
    report: dict[str, Any] = {"group_by": group_by, "notes": notes, "runs": list(analyzed.values())}
    report["comparisons"] = [compare(analyzed[t], analyzed[c], rows[t], rows[c])
                             for t, c in pick_pairs(analyzed, control)]
    report["skipped"] = {"incomplete": sum(ld.incomplete for ld in runs.values()),
                         "malformed": sum(len(ld.errors) for ld in runs.values()),
                         "duplicates": sum(ld.duplicates for ld in runs.values())}
    report["checks_ok"] = all(c["ok"] for r in analyzed.values() for c in r["checks"])
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft report", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("inputs", nargs="*", metavar="[LABEL=]PATH", help="JSONL file, directory of JSONL, or .db")
    ap.add_argument("--logs-db", nargs="?", const=DEFAULT_DB, default=None, metavar="PATH",
                    help=f"read eval-protocol's sqlite store (default path {DEFAULT_DB})")
    ap.add_argument("--experiment", action="append", default=[], metavar="ID",
                    help="experiment id(s) to report from a .db (default: the latest)")
    ap.add_argument("--group-by", default="epoch", help="epoch | input | run-id | order:K (default epoch)")
    ap.add_argument("--control", default=None, metavar="LABEL", help="the control run: every other run is "
                    "compared with it (default, with two runs: the scrambled one, else the second)")
    ap.add_argument("--png", default="spectrum_report.png", help="curves PNG path ('' for none)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--skip-bad", action="store_true", help="skip malformed rows instead of stopping")
    ap.add_argument("--fail-on-check", action="store_true", help="exit 1 when an integrity/freshness check fails")
    a = ap.parse_args(argv)
    if not a.inputs and a.logs_db is None:
        ap.error("give at least one input (JSONL file, directory, .db) or --logs-db")
    try:
        runs, notes = load_inputs(a.inputs, a.logs_db, a.experiment)
        errors = [e for ld in runs.values() for e in ld.errors]
        if errors and not a.skip_bad:
            shown = "\n  ".join(errors[:20])
            more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
            raise ReportError(f"{len(errors)} malformed row(s) (rerun with --skip-bad to skip them):\n  {shown}{more}")
        if not runs:
            raise ReportError("no rows")
        report = build_report(runs, a.group_by, a.control, notes)
    except ReportError as e:
        print(f"spectrum-rft report: {e}", file=sys.stderr)
        return 2
    if a.png:
        report["png"] = plot_png(report, a.png)
    if a.json:
        print(json.dumps(report, indent=2, allow_nan=False))
    else:
        print(format_text(report))
    return 1 if (a.fail_on_check and not report["checks_ok"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
