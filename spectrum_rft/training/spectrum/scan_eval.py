"""``spectrum-rft scan-eval``: a checkpoint on scan episodes, the shape GRPO trains on.

One completion per scan episode (a fresh band per row, the scan drawn per row as in training; rows from
``--salt``, so every checkpoint evaluated with the same flags sees the same scans: paired), at one or more
temperatures (0: greedy), sampled with :class:`~spectrum_rft.training.spectrum.sampler.GroupSampler`, free or
grammar-constrained (``--constrained``). Each completion is parsed as TRL parses it and judged by a fresh
env of its row (:func:`~spectrum_rft.training.spectrum.trl_env.judge`): the score, whether the env accepted the
report (``valid``: the scan was scored, not skipped), the gain over the memoryless policy on the same scan
and ``echo_copy``.

It answers two questions of the evidence run (RESULTS_memory.md section 9): how often does the warm start
write a valid ``submit_report`` call unconstrained (the format confound of the last round), and did a
GRPO checkpoint gain over the warm start on held-out scans (greedy, paired: ``--compare BASE.json
OTHER.json...`` prints each checkpoint's mean per-scan difference from the base's, with its standard error).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from spectrum_rft.common.stats import mean, mean_se
from spectrum_rft.task.arms import ARMS
from spectrum_rft.training.spectrum.trl_env import SCRIPTED_HISTORIES
from spectrum_rft.training.spectrum.engines import (Engine, EngineOptions, TransformersEngine, add_engine_flag,
                                                    engine_missing, make_engine)
from spectrum_rft.training.spectrum.vllm_engine import add_memory_flag

SUMMARY_KEYS = ("valid", "score", "gain_vs_memoryless", "gain_valid", "echo_copy", "beyond_current")


def evaluate(model_dir: str | Path, *, arm: str = "weak-scaffold", scans: int = 200, temperature: float = 1.0,
             constrained: bool = False, salt: str = "heldout-scan", batch: int = 8, max_new_tokens: int = 160,
             seed: int = 0, threads: int = 0, model: Any = None, tokenizer: Any = None,
             echo_history: str = "accumulate", engine: Engine | None = None) -> dict:
    """``scans`` scan episodes of ``arm``, one completion each: per-scan records and their means. The
    completions come from ``engine`` (:mod:`.engines`; None: the transformers engine over ``model``, or the
    checkpoint loaded from ``model_dir``), under the env's tool-call grammar when ``constrained``; the rest
    (rows, rendering, parsing, judging) is the same code for every engine."""
    from spectrum_rft.task.instructions import tool_schemas  # noqa: PLC0415
    from spectrum_rft.training.trl_common import load_tokenizer  # noqa: PLC0415
    from spectrum_rft.training.spectrum.trl_data import grpo_rows, scan_sampler  # noqa: PLC0415

    a = ARMS[arm]
    tok = tokenizer or load_tokenizer(Path(model_dir))
    if engine is None:
        engine = TransformersEngine(model_dir, tok, EngineOptions(threads=threads), model=model)
    rows = grpo_rows(scans, prompt=a.prompt, memory_mode=a.memory_mode, salt=salt, prefix="scan-eval",
                     episode="scan", scan_in_prompt=True, echo_history=echo_history)
    # the prompts as training renders them (TRL's rendering of the adapter's tools); the grammar is the env's tools'
    render = scan_sampler(tok, a.memory_mode)
    tools = tool_schemas(a.memory_mode) if constrained else None
    t0 = time.time()
    # the rows' shared preamble (system prompt, tools) computed once for the whole evaluation, where the engine can
    with engine.shared_prefix([render.prompt_ids(r["prompt"]) for r in rows], tools=tools):
        records = _sample_and_judge(rows, render, tok, engine, tools, batch=batch, temperature=temperature,
                                    max_new_tokens=max_new_tokens, seed=seed, t0=t0)
    summary = {k: mean(float(r[k]) if r[k] is not None else None for r in records) for k in SUMMARY_KEYS}
    summary["keeps_echo_beyond"] = keeps_echo_beyond(records)
    return {"arm": arm, "scans": len(records), "temperature": temperature, "constrained": constrained, "salt": salt,
            "echo_history": echo_history, "engine": engine.name, "device": engine.label,
            "seconds": round(time.time() - t0, 1), **summary, "records": records}


def _sample_and_judge(rows: list[dict], render: Any, tok: Any, engine: Engine, tools: list | None, *, batch: int,
                      temperature: float, max_new_tokens: int, seed: int, t0: float) -> list[dict]:
    """One completion per row, ``batch`` rows at a time, each judged by a fresh env of its row."""
    from trl.chat_template_utils import parse_response  # noqa: PLC0415

    from spectrum_rft.training.spectrum.trl_env import judge  # noqa: PLC0415

    records: list[dict] = []
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        ids = [render.prompt_ids(r["prompt"]) for r in chunk]
        comps = [c for c, _ in engine.complete(ids, tools=tools, temperature=temperature,
                                               max_new_tokens=max_new_tokens, seed=seed + start)]
        for row, p, c in zip(chunk, ids, comps):
            message = parse_response(tok, c, prefix=p)
            m = judge(row, message).metrics()
            valid = not m["scans_skipped"]
            records.append({"row_id": row["row_id"], "scan": row["scan"], "valid": valid, "score": m["score"],
                            "gain_vs_memoryless": m["gain_vs_memoryless"],
                            "gain_valid": m["gain_vs_memoryless"] if valid else None,
                            "echo_copy": m["echo_copy"] if valid else None,
                            "beyond_current": m["beyond_current"],
                            "echo_shown": echo_shown(row), "echo_kept_beyond": m["echo_kept_beyond"],
                            "completion": tok.decode(c, skip_special_tokens=False)[:500]})
        done, spent = len(records), time.time() - t0
        print(f"scan-eval: {done}/{len(rows)} scans, {spent:.0f} s, ~{spent / done * (len(rows) - done):.0f} s left",
              file=sys.stderr, flush=True)
    return records


def keeps_echo_beyond(records: list[dict]) -> float | None:
    """Exploration (issue 40 item 1): the share of the scans shown a non-empty echo whose completion keeps at
    least one echoed centre that is not a current peak (the env's ``echo_kept_beyond``; an invalid completion
    keeps nothing and counts); None without such scans."""
    return mean(float(r["echo_kept_beyond"] > 0) for r in records if r["echo_shown"])


def echo_shown(row: dict) -> bool:
    """Whether the row's scan (its text in the prompt's last message) shows a non-empty echo."""
    from spectrum_rft.task.scan_format import parse_scan  # noqa: PLC0415

    scan = parse_scan(row["prompt"][-1]["content"])
    return bool(scan is not None and scan.echo)


def torch_device(name: str) -> Any:
    """``auto``: the first CUDA device when torch sees one, else the CPU; otherwise the device named, refused
    (``RuntimeError``) when torch cannot use it here."""
    import torch  # noqa: PLC0415

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device here")
    return device


PAIRED_KEYS = ("score", "gain_vs_memoryless", "echo_copy", "beyond_current")


class Unpaired(ValueError):
    """Two scan-eval results that were not made on the same scans."""


def paired_difference(base: dict, other: dict) -> dict:
    """``other`` minus ``base``, scan by scan (one result of :func:`evaluate` each, the same rows): for each of
    :data:`PAIRED_KEYS`, the mean difference, its standard error across scans and the number of scans it
    averages (``echo_copy`` only where both reports were valid and an echo was shown)."""
    a = {(r["row_id"], r["scan"]): r for r in base["records"]}
    b = {(r["row_id"], r["scan"]): r for r in other["records"]}
    history = base.get("echo_history", "memoryless"), other.get("echo_history", "memoryless")  # older files: memoryless
    if set(a) != set(b) or base.get("arm") != other.get("arm") or history[0] != history[1]:
        raise Unpaired(f"not the same scans: {len(set(a) ^ set(b))} unmatched of {len(set(a) | set(b))} "
                       f"(arms {base.get('arm')} / {other.get('arm')}, echo histories {history[0]} / {history[1]}); run both "
                       "with the same --arm, --scans, --salt, --echo-history")
    out = {}
    for k in PAIRED_KEYS:
        diffs = [b[s][k] - a[s][k] for s in sorted(a) if a[s].get(k) is not None and b[s].get(k) is not None]
        out[k] = mean_se(diffs)
    return out


def load_result(path: str) -> dict:
    """The one result (one temperature) of a ``scan-eval --out`` file."""
    results = json.loads(Path(path).read_text())["results"]
    if len(results) != 1:
        raise Unpaired(f"{path} holds {len(results)} results (one temperature each); compare files of one")
    return results[0]


def compare_main(paths: list[str]) -> int:
    """``--compare BASE OTHER...``: each OTHER's paired difference from BASE, one line each."""
    try:
        base = load_result(paths[0])
        rows = [(p, paired_difference(base, load_result(p))) for p in paths[1:]]
    except (OSError, KeyError, json.JSONDecodeError, Unpaired) as e:
        print(f"spectrum-rft scan-eval --compare: {e}", file=sys.stderr)
        return 2
    print(f"paired differences from {paths[0]} ({base['scans']} scans, arm {base['arm']}; mean +- SE, scans):")
    for p, d in rows:
        cells = "  ".join(f"{k} {'n/a' if v['mean'] is None else format(v['mean'], '+.3f')} +- "
                          f"{'n/a' if v['se'] is None else format(v['se'], '.3f')} ({v['n']})" for k, v in d.items())
        print(f"  {p}: {cells}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft scan-eval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a checkpoint directory (spectrum-rft sft/train OUT/model)")
    ap.add_argument("--compare", nargs="+", metavar="JSON", help="instead of evaluating: BASE OTHER... (--out files "
                    "of earlier runs on the same scans); each OTHER's paired difference from BASE")
    ap.add_argument("--arm", default="weak-scaffold", choices=sorted(ARMS))
    ap.add_argument("--scans", type=int, default=200, help="scan episodes (default 200: hours on a CPU; progress goes to stderr)")
    ap.add_argument("--temperature", type=float, action="append", help="repeatable; 0: greedy (default 1.0)")
    ap.add_argument("--constrained", action="store_true", help="sample under the tool-call grammar")
    ap.add_argument("--salt", default="heldout-scan", help="band salt of the rows (training rows use others)")
    ap.add_argument("--echo-history", default="accumulate", choices=SCRIPTED_HISTORIES,
                    help="who plays each scan episode's earlier scans (what the echo carries)")
    ap.add_argument("--batch", type=int, default=8, help="completions sampled together (default 8)")
    ap.add_argument("--max-new-tokens", type=int, default=160, help="per completion (default 160)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="auto", help="torch device of the model: auto (cuda when there is one), cpu, "
                    "cuda, cuda:N (transformers engine)")
    add_engine_flag(ap)
    add_memory_flag(ap)
    ap.add_argument("--out", default=None, help="write the records and summary (JSON) here")
    a = ap.parse_args(argv)
    if a.compare:
        if len(a.compare) < 2:
            ap.error("--compare needs a BASE and at least one OTHER")
        return compare_main(a.compare)
    if not a.model:
        ap.error("--model (or --compare) is required")
    if a.scans < 1 or a.batch < 1:
        print("spectrum-rft scan-eval: --scans and --batch must be >= 1", file=sys.stderr)
        return 2
    if not Path(a.model).is_dir():
        print(f"spectrum-rft scan-eval: no checkpoint directory {a.model}", file=sys.stderr)
        return 2
    from spectrum_rft.training.trl_common import load_tokenizer  # noqa: PLC0415

    if (missing := engine_missing(a.engine)) is not None:
        print(f"spectrum-rft scan-eval: --engine {a.engine}: {missing}", file=sys.stderr)
        return 2
    device = None
    if a.engine == "transformers":  # --device is that engine's
        try:
            device = torch_device(a.device)
        except (RuntimeError, ValueError) as e:
            print(f"spectrum-rft scan-eval: --device {a.device}: {e}", file=sys.stderr)
            return 2
    tok = load_tokenizer(Path(a.model))
    engine = make_engine(a.engine, a.model, tok, EngineOptions(threads=a.threads, device=device,
                                                               vllm_memory=a.vllm_memory))
    results = []
    for t in a.temperature or [1.0]:
        r = evaluate(a.model, arm=a.arm, scans=a.scans, temperature=t, constrained=a.constrained, salt=a.salt,
                     batch=a.batch, max_new_tokens=a.max_new_tokens, tokenizer=tok, echo_history=a.echo_history,
                     engine=engine)
        results.append(r)
        fmt = {k: "n/a" if r[k] is None else f"{r[k]:+.3f}" for k in SUMMARY_KEYS}
        print(f"scan-eval {a.model} arm {a.arm} T={t:g}{' constrained' if a.constrained else ''}: {r['scans']} scans, "
              f"valid {fmt['valid']}, score {fmt['score']}, gain vs memoryless {fmt['gain_vs_memoryless']} "
              f"(valid only {fmt['gain_valid']}), echo_copy {fmt['echo_copy']}, beyond_current "
              f"{fmt['beyond_current']}, keeps an echoed non-peak centre "
              f"{'n/a' if r['keeps_echo_beyond'] is None else format(r['keeps_echo_beyond'], '.3f')} [{r['seconds']} s]")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"model": a.model, "results": results}, indent=1))
    return 0
