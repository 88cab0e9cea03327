"""``spectrum-rft bench90``: a model on the CLBench-style 90-scan schedule (:mod:`spectrum_rft.task.bench90`).

    spectrum-rft bench90 --model spectrum/memoryless --system stateless --json
    spectrum-rft bench90 --model accounts/me/models/m --system icl --runs 5
    spectrum-rft bench90 --model openai/m --api-base http://127.0.0.1:8000/v1 --system icl --out runs/b90

``--out`` keeps every run as it finishes (:class:`RunStore`), ``--resume`` plays only the missing ones, and a
:class:`Clock` states the projected time after the first scan and the time left on every progress line.

Scripted ``spectrum/<policy>`` models are played directly on the environment (the fast path); any other
litellm model goes through the in-process rollout processor. :func:`summarize` gives per-run and mean
available-IoU, stage means, first-10 vs last-10.

``spectrum-rft`` sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` unless it is set (:mod:`spectrum_rft.tools.cli`):
litellm otherwise fetches its cost map at import, and the failing fetch's warning has been seen to race a
lazy import in a background thread (``deadlock detected by _ModuleLock('litellm.rust_bridge.catalog')``).
Called from Python, set it before importing litellm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from spectrum_rft.common.stats import mean_or, standard_error
from spectrum_rft.rollouts.driver import drive
from spectrum_rft.rollouts.episode import InProcessEpisode
from spectrum_rft.rollouts.failures import CAUSE_OF_FAULT, SKIP_MODEL_FAILURE, no_result
from spectrum_rft.rollouts.model_calls import CallStats, ModelCaller
from spectrum_rft.rollouts.scripted import SCRIPTED_MODEL_PREFIX
from spectrum_rft.task.bench90 import BENCH90, N_RUNS, REWARD, SCANS_PER_STAGE, STAGES, SYSTEMS, check_run
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.environment import SpectrumEnv
from spectrum_rft.task.memory import memory_mode

# --------------------------------------------------------------------------------------------------
# Systems and runners
# --------------------------------------------------------------------------------------------------

# bench system -> our memory mode: task.bench90.SYSTEMS
# icl: the oldest scans are trimmed past this estimate (spectrum_context_window.approx_tokens, 4 characters
# a token). CLBench's own budget is not among the published facts; 16k estimated tokens keeps a 90-scan
# transcript inside a 32k-context model with room for the reply.
DEFAULT_ICL_TOKEN_BUDGET = 16000
POLICY_PREFIX = SCRIPTED_MODEL_PREFIX  # the scripted baselines as litellm models


def env_config(system: str, prompt: str = "weak") -> EnvConfig:
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; choose one of {', '.join(SYSTEMS)}")
    return EnvConfig(preset="bench90", memory_mode=SYSTEMS[system], reward=REWARD, prompt=prompt)


def play_policy(policy: str, system: str, run: int, prompt: str = "weak") -> list[dict]:
    """A scripted policy played on the environment in this process, through the episode driver (no litellm);
    returns the env's per-scan records. The policy reads exactly what the model would under ``system``: the
    current scan (``stateless``), every scan so far (``icl``, no token budget), the echo (``scaffold``): the
    audit's :func:`~spectrum_rft.baselines.audit.run_episode`; or the current scan with its notepad
    (``icl_notepad``: the policy answers messages, notepad calls included, so
    :func:`spectrum_rft.baselines.policy_models.policy_request` is the model). The privileged oracle is handed
    the truth of the env played here."""
    from spectrum_rft.baselines import policies as sp  # noqa: PLC0415
    from spectrum_rft.baselines.audit import run_episode  # noqa: PLC0415

    sp.make_policy(policy)  # unknown names fail loudly
    env = SpectrumEnv(env_config(system, prompt))
    memory = env.config.memory
    if not memory.notepad_in_scan:
        run_episode(env, policy, check_run(run), history=memory.history)
        return env.scan_records()
    from spectrum_rft.baselines.policy_models import policy_request  # noqa: PLC0415  (litellm: only for this system)

    context = {**env.config.to_dict(), "seed": check_run(run)}
    ep = InProcessEpisode.for_row(f"bench90-run{run}", {"environment_context": context})

    async def play() -> None:
        opening = await ep.start()
        model = ModelCaller(policy_request(policy, ep.env.truth() if policy == "oracle" else None), tries=1)
        await drive(ep, opening, [{"role": "system", "content": opening.system_prompt}], model, CallStats())

    from spectrum_rft.tools.evaluation.cli import run_until_stopped  # noqa: PLC0415

    run_until_stopped(play())
    if ep.env.metrics()["faults"]:
        raise RuntimeError(f"{policy} was refused by the env: {ep.env.metrics()['faults']}")
    return ep.env.scan_records()


# --------------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------------


def summarize_run(run: int, records: Sequence[dict], *, errored: bool = False, skipped_by_model: int = 0,
                  cause: str | None = None) -> dict:
    """One run's numbers from the env's per-scan records (every scan counted, skipped ones as empty).
    ``errored``: the run's row ended in error; ``skipped_by_model``: its scans skipped because every model request
    failed; ``cause``: why (:mod:`spectrum_rft.rollouts.failures`). ``failed`` says why the run has no result
    (:func:`~spectrum_rft.rollouts.failures.no_result`), else None."""
    avail = [r["avail"] for r in records]
    occ = [r["occ"] for r in records]
    n = SCANS_PER_STAGE
    skipped = sum(1 for r in records if r.get("skipped"))
    return {
        "failed": no_result(1, int(errored), scans=len(records), skipped=skipped, skipped_by_model=skipped_by_model,
                            cause=cause),
        "errored": bool(errored), "scans_skipped_model": skipped_by_model, "cause": cause,
        "run": run,
        "mean_avail": mean_or(avail, math.nan),
        "mean_occ": mean_or(occ, math.nan),
        "stage_means": [mean_or(avail[s * n:(s + 1) * n], math.nan) for s in range(len(STAGES))],
        "first10": mean_or(avail[:10], math.nan),
        "last10": mean_or(avail[-10:], math.nan),
        "scans_skipped": skipped,
    }


def summarize(model: str, system: str, per_run: Sequence[dict], via: str) -> dict:
    """Means over runs (each run weighs the same). A model whose runs are no result together
    (:func:`~spectrum_rft.rollouts.failures.no_result` over its runs: every run errored, or most scans were
    skipped because its requests failed) has ``failed`` (the reason) and no mean: they would be empty reports'."""
    keys = ("mean_avail", "mean_occ", "first10", "last10")
    out: dict[str, Any] = {"model": model, "system": system, "runs": len(per_run), "via": via}
    causes = [r.get("cause") for r in per_run if r.get("cause")]
    out["failed"] = no_result(len(per_run), sum(1 for r in per_run if r.get("errored")),
                              scans=BENCH90.n_scans * len(per_run), skipped=sum(r["scans_skipped"] for r in per_run),
                              skipped_by_model=sum(r.get("scans_skipped_model", 0) for r in per_run),
                              cause=max(causes, key=causes.count) if causes else None)
    out.update({k: None if out["failed"] else mean_or([r[k] for r in per_run], math.nan) for k in keys})
    out["stage_means"] = [None if out["failed"] else mean_or([r["stage_means"][s] for r in per_run], math.nan)
                          for s in range(len(STAGES))]
    out["stages"] = [st.name for st in STAGES]
    out["per_run"] = list(per_run)
    return out


def add_gain(result: dict, stateless: dict | None) -> dict:
    """``gain_over_stateless`` = mean available-IoU minus the same model's stateless mean (per run too,
    when the stateless result has the same runs). A failed result (or stateless baseline, or run) has no gain."""
    ok = stateless is not None and not stateless.get("failed") and not result.get("failed")
    result["stateless_mean_avail"] = None if stateless is None else stateless["mean_avail"]
    result["gain_over_stateless"] = (result["mean_avail"] - stateless["mean_avail"]
                                     if ok and stateless is not None else None)  # ok holds stateless is not None
    base = {r["run"]: r["mean_avail"] for r in (stateless or {}).get("per_run", []) if not r.get("failed")}
    for r in result["per_run"]:
        r["gain_over_stateless"] = r["mean_avail"] - base[r["run"]] if r["run"] in base and not r.get("failed") \
            else None
    return result


def format_table(result: dict) -> str:
    """The result as a table; a failed model (or run) says FAILED and why, with no figure."""
    head = f"bench90  model {result['model']}  system {result['system']}  runs {result['runs']}  via {result['via']}"
    if result.get("failed"):
        lines = [head, "", f"FAILED: {result['failed']}: no result (its figures would be empty reports')", ""]
        lines += [f"run {r['run']}: {'FAILED: ' + r['failed'] if r.get('failed') else 'finished'}"
                  for r in result["per_run"]]
        return "\n".join(lines)
    st = ", ".join(f"{n} {v:.3f}" for n, v in zip(result["stages"], result["stage_means"]))
    lines = [
        head,
        "",
        "| run | avail-IoU | occ-IoU | " + " | ".join(result["stages"]) + " | first10 | last10 | gain vs stateless |",
        "|---|---|---|" + "---|" * len(result["stages"]) + "---|---|---|",
    ]
    for r in result["per_run"]:
        g = "-" if r.get("gain_over_stateless") is None else f"{r['gain_over_stateless']:+.3f}"
        if r.get("failed"):
            lines.append(f"| {r['run']} | FAILED: {r['failed']} |")
            continue
        lines.append(f"| {r['run']} | {r['mean_avail']:.3f} | {r['mean_occ']:.3f} | "
                     + " | ".join(f"{v:.3f}" for v in r["stage_means"])
                     + f" | {r['first10']:.3f} | {r['last10']:.3f} | {g} |")
    gain = result.get("gain_over_stateless")
    lines += ["", f"mean available-IoU {result['mean_avail']:.4f}  (occupied-IoU {result['mean_occ']:.4f})",
              f"stage means: {st}", f"first10 {result['first10']:.4f}  last10 {result['last10']:.4f}",
              "gain over stateless: "
              + ("-" if gain is None else f"{gain:+.4f} (stateless {result['stateless_mean_avail']:.4f})")]
    failed = [r for r in result["per_run"] if r.get("failed")]
    if failed:
        lines.append(f"{len(failed)} of {result['runs']} runs FAILED (scored as empty reports in the means)")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Running a model
# --------------------------------------------------------------------------------------------------


def policy_name(model: str) -> str | None:
    """``spectrum/<policy>`` -> ``<policy>`` (a scripted baseline), else None."""
    return model[len(POLICY_PREFIX):] if model.startswith(POLICY_PREFIX) else None


def run_ids(runs: int | Sequence[int]) -> list[int]:
    """``runs`` as the run indices to play: an int ``R`` is runs ``0..R-1``; a list is those runs (each 0..4)."""
    ids = list(range(runs)) if isinstance(runs, int) else [check_run(r) for r in runs]
    if isinstance(runs, int) and not 1 <= runs <= N_RUNS:
        raise ValueError(f"runs must be 1..{N_RUNS}")
    return ids


def evaluate(model: str, system: str, runs: int, via: str = "auto", prompt: str = "weak", *,
             store: "RunStore | None" = None, clock: "Clock | None" = None, **model_options: Any) -> dict:
    """Evaluate ``model`` under ``system`` on runs ``0..runs-1``: the summary dict (without the gain).
    ``model_options`` go to :func:`run_with_processor`. Rows that ended in error are still summarized
    (every scan scored), listed under ``errors`` and marked ``failed``; a model with no result (every run errored,
    or most scans skipped because its requests failed) has ``failed`` and no means (:func:`summarize`).
    ``store`` (``--out``): the runs it holds for ``system`` are kept, only the others are played, and each run
    is appended to it as it finishes. ``clock``: told of every scan and run (time left)."""
    ids = run_ids(runs)
    env_config(system, prompt)  # validate early
    pol = policy_name(model)
    if via == "auto":
        via = "direct" if pol is not None else "processor"
    if via not in ("direct", "processor"):
        raise ValueError(f"unknown via {via!r}")
    if via == "direct" and pol is None:
        raise ValueError("--via direct plays scripted policies only (model spectrum/<policy>)")
    played: dict[int, PlayedRun] = dict(store.kept(system)) if store is not None else {}
    todo = [r for r in ids if r not in played]

    def done(run: int, p: PlayedRun) -> None:  # on disk before the next run starts
        played[run] = p
        if store is not None:
            store.add(system, run, p)
        if clock is not None:
            clock.finished(row_id(system, run))

    if via == "direct":
        assert pol is not None  # checked above: --via direct plays a scripted policy
        for r in todo:
            done(r, PlayedRun(play_policy(pol, system, r, prompt)))
    elif todo:
        if clock is not None:
            clock.expect(min(len(todo), int(model_options.get("concurrency", N_RUNS))))
        run_with_processor(model, system, todo, prompt, on_done=done, clock=clock, **model_options)
    errors = [played[r].error for r in ids if played[r].error]
    per_run = [summarize_run(r, played[r].records, errored=played[r].error is not None,
                             skipped_by_model=played[r].skipped_by_model, cause=played[r].cause) for r in ids]
    result = summarize(model, system, per_run, via)
    # the curve of the plot: per scan, the mean over runs (and its SE over runs); none for a model with no result
    scans = [[played[r].records[k]["avail"] for r in ids] for k in range(BENCH90.n_scans)] \
        if not result["failed"] and all(len(played[r].records) == BENCH90.n_scans for r in ids) else []
    result["per_scan_avail"] = [mean_or(v, math.nan) for v in scans] or None
    result["per_scan_avail_se"] = [standard_error(v) for v in scans] or None
    # the ICL budget actually applied (the direct path replays the whole history)
    applies = via == "processor" and memory_mode(SYSTEMS[system]).history
    result["token_budget"] = model_options.get("token_budget", DEFAULT_ICL_TOKEN_BUDGET) if applies else None
    result["prompt"] = prompt
    result["errors"] = errors
    return result


def row_id(system: str, run: int) -> str:
    """The eval-protocol row id of ``run`` under ``system`` (progress lines and errors name it)."""
    return f"bench90-{system}-run{run}"


def bench_rows(model: str, system: str, runs: int | Sequence[int], prompt: str = "weak", think: bool = False) -> list:
    """One eval-protocol row per run: ``environment_context`` names the preset, the memory mode of the
    system, the reward, and pins the seed to the run index (the seed is not derived from the row id).
    No env is reset here: the privileged oracle model rebuilds its row from the call's litellm metadata."""
    from eval_protocol.models import EvaluationRow  # noqa: PLC0415

    from spectrum_rft.task.environment import env_for_row  # noqa: PLC0415

    cfg = EnvConfig(**{**env_config(system, prompt).to_dict(), "think": think})
    rows = []
    for run in run_ids(runs):
        rid = row_id(system, run)
        ctx = {**cfg.to_dict(), "seed": run, "row_id": rid, "run": run}
        info = {"environment_context": ctx}
        _, seed = env_for_row(rid, info)
        if seed != run:  # env_for_row honours the pin for presets with seed_is_run_index
            raise RuntimeError(f"bench90: row {rid} would play seed {seed}, not its pinned run {run}")
        rows.append(EvaluationRow.model_validate(
            {"messages": [], "input_metadata": {"row_id": rid, "dataset_info": info}}))
    return rows


def run_with_processor(model: str, system: str, runs: int | Sequence[int], prompt: str = "weak", *,
                       think: bool = False, concurrency: int = 5,
                       token_budget: int | None = DEFAULT_ICL_TOKEN_BUDGET, llm_tries: int = 4,
                       temperature: float | None = None, max_tokens: int | None = None,
                       extra_params: dict | None = None, progress: Any | None = None,
                       on_done: Callable[[int, "PlayedRun"], None] | None = None,
                       clock: "Clock | None" = None) -> list["PlayedRun"]:
    """Each run (``runs``: a count, or the run indices) as one eval-protocol row through the in-process rollout
    path (:mod:`spectrum_rft.rollouts.turn`, the one loop); each run's env per-scan records, its error and its
    scans skipped because the model failed (:class:`PlayedRun`), in the order of ``runs``. ``progress``: a
    stream for progress lines (None: silent); ``clock``: told of every scan (the lines then say the time left).
    ``on_done(run, played)`` is called as each run finishes, before the next one is awaited (``--out`` appends
    it there). A row that ended in error still has every scan scored (the processor closes the rest as empty
    reports)."""

    from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: PLC0415

    from spectrum_rft.baselines import policy_models as spectrum_models  # noqa: PLC0415
    from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor  # noqa: PLC0415

    ids = run_ids(runs)
    rows = bench_rows(model, system, ids, prompt, think)
    params: dict[str, Any] = {"model": model, **(extra_params or {})}
    spectrum_models.prepare(params)  # a scripted spectrum/<policy> model: its litellm provider
    if temperature is not None:
        params["temperature"] = temperature
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    # every scan reaches the progress logger (the clock counts them; lines are printed every few scans)
    processor = SpectrumTurnRolloutProcessor(llm_tries=llm_tries, icl_token_budget=token_budget, log_every_scans=1)

    async def go() -> list:
        config = RolloutProcessorConfig(completion_params=params, mcp_config_path="",
                                        semaphore=asyncio.Semaphore(concurrency),
                                        logger=_progress_logger(progress, clock))
        tasks = processor(rows, config)
        run_of = {t: run for t, run in zip(tasks, ids)}
        played: dict[int, PlayedRun] = {}
        try:
            for t in asyncio.as_completed(tasks):  # each run handed on as it finishes
                row = await t
                run = check_run(row.input_metadata.dataset_info["environment_context"]["seed"])
                played[run] = _played(row)
                if on_done is not None:
                    on_done(run, played[run])
        finally:
            for t in run_of:
                t.cancel()
        return [played[r] for r in ids]

    from spectrum_rft.tools.evaluation.cli import run_until_stopped  # noqa: PLC0415

    return run_until_stopped(go())


def _played(row: Any) -> "PlayedRun":
    """A finished row of :func:`run_with_processor` as a :class:`PlayedRun`."""
    extra = row.execution_metadata.extra or {}
    spec = extra.get("spectrum")
    status = row.rollout_status
    error = f"{row.input_metadata.row_id}: {status.message}" if status is not None and status.is_error() else None
    if spec is None:
        raise RuntimeError(f"bench90: {row.input_metadata.row_id} produced no scores" + (f" ({error})" if error else ""))
    failure = (extra.get("spectrum_rollout") or {}).get("model_failure") or {}
    faults = spec.get("faults") or {}
    cause = failure.get("cause") if isinstance(failure, dict) else None
    if cause is None and faults:
        cause = next((CAUSE_OF_FAULT[k] for k in sorted(faults, key=lambda k: -faults[k]) if k in CAUSE_OF_FAULT),
                     None)
    return PlayedRun(spec["scan_records"], error, int(faults.get("skip_" + SKIP_MODEL_FAILURE, 0)), cause)


@dataclass
class PlayedRun:
    """One run played through the rollout processor."""

    records: list[dict]  # the env's per-scan records (every scan, skipped ones as empty reports)
    error: str | None = None  # "row_id: message" when the row ended in error
    skipped_by_model: int = 0  # scans skipped because every model request failed
    cause: str | None = None  # why the model's requests failed (spectrum_rft.rollouts.failures.FAILURE_CAUSES)


PROGRESS_EVERY = 6  # scans between two progress lines of a run


def _progress_logger(stream: Any | None, clock: "Clock | None" = None) -> Any:
    """A ``DatasetLogger`` that stores nothing (eval-protocol's default one writes a local store), tells
    ``clock`` how many scans each row has done, and, given a stream, prints a progress line at a row's start
    and every :data:`PROGRESS_EVERY` scans (with the time left when there is a clock)."""
    from eval_protocol.dataset_logger.dataset_logger import DatasetLogger  # noqa: PLC0415

    from spectrum_rft.task.window import is_scan_message  # noqa: PLC0415

    class Progress(DatasetLogger):
        def log(self, row: Any) -> None:
            shown = sum(1 for m in row.messages if is_scan_message(m))  # scan `shown` is in front of the model
            rid = row.input_metadata.row_id
            if clock is not None:
                clock.scans(rid, shown - 1)
            if stream is not None and (shown == 1 or (shown - 1) % PROGRESS_EVERY == 0):
                tail = f" | {clock.status()}" if clock is not None else ""
                print(f"bench90 {rid}: scan {shown}/{BENCH90.n_scans}{tail}", file=stream, flush=True)

        def read(self, row_id: str | None = None) -> list:
            return []

    return Progress()


def duration(seconds: float) -> str:
    """``42 s``, ``12 min 5 s``, ``3 h 04 min``: a time a person reads at a glance."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Clock:
    """The time a bench90 command has left: every scan it plays (``total_runs`` runs, both systems), counted as
    the rows report them. Once every run under way has done its first scan, one line states the projected
    total; :meth:`status` is the progress lines' tail (runs done, time left), projected at the rate so far."""

    def __init__(self, total_runs: int, stream: Any | None, now: Callable[[], float] = time.monotonic):
        self.total_runs, self.stream, self.now = total_runs, stream, now
        self.t0 = now()
        self.runs_done = 0
        self.rows: dict[str, int] = {}  # row id -> scans done, for the runs under way
        self.under_way = 1  # runs played at once in the current phase (evaluate sets it)
        self.estimate_s: float | None = None
        self.started = False  # a run has started (imports and set-up before it are not the model's time)

    @property
    def total_scans(self) -> int:
        return self.total_runs * BENCH90.n_scans

    @property
    def scans_done(self) -> int:
        return self.runs_done * BENCH90.n_scans + sum(self.rows.values())

    def expect(self, under_way: int) -> None:
        self.under_way = max(1, under_way)

    def left_s(self) -> float | None:
        done = self.scans_done
        if done <= 0:
            return None
        elapsed = self.now() - self.t0
        return elapsed / done * (self.total_scans - done)

    def scans(self, rid: str, done: int) -> None:
        if not self.rows and not self.runs_done and not self.started:  # the clock starts with the first run
            self.t0, self.started = self.now(), True
        self.rows[rid] = max(0, done)
        if self.estimate_s is None and len(self.rows) >= self.under_way and all(v >= 1 for v in self.rows.values()):
            elapsed = self.now() - self.t0
            self.estimate_s = elapsed + (self.left_s() or 0.0)
            if self.stream is not None:
                runs = f"{self.total_runs} run{'s' if self.total_runs != 1 else ''}"
                print(f"spectrum-rft bench90: estimate: {runs} ({self.total_scans} scans) take about "
                      f"{duration(self.estimate_s)} in all ({elapsed / max(1, self.scans_done):.1f} s a scan so far, "
                      f"{self.under_way} run{'s' if self.under_way != 1 else ''} at a time)",
                      file=self.stream, flush=True)

    def finished(self, rid: str) -> None:
        self.rows.pop(rid, None)
        self.runs_done += 1

    def status(self) -> str:
        left = self.left_s()
        return (f"runs {self.runs_done}/{self.total_runs} done | "
                + ("time left unknown yet" if left is None else f"about {duration(left)} left"))


# --------------------------------------------------------------------------------------------------
# --out: runs on disk as they finish, --resume, the plot
# --------------------------------------------------------------------------------------------------

RUNS_FILE = "runs.jsonl"  # one finished run a line, appended (flushed, fsynced) as it finishes
SETTINGS_FILE = "settings.json"  # what the runs were played with: --resume goes on only with the same
PLOT_FILE = "per_scan_avail.png"
# the settings that change a run's numbers: a resume with another value of one of them is refused
RESUME_KEYS = ("model", "system", "via", "prompt", "think", "token_budget", "temperature", "max_tokens",
               "tool_choice")


class RunStore:
    """The runs of a bench90 command in ``--out``: :data:`SETTINGS_FILE` (written first) and :data:`RUNS_FILE`
    (each finished run appended, on disk before the next run starts: Ctrl-C, SIGTERM or ``kill -9`` lose no
    finished run). With ``resume``, the folder's settings must match and its runs are kept (:meth:`kept`)."""

    def __init__(self, out: Path, settings: dict, *, resume: bool = False):
        from spectrum_rft.tools.evaluation.cli import write_atomic  # noqa: PLC0415

        self.out, self.path = out, out / RUNS_FILE
        self.runs: dict[tuple[str, int], PlayedRun] = {}
        if resume:
            try:
                had = json.loads((out / SETTINGS_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise ValueError(f"--resume: cannot read {out / SETTINGS_FILE}: {e}") from None
            diff = [f"{k} {had.get(k)!r} (now {settings.get(k)!r})" for k in RESUME_KEYS if had.get(k) != settings.get(k)]
            if diff:
                raise ValueError(f"--resume: the runs in {out} were played with other settings: {'; '.join(diff)}; "
                                 "give the same flags, or another --out")
            self.runs = self.on_disk()
        else:
            for name in (RUNS_FILE, "summary.json", PLOT_FILE):
                (out / name).unlink(missing_ok=True)
        write_atomic(out / SETTINGS_FILE, json.dumps(settings, indent=2) + "\n")

    def on_disk(self) -> dict[tuple[str, int], PlayedRun]:
        """The whole runs :data:`RUNS_FILE` holds (what ``--resume`` keeps; a line cut short by a kill is not one)."""
        runs: dict[tuple[str, int], PlayedRun] = {}
        if not self.path.exists():
            return runs
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                runs[(d["system"], check_run(d["run"]))] = PlayedRun(d["records"], d.get("error"),
                                                                    int(d.get("skipped_by_model", 0)), d.get("cause"))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a kill: that run is played again
            if len(runs[(d["system"], d["run"])].records) != BENCH90.n_scans:
                del runs[(d["system"], d["run"])]
        return runs

    def kept(self, system: str) -> dict[int, PlayedRun]:
        return {run: p for (s, run), p in self.runs.items() if s == system}

    def add(self, system: str, run: int, played: PlayedRun) -> None:
        from spectrum_rft.tools.evaluation.plugin import append_line  # noqa: PLC0415

        append_line(self.path, json.dumps({"system": system, "run": run, **asdict(played)}, separators=(",", ":")))
        self.runs[(system, run)] = played


def plot_runs(out: Path, result: dict, stateless: dict | None) -> Path | None:
    """Per-scan available-IoU (mean over runs, +- 1 SE over runs) of the result and its stateless baseline, one
    line each (:func:`spectrum_rft.tools.evaluation.render.plot_per_scan`); None when neither has a result."""
    from spectrum_rft.tools.evaluation.render import plot_per_scan  # noqa: PLC0415

    curves: dict[str, list[float]] = {}
    bands: dict[str, list[float | None]] = {}
    for res in (result, stateless):
        if res is None or res.get("failed") or res["system"] in curves or not res.get("per_scan_avail"):
            continue
        curves[res["system"]] = res["per_scan_avail"]
        bands[res["system"]] = res["per_scan_avail_se"]
    if not curves:
        return None
    return plot_per_scan(curves, out / PLOT_FILE,
                         f"bench90 {result['model']}, {result['runs']} run(s), available-IoU "
                         "(band: +- 1 SE over runs)", bands)


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

CURVE_KEYS = ("per_scan_avail", "per_scan_avail_se")  # the plot's data: in summary.json, not in --json
LOCAL_RUNS = 1  # --runs with --api-base (a local server: ~10 min a run), stated before the run starts


def build_parser() -> argparse.ArgumentParser:
    from spectrum_rft.tools.evaluation.cli import OneLineParser  # noqa: PLC0415
    from spectrum_rft.tools.local_llm import DEFAULT_MAX_TOKENS  # noqa: PLC0415  (stdlib only)

    ap = OneLineParser(
        prog="spectrum-rft bench90",
        description="Evaluate a model on the CLBench-style 90-scan schedule (available-IoU). "
                    "Models spectrum/<policy> are the scripted baselines (memoryless, accumulate, oracle...).")
    ap.add_argument("--model", required=True, help="litellm model id (openai/<name> with --api-base for a local "
                                                   "server), or spectrum/<policy> for a baseline")
    ap.add_argument("--system", default="stateless", choices=list(SYSTEMS))
    ap.add_argument("--runs", type=int, default=None,
                    help=f"runs 0..R-1 (1..{N_RUNS}; default {N_RUNS}, {LOCAL_RUNS} with --api-base: a local model "
                         "takes minutes a run, the count and a time estimate are printed before it goes far)")
    ap.add_argument("--via", default="auto", choices=["auto", "direct", "processor"],
                    help="auto: scripted policies directly on the env, other models through the rollout processor")
    ap.add_argument("--prompt", default="weak", help="system prompt variant (default weak: no strategy hint)")
    ap.add_argument("--no-gain", action="store_true", help="skip the stateless run used for the gain")
    ap.add_argument("--stateless-from", metavar="FILE",
                    help="take the stateless baseline from an earlier `--json` output instead of running it")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help=f"write every run to DIR/{RUNS_FILE} as it finishes (a stopped run keeps them), then "
                         f"summary.json and {PLOT_FILE}")
    ap.add_argument("--overwrite", action="store_true", help="replace the runs an existing --out folder holds")
    ap.add_argument("--resume", action="store_true",
                    help="go on with the runs --out holds (stopped by Ctrl-C, a signal or a crash): keep the finished "
                         "runs, play only the others (the same flags as the first command)")
    m = ap.add_argument_group("model runs (through the in-process rollout path)")
    m.add_argument("--api-base", default=None, metavar="URL",
                   help="OpenAI-compatible endpoint (a local server: llama.cpp, vLLM, spectrum-rft serve-local), "
                        "for openai/<name> models")
    m.add_argument("--tool-choice", default=None, choices=["auto", "required", "none"],
                   help="tool_choice sent with each request (default: auto with --api-base, none otherwise: not "
                        "sent, Fireworks refuses it); none: not sent")
    m.add_argument("--token-budget", type=int, default=DEFAULT_ICL_TOKEN_BUDGET,
                   help=f"icl: trim the oldest scans past this token estimate (0: never; default "
                        f"{DEFAULT_ICL_TOKEN_BUDGET})")
    m.add_argument("--concurrency", type=int, default=N_RUNS, help="runs played at once")
    m.add_argument("--llm-tries", type=int, default=4, help="attempts per model call")
    m.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    m.add_argument("--max-tokens", type=int, default=None,
                   help=f"cap on a reply's tokens (default {DEFAULT_MAX_TOKENS}: a report is ~150; none with "
                        "--think; 0: no cap)")
    m.add_argument("--think", action="store_true", help="do not append /no_think to the system prompt")
    m.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    m.add_argument("--completion-params", default=None, metavar="JSON",
                   help='extra litellm parameters, e.g. \'{"top_p": 0.9}\'')
    return ap


def _settings(ap: argparse.ArgumentParser, a: argparse.Namespace) -> tuple[dict, str, int, str, int | None]:
    """The command's checked settings: the completion params (extra), the path (via), the runs, tool_choice and
    max_tokens (an error through ``ap`` for a bad one)."""
    from spectrum_rft.tools.local_llm import DEFAULT_MAX_TOKENS  # noqa: PLC0415

    try:
        extra = json.loads(a.completion_params) if a.completion_params else None
    except ValueError as e:
        ap.error(f"--completion-params is not JSON: {e}")
    if extra is not None and not isinstance(extra, dict):
        ap.error("--completion-params must be a JSON object")
    extra = dict(extra or {})
    if a.api_base:
        extra["api_base"] = a.api_base
    api_base = extra.get("api_base")
    scripted = policy_name(a.model) is not None
    via = a.via if a.via != "auto" else ("direct" if scripted else "processor")
    runs = a.runs if a.runs is not None else (LOCAL_RUNS if api_base and not scripted else N_RUNS)
    if not 1 <= runs <= N_RUNS:
        ap.error(f"--runs must be 1..{N_RUNS}")
    if a.concurrency < 1 or a.llm_tries < 1 or a.token_budget < 0 or (a.max_tokens is not None and a.max_tokens < 0):
        ap.error("--concurrency and --llm-tries must be >= 1, --token-budget and --max-tokens >= 0")
    if a.resume and not a.out:
        ap.error("--resume goes on with the runs an --out folder holds: give --out")
    tool_choice = a.tool_choice or extra.pop("tool_choice", None) or ("auto" if api_base else "none")
    if tool_choice != "none":
        extra["tool_choice"] = tool_choice
    max_tokens = a.max_tokens if a.max_tokens is not None else (None if a.think else DEFAULT_MAX_TOKENS)
    if a.model.startswith("openai/") and api_base and "api_key" not in extra \
            and not os.environ.get("OPENAI_API_KEY"):
        # a keyless OpenAI-compatible server (llama.cpp, vLLM, serve-hf): litellm insists on a key; eval's child
        # gets the same placeholder (tools/evaluation/runner.child_env). Passed, never set in the environment.
        extra = {**extra, "api_key": "dummy"}
    if via == "processor":
        import litellm  # noqa: PLC0415

        # The command owns its process: stdout is the result (a table or JSON), so litellm's "Give Feedback"
        # banner, printed to stdout on every failed request, is switched off here (never at import).
        litellm.suppress_debug_info = True
    return extra, via, runs, tool_choice, max_tokens


def _announce(a: argparse.Namespace, runs: int, systems: list[str], todo: int, out: Path | None, progress) -> None:
    """The line a model run starts with: what it plays, how much, and what a stop keeps."""
    what = f"{runs} run{'s' if runs != 1 else ''}" + (f" + {runs} of the stateless baseline (the gain)"
                                                        if len(systems) > 1 else "")
    print(f"spectrum-rft bench90: {a.model} under {a.system}: {what}, {todo} to play ({todo * BENCH90.n_scans} "
          f"scans, a model call or more each, {min(a.concurrency, runs)} at a time); "
          f"{'' if runs == N_RUNS else f'--runs {N_RUNS} plays all the benchmark runs; '}"
          f"a time estimate follows the first scan"
          + ("" if out is not None else "; without --out a stopped run keeps nothing"),
          file=progress, flush=True)


def _report(a: argparse.Namespace, result: dict, stateless: dict | None, clock: "Clock | None", progress,
            out: Path | None) -> int:
    """What a finished command says: failures and row errors first (stderr), the summary under ``--out``, then the
    table or JSON; the exit status (1 with any error or failure)."""
    add_gain(result, stateless)
    # what went wrong first, then the table: a model with no result is said to have failed before anything else
    if result.get("failed"):
        print(f"spectrum-rft bench90: {a.model}: FAILED: {result['failed']}: no result", file=sys.stderr)
    if stateless is not None and stateless is not result and stateless.get("failed"):
        print(f"spectrum-rft bench90: {a.model} stateless: FAILED: {stateless['failed']}: no gain", file=sys.stderr)
    for e in result["errors"]:
        print(f"spectrum-rft bench90: row error: {' '.join(str(e).split())[:400]}", file=sys.stderr)
    if clock is not None and progress is not None:
        print(f"spectrum-rft bench90: {clock.total_runs} runs played in {duration(clock.now() - clock.t0)}",
              file=progress)
    if out is not None:
        from spectrum_rft.tools.evaluation.cli import write_atomic  # noqa: PLC0415

        plot = plot_runs(out, result, stateless)
        result["out"], result["plot"] = str(out), None if plot is None else str(plot)
        write_atomic(out / "summary.json", json.dumps(result, indent=2) + "\n")
    sys.stderr.flush()
    if a.json:  # the per-scan curve (180 numbers) is in summary.json under --out, not here
        print(json.dumps({k: v for k, v in result.items() if k not in CURVE_KEYS}, indent=2))
    else:
        print(format_table(result))
        if out is not None:
            print(f"\nruns, summary: {out}\nplot: {result['plot'] or 'none (no result)'}")
    return 1 if result["errors"] or result.get("failed") else 0

def main(argv: list[str] | None = None) -> int:
    from spectrum_rft.tools.evaluation.cli import signals_stop_the_run  # noqa: PLC0415

    with signals_stop_the_run():  # SIGTERM/SIGHUP stop the command as Ctrl-C does: finished runs are kept
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    extra, via, runs, tool_choice, max_tokens = _settings(ap, a)
    progress = None if a.quiet else sys.stderr
    options = {"think": a.think, "concurrency": a.concurrency, "token_budget": a.token_budget or None,
               "llm_tries": a.llm_tries, "temperature": a.temperature, "max_tokens": max_tokens or None,
               "extra_params": extra or None, "progress": progress}
    store: RunStore | None = None
    out = Path(a.out) if a.out else None
    try:
        stateless = None
        if a.stateless_from and a.system != "stateless":
            with open(a.stateless_from, encoding="utf-8") as f:
                stateless = json.load(f)
            if stateless.get("system") != "stateless" or stateless.get("model") != a.model:
                ap.error(f"{a.stateless_from} is not a stateless run of {a.model}")
        systems = [a.system] + (["stateless"] if a.system != "stateless" and stateless is None and not a.no_gain else [])
        if out is not None:
            from spectrum_rft.tools.evaluation.cli import out_problem  # noqa: PLC0415

            problem = out_problem(out, a.overwrite, a.resume, run_files=(RUNS_FILE,))
            if problem:
                print(f"spectrum-rft bench90: {problem}", file=sys.stderr)
                return 2
            from spectrum_rft.common.redaction import redact_params  # noqa: PLC0415

            settings = {"model": a.model, "system": a.system, "via": via, "prompt": a.prompt, "think": a.think,
                        "token_budget": a.token_budget, "temperature": a.temperature, "max_tokens": max_tokens,
                        "tool_choice": tool_choice, "runs": runs, "completion_params": redact_params(extra)}
            store = RunStore(out, settings, resume=a.resume)
            if a.resume:
                kept = sum(1 for s in systems for r in range(runs) if r in store.kept(s))
                print(f"spectrum-rft bench90: resume: {kept} finished runs kept in {out}, "
                      f"{len(systems) * runs - kept} to play", file=sys.stderr, flush=True)
        todo = sum(1 for s in systems for r in range(runs) if store is None or r not in store.kept(s))
        clock = Clock(todo, progress) if via == "processor" else None
        if via == "processor" and progress is not None:
            _announce(a, runs, systems, todo, out, progress)
        result = evaluate(a.model, a.system, runs, via, a.prompt, store=store, clock=clock, **options)
        if a.system == "stateless":
            stateless = result
        elif stateless is None and not a.no_gain:
            stateless = evaluate(a.model, "stateless", runs, via, a.prompt, store=store, clock=clock, **options)
            result["errors"] += [f"stateless: {e}" for e in stateless["errors"]]
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (runner.Stop): every finished run is on disk
        sig = getattr(e, "signal", None)
        # counted on disk, not in memory: a signal between a run's append and its entry in store.runs must not
        # make the line say one run fewer than --resume will keep
        saved = "" if store is None else (f"; {len(store.on_disk())} finished runs are kept in {store.path}, the same "
                                          "command with --resume plays the rest")
        print(f"spectrum-rft bench90: {f'stopped by {sig}' if sig else 'interrupted'}{saved or '; nothing kept (no --out)'}",
              file=sys.stderr)
        return 128 + int(getattr(signal.Signals, sig)) if sig else 130
    except (ValueError, RuntimeError, OSError) as e:
        print(f"spectrum-rft bench90: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return _report(a, result, stateless, clock, progress, out)


if __name__ == "__main__":
    raise SystemExit(main())
