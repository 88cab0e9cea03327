"""``spectrum-rft bench90``: a model on the CLBench-style 90-scan schedule (:mod:`spectrum_rft.task.bench90`).

    spectrum-rft bench90 --model spectrum/memoryless --system stateless --json
    spectrum-rft bench90 --model accounts/me/models/m --system icl --runs 5

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
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from spectrum_rft.common.stats import mean_or
from spectrum_rft.rollouts.driver import drive
from spectrum_rft.rollouts.episode import InProcessEpisode
from spectrum_rft.rollouts.failures import CAUSE_OF_FAULT, SKIP_MODEL_FAILURE, no_result
from spectrum_rft.rollouts.model_calls import CallStats, ModelCaller
from spectrum_rft.rollouts.scripted import SCRIPTED_MODEL_PREFIX
from spectrum_rft.task.bench90 import BENCH90, N_RUNS, SCANS_PER_STAGE, STAGES, check_run
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.environment import SpectrumEnv

# --------------------------------------------------------------------------------------------------
# Systems and runners
# --------------------------------------------------------------------------------------------------

# bench system -> our memory mode
SYSTEMS: dict[str, str] = {"stateless": "none", "icl": "icl", "icl_notepad": "icl_notepad", "scaffold": "scaffold"}
REWARD = "avail_iou"
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

    asyncio.run(play())
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
    result["gain_over_stateless"] = result["mean_avail"] - stateless["mean_avail"] if ok else None
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
    g = result.get("gain_over_stateless")
    lines += ["", f"mean available-IoU {result['mean_avail']:.4f}  (occupied-IoU {result['mean_occ']:.4f})",
              f"stage means: {st}", f"first10 {result['first10']:.4f}  last10 {result['last10']:.4f}",
              "gain over stateless: "
              + ("-" if g is None else f"{g:+.4f} (stateless {result['stateless_mean_avail']:.4f})")]
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


def evaluate(model: str, system: str, runs: int, via: str = "auto", prompt: str = "weak",
             **model_options: Any) -> dict:
    """Evaluate ``model`` under ``system`` on runs ``0..runs-1``: the summary dict (without the gain).
    ``model_options`` go to :func:`run_with_processor`. Rows that ended in error are still summarized
    (every scan scored), listed under ``errors`` and marked ``failed``; a model with no result (every run errored,
    or most scans skipped because its requests failed) has ``failed`` and no means (:func:`summarize`)."""
    if not 1 <= runs <= N_RUNS:
        raise ValueError(f"runs must be 1..{N_RUNS}")
    env_config(system, prompt)  # validate early
    pol = policy_name(model)
    if via == "auto":
        via = "direct" if pol is not None else "processor"
    errors: list[str] = []
    if via == "direct":
        if pol is None:
            raise ValueError("--via direct plays scripted policies only (model spectrum/<policy>)")
        per_run = [summarize_run(r, play_policy(pol, system, r, prompt)) for r in range(runs)]
    elif via == "processor":
        played = run_with_processor(model, system, runs, prompt, **model_options)
        errors = [p.error for p in played if p.error]
        per_run = [summarize_run(r, p.records, errored=p.error is not None, skipped_by_model=p.skipped_by_model,
                                 cause=p.cause) for r, p in enumerate(played)]
    else:
        raise ValueError(f"unknown via {via!r}")
    result = summarize(model, system, per_run, via)
    # the ICL budget actually applied (the direct path replays the whole history)
    applies = via == "processor" and system == "icl"
    result["token_budget"] = model_options.get("token_budget", DEFAULT_ICL_TOKEN_BUDGET) if applies else None
    result["prompt"] = prompt
    result["errors"] = errors
    return result


def bench_rows(model: str, system: str, runs: int, prompt: str = "weak", think: bool = False) -> list:
    """One eval-protocol row per run: ``environment_context`` names the preset, the memory mode of the
    system, the reward, and pins the seed to the run index (the seed is not derived from the row id).
    No env is reset here: the privileged oracle model rebuilds its row from the call's litellm metadata."""
    from eval_protocol.models import EvaluationRow  # noqa: PLC0415

    from spectrum_rft.task.environment import env_for_row  # noqa: PLC0415

    cfg = EnvConfig(**{**env_config(system, prompt).to_dict(), "think": think})
    rows = []
    for run in range(runs):
        row_id = f"bench90-{system}-run{run}"
        ctx = {**cfg.to_dict(), "seed": run, "row_id": row_id, "run": run}
        info = {"environment_context": ctx}
        _, seed = env_for_row(row_id, info)
        if seed != run:  # env_for_row honours the pin for presets with seed_is_run_index
            raise RuntimeError(f"bench90: row {row_id} would play seed {seed}, not its pinned run {run}")
        rows.append(EvaluationRow.model_validate(
            {"messages": [], "input_metadata": {"row_id": row_id, "dataset_info": info}}))
    return rows


def run_with_processor(model: str, system: str, runs: int, prompt: str = "weak", *, think: bool = False,
                       concurrency: int = 5, token_budget: int | None = DEFAULT_ICL_TOKEN_BUDGET,
                       llm_tries: int = 4,
                       temperature: float | None = None, max_tokens: int | None = None,
                       extra_params: dict | None = None, progress: Any | None = None) -> list["PlayedRun"]:
    """Each run as one eval-protocol row through the in-process rollout path (:mod:`spectrum_rft.rollouts.turn`,
    the one loop); each run's env per-scan records, its error and its scans skipped because the model failed
    (:class:`PlayedRun`). ``progress``: a stream for progress lines (None: silent). A row that ended in error
    still has every scan scored (the processor closes the rest as empty reports)."""
    import asyncio  # noqa: PLC0415

    from eval_protocol.pytest.types import RolloutProcessorConfig  # noqa: PLC0415

    from spectrum_rft.baselines import policy_models as spectrum_models  # noqa: PLC0415
    from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor  # noqa: PLC0415

    rows = bench_rows(model, system, runs, prompt, think)
    params: dict[str, Any] = {"model": model, **(extra_params or {})}
    spectrum_models.prepare(params)  # a scripted spectrum/<policy> model: its litellm provider
    if temperature is not None:
        params["temperature"] = temperature
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    processor = SpectrumTurnRolloutProcessor(llm_tries=llm_tries, icl_token_budget=token_budget)

    async def go() -> list:
        config = RolloutProcessorConfig(completion_params=params, mcp_config_path="",
                                        semaphore=asyncio.Semaphore(concurrency),
                                        logger=_progress_logger(progress))
        return list(await asyncio.gather(*processor(rows, config)))

    done = asyncio.run(go())
    out = []
    for row in done:
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
        out.append(PlayedRun(spec["scan_records"], error, int(faults.get("skip_" + SKIP_MODEL_FAILURE, 0)), cause))
    return out


@dataclass
class PlayedRun:
    """One run played through the rollout processor."""

    records: list[dict]  # the env's per-scan records (every scan, skipped ones as empty reports)
    error: str | None = None  # "row_id: message" when the row ended in error
    skipped_by_model: int = 0  # scans skipped because every model request failed
    cause: str | None = None  # why the model's requests failed (spectrum_rft.rollouts.failures.FAILURE_CAUSES)


def _progress_logger(stream: Any | None) -> Any:
    """A ``DatasetLogger`` that stores nothing (eval-protocol's default one writes a local store) and, given
    a stream, prints a progress line each time the processor logs a row (at the start, every few scans)."""
    from eval_protocol.dataset_logger.dataset_logger import DatasetLogger  # noqa: PLC0415

    from spectrum_rft.task.window import is_scan_message  # noqa: PLC0415

    class Progress(DatasetLogger):
        def log(self, row: Any) -> None:
            if stream is not None:
                shown = sum(1 for m in row.messages if is_scan_message(m))
                print(f"bench90 {row.input_metadata.row_id}: scan {shown}/{BENCH90.n_scans}", file=stream,
                      flush=True)

        def read(self, row_id: str | None = None) -> list:
            return []

    return Progress()


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spectrum-rft bench90",
        description="Evaluate a model on the CLBench-style 90-scan schedule (available-IoU). "
                    "Models spectrum/<policy> are the scripted baselines (memoryless, accumulate, oracle...).")
    ap.add_argument("--model", required=True, help="litellm model id, or spectrum/<policy> for a baseline")
    ap.add_argument("--system", default="stateless", choices=list(SYSTEMS))
    ap.add_argument("--runs", type=int, default=N_RUNS, help=f"runs 0..R-1 (1..{N_RUNS}, default {N_RUNS})")
    ap.add_argument("--via", default="auto", choices=["auto", "direct", "processor"],
                    help="auto: scripted policies directly on the env, other models through the rollout processor")
    ap.add_argument("--prompt", default="weak", help="system prompt variant (default weak: no strategy hint)")
    ap.add_argument("--no-gain", action="store_true", help="skip the stateless run used for the gain")
    ap.add_argument("--stateless-from", metavar="FILE",
                    help="take the stateless baseline from an earlier `--json` output instead of running it")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    m = ap.add_argument_group("model runs (through the in-process rollout path)")
    m.add_argument("--token-budget", type=int, default=DEFAULT_ICL_TOKEN_BUDGET,
                   help=f"icl: trim the oldest scans past this token estimate (0: never; default "
                        f"{DEFAULT_ICL_TOKEN_BUDGET})")
    m.add_argument("--concurrency", type=int, default=N_RUNS, help="runs played at once")
    m.add_argument("--llm-tries", type=int, default=4, help="attempts per model call")
    m.add_argument("--temperature", type=float, default=None)
    m.add_argument("--max-tokens", type=int, default=None)
    m.add_argument("--think", action="store_true", help="do not append /no_think to the system prompt")
    m.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    m.add_argument("--completion-params", default=None, metavar="JSON",
                   help='extra litellm parameters, e.g. \'{"api_base": "http://127.0.0.1:8000/v1"}\'')
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    if not 1 <= a.runs <= N_RUNS:
        ap.error(f"--runs must be 1..{N_RUNS}")
    if a.concurrency < 1 or a.llm_tries < 1 or a.token_budget < 0:
        ap.error("--concurrency and --llm-tries must be >= 1, --token-budget >= 0")
    try:
        extra = json.loads(a.completion_params) if a.completion_params else None
    except ValueError as e:
        ap.error(f"--completion-params is not JSON: {e}")
    if extra is not None and not isinstance(extra, dict):
        ap.error("--completion-params must be a JSON object")
    if a.model.startswith("openai/") and (extra or {}).get("api_base") and "api_key" not in extra \
            and not os.environ.get("OPENAI_API_KEY"):
        # a keyless OpenAI-compatible server (llama.cpp, vLLM, serve-hf): litellm insists on a key; eval's child
        # gets the same placeholder (tools/evaluation/runner.child_env). Passed, never set in the environment.
        extra = {**extra, "api_key": "dummy"}
    if a.via == "processor" or policy_name(a.model) is None:
        import litellm  # noqa: PLC0415

        # The command owns its process: stdout is the result (a table or JSON), so litellm's "Give Feedback"
        # banner, printed to stdout on every failed request, is switched off here (never at import).
        litellm.suppress_debug_info = True
    options = {"think": a.think, "concurrency": a.concurrency, "token_budget": a.token_budget or None,
               "llm_tries": a.llm_tries, "temperature": a.temperature, "max_tokens": a.max_tokens,
               "extra_params": extra, "progress": None if a.quiet else sys.stderr}
    try:
        stateless = None
        if a.stateless_from and a.system != "stateless":
            with open(a.stateless_from, encoding="utf-8") as f:
                stateless = json.load(f)
            if stateless.get("system") != "stateless" or stateless.get("model") != a.model:
                ap.error(f"{a.stateless_from} is not a stateless run of {a.model}")
        result = evaluate(a.model, a.system, a.runs, a.via, a.prompt, **options)
        if a.system == "stateless":
            stateless = result
        elif stateless is None and not a.no_gain:
            stateless = evaluate(a.model, "stateless", a.runs, a.via, a.prompt, **options)
            result["errors"] += [f"stateless: {e}" for e in stateless["errors"]]
    except (ValueError, RuntimeError, OSError) as e:
        print(f"spectrum-rft bench90: {e}", file=sys.stderr)
        return 2
    add_gain(result, stateless)
    # what went wrong first, then the table: a model with no result is said to have failed before anything else
    if result.get("failed"):
        print(f"spectrum-rft bench90: {a.model}: FAILED: {result['failed']}: no result", file=sys.stderr)
    if stateless is not None and stateless is not result and stateless.get("failed"):
        print(f"spectrum-rft bench90: {a.model} stateless: FAILED: {stateless['failed']}: no gain", file=sys.stderr)
    for e in result["errors"]:
        print(f"spectrum-rft bench90: row error: {' '.join(str(e).split())[:400]}", file=sys.stderr)
    sys.stderr.flush()
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_table(result))
    return 1 if result["errors"] or result.get("failed") else 0


if __name__ == "__main__":
    raise SystemExit(main())
