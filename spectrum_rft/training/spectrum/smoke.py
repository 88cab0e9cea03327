"""``spectrum-rft smoke``: the whole local training path once, tiny, timed: ``sft`` (a few steps) -> ``train``
(one GRPO step on the warm start) -> ``serve-hf`` (the GRPO checkpoint behind the OpenAI-compatible endpoint)
-> ``eval`` (one whole episode through the evaluator against it). One line per stage with its time.

Each stage is the real command (``python -m spectrum_rft <stage> ...``) in its own process, as a user runs
it; its output goes to ``OUT/<stage>.log`` (the server's one line per request to ``OUT/serve-hf.log``). The
flags of each stage come from a TOML file with one table per stage (``[sft]``, ``[train]``, ``[serve-hf]``,
``[eval]``; keys are the stage's flag names with ``_``: ``true`` is ``--flag``, ``false`` ``--no-flag``, a
list repeats the flag). The smoke itself sets what joins the stages (``--out``, ``--model``, ``--api-base``,
``--port``): a table that sets them is refused. ``configs/train/smoke.toml`` is the one docs/TRAINING.md times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, TextIO

STAGES = ("sft", "train", "serve-hf", "eval")
JOINS = {"sft": ("out",), "train": ("out", "model"), "serve-hf": ("model", "port", "name"),
         "eval": ("out", "model", "api_base")}  # what the smoke sets itself, per stage
SERVED = "spectrum-hf"
SERVER_START_S = 300.0  # the server loads the checkpoint before it says where it serves


class SmokeError(RuntimeError):
    """A stage that failed or left no output (the message is the one line to print)."""


def stage_flags(table: dict[str, Any], stage: str) -> list[str]:
    """A ``[stage]`` table as command-line flags (refusing the keys the smoke sets itself)."""
    if not isinstance(table, dict):
        raise ValueError(f"[{stage}] must be a table of flags")
    taken = sorted(set(table) & set(JOINS[stage]))
    if taken:
        raise ValueError(f"[{stage}] sets {', '.join(taken)}: the smoke sets it (it joins the stages)")
    flags: list[str] = []
    for key, value in table.items():
        flag = "--" + key.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            if v is True:
                flags.append(flag)
            elif v is False:
                flags.append("--no-" + key.replace("_", "-"))
            else:
                flags += [flag, str(v)]
    return flags


def load(path: str | Path) -> dict[str, list[str]]:
    """The config file -> each stage's flags."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    unknown = sorted(set(raw) - set(STAGES))
    if unknown:
        raise ValueError(f"{path}: unknown tables {', '.join(unknown)}; the stages are {', '.join(STAGES)}")
    return {stage: stage_flags(raw.get(stage, {}), stage) for stage in STAGES}


def _command(stage: str, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "spectrum_rft", stage, *flags]


def _last_line(log: Path) -> str:
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()] if log.is_file() else []
    return lines[-1][:300] if lines else "(no output)"


def _run(stage: str, flags: list[str], log: Path, timeout: float) -> None:
    with open(log, "w") as f:
        try:
            rc = subprocess.run(_command(stage, flags), stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            raise SmokeError(f"{stage}: no end within {timeout:g} s (log: {log})") from None
    if rc != 0:
        raise SmokeError(f"{stage} exited {rc}: {_last_line(log)} (log: {log})")


def _start_server(flags: list[str], log: Path, deadline: float) -> tuple[subprocess.Popen, str, TextIO]:
    """``serve-hf`` on a free port: the process, its base URL (from its 'serving ...' line) and its log file."""
    f = open(log, "w")  # noqa: SIM115 (open while the server runs)
    proc = subprocess.Popen(_command("serve-hf", [*flags, "--port", "0", "--name", SERVED]), stdout=subprocess.PIPE,
                            stderr=f, text=True)
    assert proc.stdout is not None
    t_end = time.monotonic() + deadline
    line = ""
    while time.monotonic() < t_end:
        line = proc.stdout.readline()  # serve-hf prints one stdout line once it serves, then nothing
        if not line:
            break
        f.write(line)
        f.flush()
        if m := re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line):
            return proc, m.group(1), f
    _stop(proc, f)
    raise SmokeError(f"serve-hf did not start: {_last_line(log)} (log: {log})")


def _stop(proc: subprocess.Popen, f: TextIO) -> None:
    if proc.poll() is None:
        proc.terminate()  # serve-hf ends on SIGTERM as on Ctrl-C
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    f.close()


def _need(path: Path, stage: str) -> None:
    if not path.exists():
        raise SmokeError(f"{stage} finished but left no {path}")


def run(stages: dict[str, list[str]], out: Path, *, overwrite: bool = False, stage_timeout: float = 1800.0,
        say: Any = print) -> dict:
    """The four stages in order; returns the record (also ``OUT/smoke.json``). Raises :class:`SmokeError`."""
    out.mkdir(parents=True, exist_ok=True)
    again = ["--overwrite"] if overwrite else []
    times: dict[str, float] = {}
    t_all = time.monotonic()

    def done(stage: str, t0: float, what: str) -> None:
        times[stage] = round(time.monotonic() - t0, 1)
        say(f"smoke: {stage:<8} {times[stage]:6.1f} s  {what}")

    t0 = time.monotonic()
    _run("sft", [*stages["sft"], "--out", str(out / "sft"), *again], out / "sft.log", stage_timeout)
    _need(out / "sft" / "model" / "config.json", "sft")
    done("sft", t0, f"-> {out / 'sft' / 'model'}")

    t0 = time.monotonic()
    _run("train", [*stages["train"], "--model", str(out / "sft" / "model"), "--out", str(out / "grpo"), *again],
         out / "train.log", stage_timeout)
    _need(out / "grpo" / "model" / "config.json", "train")
    rollouts = len((out / "grpo" / "rollouts.jsonl").read_text().splitlines()) if (out / "grpo" / "rollouts.jsonl").is_file() else 0
    done("train", t0, f"-> {out / 'grpo' / 'model'} ({rollouts} rollouts)")

    t0 = time.monotonic()
    proc, url, log = _start_server([*stages["serve-hf"], "--model", str(out / "grpo" / "model")], out / "serve-hf.log",
                                   SERVER_START_S)
    done("serve-hf", t0, f"{url} (started; its request log: {out / 'serve-hf.log'})")
    try:
        t0 = time.monotonic()
        _run("eval", [*stages["eval"], "--model", f"openai/{SERVED}", "--api-base", url, "--out", str(out / "eval"),
                      *again], out / "eval.log", stage_timeout)
    finally:
        _stop(proc, log)
    _need(out / "eval" / "summary.json", "eval")
    requests = [x for x in (out / "serve-hf.log").read_text().splitlines() if x.startswith("serve-hf: request")]
    summary = json.loads((out / "eval" / "summary.json").read_text())
    m: dict = next(iter(summary.get("models", {}).values()), {}) if isinstance(summary.get("models"), dict) else {}
    done("eval", t0, f"-> {out / 'eval'} ({len(requests)} requests served; score {m.get('score')}, "
                     f"rows errored {m.get('rows_errored')}, scans skipped {m.get('scans_skipped_total')})")
    record = {"stages": times, "total_s": round(time.monotonic() - t_all, 1), "requests": len(requests),
              "commands": {s: " ".join(["spectrum-rft", s, *f]) for s, f in stages.items()}}
    (out / "smoke.json").write_text(json.dumps(record, indent=1) + "\n")
    say(f"smoke: total    {record['total_s']:6.1f} s  -> {out / 'smoke.json'}")
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft smoke", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/train/smoke.toml", help="the stages' flags: [sft], [train], [serve-hf], [eval]")
    ap.add_argument("--out", default="runs/smoke", help="the smoke's folder: sft/, grpo/, eval/, a log per stage, smoke.json")
    ap.add_argument("--overwrite", action="store_true", help="replace the runs an earlier smoke left in --out")
    a = ap.parse_args(argv)
    try:
        stages = load(a.config)
    except (OSError, ValueError, tomllib.TOMLDecodeError) as e:
        print(f"spectrum-rft smoke: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    os.environ.setdefault("OPENAI_API_KEY", "local")  # the evaluator's client wants a key; serve-hf reads none
    print(f"smoke: sft -> train (GRPO) -> serve-hf -> eval, in {a.out} (each stage's output: {a.out}/<stage>.log)",
          flush=True)
    try:
        run(stages, Path(a.out), overwrite=a.overwrite, say=lambda s: print(s, flush=True))
    except SmokeError as e:
        print(f"spectrum-rft smoke: {e}", file=sys.stderr)
        return 1
    return 0
