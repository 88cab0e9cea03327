"""``spectrum-rft launch``: one Fireworks RFT job per experiment arm, through the fireworks-ai SDK.

    spectrum-rft launch --arm weak-scaffold --dry-run            # every file uploaded, the exact requests; no network
    spectrum-rft launch --arm weak-scaffold                       # dataset -> evaluator -> job
    spectrum-rft launch --arm scrambled-control --reuse-evaluator # same evaluator code for every arm
    spectrum-rft launch --status JOB                              # state, epoch, the job's metrics
    spectrum-rft launch --resume JOB                              # resume a stopped job

The steps, always in this order, each through ``fireworks.Fireworks``:

0. **source job** (``--source-job JOB`` only): ``reinforcement_fine_tuning_jobs.get``; the job's output model
   becomes ``training_config.warm_start_from`` (a job with no model refuses the launch before anything exists).
1. **dataset**: rows from :func:`make_spectrum_dataset.make_rows` (EvaluationRow JSON), ``datasets.create``
   then ``datasets.upload``; then the **evaluation dataset** the job scores while it trains (``--eval-rows``
   fresh held-out bands, :mod:`.heldout`), the same two calls.
2. **evaluator**: ``evaluators.create`` + ``get_upload_endpoint`` + PUT of the evaluator tarball to the signed
   URL + ``validate_upload``, then ``evaluators.get`` until ACTIVE. (Not
   ``eval_protocol.evaluation.create_evaluation``: it reads its base URL only from the process-wide
   ``FIREWORKS_API_BASE`` variable, writes the tarball into the project directory, and logs a failed code
   upload as a warning while returning success, so a half-created evaluator would go unreported. The
   requests here are the same ones it sends. The tarball holds only files git tracks, of the evaluator's
   folders, less its ignore rules; a file that looks like a secret refuses the launch: :mod:`.tarball`.)
3. **job**: ``reinforcement_fine_tuning_jobs.create``.

Epochs (see docs/LAUNCH.md): with ``--epoch-mode fresh`` (default) the dataset holds ``--rows`` rows for each
of ``--epochs`` dataset epochs (row ids ``<prefix>-eKK-rNNNN``, every band different) and the job makes
ONE pass over them (``training_config.epochs = 1``, ``chunk_size = --rows`` so each rollout chunk is one
dataset epoch). No band is ever seen twice, and ``spectrum-rft report`` recovers the per-epoch curve from
each row's ``environment_context["epoch"]``. ``--epoch-mode repeat`` is the original firectl shape
(``--rows`` rows, ``training_config.epochs = --epochs``): every epoch re-sees the same bands.

Credentials come only from the environment (``FIREWORKS_API_KEY``, ``FIREWORKS_ACCOUNT_ID``, and
``WANDB_API_KEY`` for W&B); they are never printed or logged. An API error stops the launch and names
every resource already created, with the flags that resume from there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

from spectrum_rft.task.arms import ARMS
from .dryrun import dry_run, firectl_lines, source_listing
from .execute import api_error_text, execute, resume_flags, resume_replaces
from .follow import format_status, job_status, resume_job
from .ids import job_ref, redacted_logs
from .options import DEFAULT_BASE_URL, DEFAULTS, EPOCH_MODES, LOSS_METHODS, LaunchError, LaunchOptions
from .plan import Plan, build_plan, describe_start, write_dataset


def _add_job_args(ap: argparse.ArgumentParser) -> None:
    """The RFT job's options (its training, inference and naming settings)."""
    g = ap.add_argument_group("job")
    g.add_argument("--base-model", default=None, help="the Fireworks model to fine-tune (trainingConfig.baseModel), "
                   f"accounts/<account>/models/<model> (a bare name is refused; default {DEFAULTS['base_model']})")
    g.add_argument("--warm-start-from", default=None, metavar="MODEL", help="instead: warm start from a PEFT model, "
                   "e.g. an SFT run's (trainingConfig.warmStartFrom; refused with --base-model)")
    g.add_argument("--source-job", default=None, metavar="JOB", help="instead: warm start from an earlier RFT job's "
                   "output model, read through the SDK before anything is created")
    g.add_argument("--learning-rate", type=float, default=DEFAULTS["learning_rate"])
    g.add_argument("--learning-rate-warmup-steps", type=int, default=None,
                   help="trainingConfig.learningRateWarmupSteps (default: the platform's)")
    g.add_argument("--temperature", type=float, default=DEFAULTS["temperature"])
    g.add_argument("--max-output-tokens", type=int, default=DEFAULTS["max_output_tokens"])
    g.add_argument("--response-candidates", type=int, default=DEFAULTS["response_candidates"])
    g.add_argument("--max-concurrent-rollouts", type=int, default=DEFAULTS["max_concurrent_rollouts"])
    g.add_argument("--max-concurrent-evaluations", type=int, default=None,
                   help="maxConcurrentEvaluations (default: the platform's)")
    g.add_argument("--node-count", "--nodes", type=int, default=None, help="nodeCount (default: the platform's, 1)")
    g.add_argument("--loss", choices=LOSS_METHODS, default=DEFAULTS["loss"])
    g.add_argument("--kl-beta", type=float, default=None, help="lossConfig.klBeta (default: the trainer's)")
    g.add_argument("--lora-rank", type=int, default=None, help="trainingConfig.loraRank (default: the platform's)")
    g.add_argument("--max-context-length", type=int, default=None, help="trainingConfig.maxContextLength (default: "
                   "the model's); refused below what a windowed episode of the arm needs (the dry run says how much)")
    g.add_argument("--batch-size", type=int, default=None, help="trainingConfig.batchSize, tokens per packed batch "
                   "(default: the platform's); refused below one episode")
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--extra-body", default=None, help="JSON for inference_parameters.extra_body")
    g.add_argument("--chunk-size", type=int, default=None, help="default: --rows in fresh mode, unset in repeat "
                   "(the platform's: 200, when the dataset has more than 300 rows)")
    g.add_argument("--mcp-server", default=None, metavar="NAME", help="mcpServer, an MCP server resource name "
                   "(default: none)")
    g.add_argument("--output-model", default=None, help="default: spectrum-ARM-TAG")
    g.add_argument("--job-id", default=None)
    g.add_argument("--tag", default=None, help="id suffix (default: UTC time YYYYmmdd-HHMMSS)")
    g.add_argument("--base-url", default=None, help="API base URL (default: FIREWORKS_BASE_URL or the cloud)")
    g.add_argument("--max-retries", type=int, default=0, help="SDK retries per request (default 0: a retried "
                   "create can create twice)")


def build_parser() -> argparse.ArgumentParser:
    from spectrum_rft.tools.evaluation.cli import OneLineParser  # noqa: PLC0415  (a usage error is one line)

    ap = OneLineParser(
        prog="spectrum-rft launch", description=__doc__.split("\n\n")[0],
        epilog="arms: " + "; ".join(f"{a.name} = {a.prompt} + {a.memory_mode}" for a in ARMS.values()))
    ap.add_argument("--arm", choices=list(ARMS), help="experiment arm (required unless --list-arms)")
    ap.add_argument("--list-arms", action="store_true", help="print the arms and exit")
    ap.add_argument("--dry-run", action="store_true", help="list every file the evaluator upload would hold "
                    "(with sizes), print the exact requests and firectl lines; no network")
    ap.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    g = ap.add_argument_group("following a job (through the SDK; FIREWORKS_API_KEY, and FIREWORKS_ACCOUNT_ID for a "
                              "bare job id)")
    g.add_argument("--status", default=None, metavar="JOB", help="print the job's state, epoch and metrics as the "
                   "API returns them, and exit")
    g.add_argument("--resume", default=None, metavar="JOB", help="resume a stopped job (the platform's :resume), "
                   "print its state, and exit")
    g = ap.add_argument_group("dataset")
    g.add_argument("--rows", type=int, default=DEFAULTS["rows"], help="rows (bands) per epoch")
    g.add_argument("--epochs", type=int, default=DEFAULTS["epochs"], help="training epochs")
    g.add_argument("--epoch-mode", choices=EPOCH_MODES, default="fresh",
                   help="fresh: rows x epochs never-repeating bands, one RFT pass; repeat: the same rows every epoch")
    g.add_argument("--preset", default="default")
    g.add_argument("--reward", default="default")
    g.add_argument("--think", action=argparse.BooleanOptionalAction, default=False)
    g.add_argument("--salt", default="", help="band salt (same salt and prefix => every arm sees the same bands)")
    g.add_argument("--prefix", default="spectrum", help="row id prefix")
    g.add_argument("--dataset-out", default=None, help="write the dataset file here and keep it (implies --keep; "
                   "default out/launch/ID.jsonl with --keep)")
    g.add_argument("--keep", action="store_true", help="keep the dataset file (--dataset-out); without it the file "
                   "lives in a temporary folder removed when the command ends, dry run or launch")
    g.add_argument("--dataset-id", default=None)
    g.add_argument("--reuse-dataset", default=None, metavar="ID", help="use an uploaded dataset; skip the step")
    g = ap.add_argument_group("evaluation during the job (one way; docs/LAUNCH.md)")
    g.add_argument("--eval-rows", type=int, default=None, metavar="N", help="held-out rows: N fresh bands of their "
                   "own salt, never trained on, uploaded as the job's evaluationDataset "
                   f"(default {DEFAULTS['eval_rows']}"
                   "; 0: no evaluation)")
    g.add_argument("--eval-salt", default=None, help="the held-out bands' salt (default 'heldout:<--salt>')")
    g.add_argument("--eval-auto-carveout", action="store_true", help="instead: the platform carves evaluation rows "
                   "out of the training dataset (evalAutoCarveout; training-distribution bands)")
    g.add_argument("--evaluation-dataset", default=None, metavar="ID", help="instead: an uploaded evaluation dataset "
                   "(evaluationDataset; a launch's held-out dataset is <dataset id>-heldout)")
    g = ap.add_argument_group("evaluator")
    g.add_argument("--entry", default="turn", help="turn | rft (the MCP entry; also: mcp) | FILE.py::FUNCTION (default turn)")
    g.add_argument("--project-dir", default=".", help="evaluator source root, a git work tree: only files git "
                   "tracks are uploaded (default: current directory)")
    g.add_argument("--evaluator-id", default=None, help="default: derived from the entry, as eval-protocol does")
    g.add_argument("--reuse-evaluator", action="store_true", help="use the uploaded evaluator as is")
    g.add_argument("--evaluator-timeout", type=float, default=900.0, help="seconds to wait for ACTIVE")
    _add_job_args(ap)
    g = ap.add_argument_group("Weights & Biases (key from WANDB_API_KEY)")
    g.add_argument("--wandb-project", default=None)
    g.add_argument("--wandb-entity", default=None)
    g.add_argument("--wandb-run-id", default=None)
    return ap


def options_from_args(a: argparse.Namespace) -> LaunchOptions:
    """The typed options of parsed flags (the dataclass's fields are the flags' dest names)."""
    return LaunchOptions(**{f.name: getattr(a, f.name) for f in fields(LaunchOptions)})


def describe_evaluation(plan: Plan) -> str:
    ev = plan.evaluation
    if ev["mode"] == "heldout":
        where = plan.eval_dataset_path if plan.eval_dataset_on_disk == plan.eval_dataset_path else \
            f"a temporary file (--keep writes {plan.eval_dataset_path})"
        return (f"evaluation: {ev['rows']} held-out rows (fresh bands, salt {ev['salt']!r}; {ev['bands_check']}) "
                f"-> {plan.eval_dataset_name} (evaluationDataset), {where}")
    if ev["mode"] == "dataset":
        return f"evaluation: the uploaded dataset {ev['dataset']} (evaluationDataset)"
    if ev["mode"] == "carveout":
        return "evaluation: the platform's carve-out of the training rows (evalAutoCarveout)"
    return "evaluation: none during the job (--eval-rows 0)"


def describe_context(plan: Plan) -> str | None:
    c = plan.context
    if c is None:
        return None
    have = plan.job_kwargs["training_config"].get("max_context_length")
    return f"context: {c.describe()}" + (f"; --max-context-length {have}" if have else "")


def print_plan(plan: Plan, err: Any) -> None:
    print(f"arm {plan.arm.name}: prompt={plan.arm.prompt} memory_mode={plan.arm.memory_mode} ({plan.arm.summary})",
          file=err)
    print(f"start: {describe_start(plan.start)}", file=err)
    if plan.reuse_dataset:
        print(f"dataset: reuse {plan.reuse_dataset}", file=err)
    else:
        where = plan.dataset_path if plan.dataset_on_disk == plan.dataset_path else \
            f"a temporary file (--keep writes {plan.dataset_path})"
        print(f"dataset: {plan.dataset_rows} rows = {plan.rows_per_epoch} x {plan.dataset_epochs} dataset epoch(s) "
              f"-> {where}", file=err)
    print(describe_evaluation(plan), file=err)
    if describe_context(plan):
        print(describe_context(plan), file=err)
    if plan.source:
        print(f"evaluator source: {plan.source['tarball']} {len(plan.source['files'])} files tracked by git, "
              f"{plan.source['bytes']} bytes, sha256 {plan.source['sha256'][:16]}", file=err)
    for n in plan.notes:
        print(n, file=err)


def _print_dry_run(plan: Plan, requests: list[dict], as_json: bool, out: Any) -> None:
    lines = firectl_lines(plan)
    if as_json:
        src = plan.source
        source = {k: src[k] for k in ("tarball", "bytes", "sha256", "total_bytes")} | {
            "files": [{"path": rel, "bytes": src["file_bytes"][rel]} for rel in src["files"]]} if src else {}
        print(json.dumps({"dry_run": True, "arm": plan.arm.name, **record(plan), "source": source,
                          "requests": requests, "firectl": lines, "notes": plan.notes}, indent=2), file=out)
    else:
        print("\n".join(source_listing(plan)), file=out)
        print("\n# dry run: no request was sent. The requests, in order:", file=out)
        print(json.dumps(requests, indent=2), file=out)
        print("\n# equivalent command lines:", file=out)
        print("\n".join(lines), file=out)


def record(plan: Plan) -> dict[str, Any]:
    """What the dry run and the launch's report record of the job beyond its requests: where training starts,
    how the job evaluates, and what an episode needs of the context."""
    c = plan.context
    return {"start": dict(plan.start), "evaluation": {**plan.evaluation, "dataset": plan.eval_dataset_name},
            "context": None if c is None else {"needed_tokens": c.total, "window_tokens": c.prompt_tokens,
                                               "notepad_tokens": c.notepad_tokens, "output_tokens": c.output_tokens}}


def _launch(plan: Plan, a: argparse.Namespace, secrets: list[str], out: Any, err: Any) -> int:
    import httpx  # noqa: PLC0415
    from fireworks import Fireworks  # noqa: PLC0415

    with redacted_logs(secrets), httpx.Client(timeout=httpx.Timeout(600.0, connect=30.0)) as http:
        client = Fireworks(api_key=os.environ["FIREWORKS_API_KEY"].strip(), account_id=plan.account_id,
                           base_url=plan.base_url, http_client=http, max_retries=a.max_retries)
        result = execute(plan, client, http, log=lambda s: print(s, file=err))
    report = {"arm": plan.arm.name, **record(plan), "created": result.created, "job": result.job,
              "error": result.error, "failed_step": result.failed_step}
    if result.error:
        flags = resume_flags(plan, result)
        drop = resume_replaces(flags, a.eval_rows)
        report["resume_flags"], report["resume_replaces"] = flags, drop
        print(f"\nspectrum-rft launch: FAILED at {result.failed_step}: {result.error}", file=err)
        if result.created:
            print("already created (not rolled back):", file=err)
            for c in result.created:
                print(f"  {c['kind']}: {c['name']} ({c['detail']})", file=err)
        else:
            print("nothing was created.", file=err)
        if flags:
            print(f"to resume without re-creating them, rerun with: {' '.join(flags)}"
                  + (f", in place of {' '.join(drop)}" if drop else ""), file=err)
    if a.json:
        print(json.dumps(report, indent=2), file=out)
    elif not result.error:
        print(f"created: {', '.join(c['kind'] + ' ' + c['name'] for c in result.created)}", file=out)
    return 1 if result.error else 0


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    if a.list_arms:
        for arm in ARMS.values():
            print(f"{arm.name:<18} prompt={arm.prompt:<17} memory_mode={arm.memory_mode:<12} {arm.summary}")
        return 0
    secrets = [os.environ.get(k, "") for k in ("FIREWORKS_API_KEY", "WANDB_API_KEY")]
    secrets = [s for s in secrets if len(s) >= 4]
    if a.status or a.resume:
        if a.arm or a.dry_run or (a.status and a.resume):
            ap.error("--status / --resume JOB: one job, no --arm or --dry-run")
        return _follow(a, secrets, out, err)
    if not a.arm:
        ap.error("--arm is required (see --list-arms)")
    try:
        plan = build_plan(options_from_args(a))
    except (LaunchError, ValueError) as e:
        _refuse(e, err)
        return 2
    keep = a.keep or a.dataset_out is not None
    with tempfile.TemporaryDirectory(prefix="spectrum-launch-") as tmp:  # nothing is left behind unless --keep
        write_dataset(plan, None if keep else Path(tmp))
        print_plan(plan, err)
        if not a.dry_run:
            return _launch(plan, a, secrets, out, err)
        return _dry_run(plan, a, secrets, out, err)


def _dry_run(plan: Plan, a: argparse.Namespace, secrets: list[str], out: Any, err: Any) -> int:
    with redacted_logs(secrets):
        try:
            requests = dry_run(plan, secrets)
        except LaunchError as e:
            _refuse(e, err)
            return 2
    try:
        _print_dry_run(plan, requests, a.json, out)
    except BrokenPipeError:  # `launch --dry-run | head`: the reader left early, which is no error of the launch
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())  # nothing left to flush at exit
    return 0


def _refuse(e: Exception, err: Any) -> None:
    """One line per mistake."""
    for line in str(e).splitlines() or [type(e).__name__]:
        print(f"spectrum-rft launch: {line}", file=err)


def _follow(a: argparse.Namespace, secrets: list[str], out: Any, err: Any) -> int:
    """``--status JOB`` / ``--resume JOB`` through the SDK: one screen (``--json``: the job as the API returns it)."""
    import httpx  # noqa: PLC0415
    from fireworks import Fireworks  # noqa: PLC0415

    key = os.environ.get("FIREWORKS_API_KEY", "").strip()
    try:
        if not key:
            raise LaunchError("FIREWORKS_API_KEY is not set (credentials come only from the environment)")
        account, job_id = job_ref(a.status or a.resume, os.environ.get("FIREWORKS_ACCOUNT_ID", "").strip() or None)
    except LaunchError as e:
        _refuse(e, err)
        return 2
    base_url = (a.base_url or os.environ.get("FIREWORKS_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    with redacted_logs(secrets), httpx.Client(timeout=httpx.Timeout(60.0, connect=30.0)) as http:
        client = Fireworks(api_key=key, account_id=account, base_url=base_url, http_client=http,
                           max_retries=a.max_retries)
        try:
            job = resume_job(client, account, job_id) if a.resume else job_status(client, account, job_id)
        except Exception as e:  # noqa: BLE001 -- an API error is one line, never a traceback
            what = "resume" if a.resume else "status"
            print(f"spectrum-rft launch: {what} of {account}/{job_id}: {api_error_text(e)}", file=err)
            return 1
    if a.json:
        print(json.dumps(job, indent=2), file=out)
    else:
        if a.resume:
            print(f"resumed: {job.get('name', job_id)}", file=out)
        print("\n".join(format_status(job)), file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
