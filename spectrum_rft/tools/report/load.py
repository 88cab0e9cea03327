"""Loading rows: JSONL files and folders, eval-protocol's sqlite store, ``LABEL=PATH`` input specs; runs
split by model and deduplicated."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .validate import ReportError, Rollout, RowError, parse_row, parse_trl_rollout

TRL_RUN_FILES = ("rollouts.jsonl", "config.json")  # a `spectrum-rft train` run directory (TRL)


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


def _trl_run_config(path: Path) -> dict | None:
    """The ``config.json`` of a TRL run directory (its rollouts are then read as TRL rollouts), else None."""
    if not (path.is_dir() and all((path / f).is_file() for f in TRL_RUN_FILES)):
        return None
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReportError(f"{path / 'config.json'}: unreadable run config ({e})") from None
    if not isinstance(config, dict):
        raise ReportError(f"{path / 'config.json'}: not a JSON object")
    return config


def load_jsonl(path: Path, run: str, input_index: int, out: Loaded) -> None:
    seq = len(out.rollouts)
    trl = _trl_run_config(path)
    files = [path / "rollouts.jsonl"] if trl is not None else _jsonl_files(path)
    for f in files:
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
                        r = parse_trl_rollout(obj, where, run, input_index, seq, trl) if trl is not None \
                            else parse_row(obj, where, run, input_index, seq)
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
    for exp_id in chosen:
        name = label if (label and len(chosen) == 1) else (f"{label}:{exp_id}" if label else exp_id)
        ld = Loaded(rollouts=[_with_run(r, name) for r in by_exp[exp_id]])
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
    plain = unlabelled_names([path for label, path in map(parse_input_spec, specs) if label is None])
    for spec in specs:
        label, path = parse_input_spec(spec)
        if path.suffix in (".db", ".sqlite", ".sqlite3") and path.is_file():
            got, n = load_db(path, label, experiments, 0)
            notes += n
            for k, v in got.items():
                _merge(runs, k, v)
            continue
        name = label or plain[path]
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


def unlabelled_names(paths: Sequence[Path]) -> dict[Path, str]:
    """Run names of inputs given without ``LABEL=``: a file's stem or a folder's name, with as many parent
    folders as it takes to tell apart different inputs of the same name (``a/eval``, ``b/eval``: two eval
    folders are two runs, never one). The same path given twice keeps one name."""
    full = {p: p.resolve() for p in paths}
    def name(p: Path, k: int) -> str:
        last = (p.stem if p.is_file() else p.name) or str(p)
        return "/".join([*full[p].parts[-k:-1], last])
    out = {}
    for p in paths:
        k = 1
        while k < len(full[p].parts) and len({full[q] for q in paths if name(q, k) == name(p, k)}) > 1:
            k += 1
        out[p] = name(p, k)
    return out


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
