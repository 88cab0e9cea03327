"""The plan: every id, row and request body of a launch, decided from :class:`LaunchOptions` before any
request. Reads the project directory and asks git which files it tracks (for the tarball: :mod:`.tarball`);
writes nothing (:func:`write_dataset` does)."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from spectrum_rft.tools.entries import ENTRIES, entry_spec

from spectrum_rft.task.arms import ARMS, Arm
from .context import ContextNeed, episode_need
from .heldout import check_disjoint, default_eval_salt, heldout_rows
from .ids import DATASETS, JOBS, dotenv_keys, evaluator_id_for, job_ref, resource_id, resource_name
from .options import DEFAULT_BASE_URL, DEFAULTS, MAX_CHUNK, LaunchError, LaunchOptions, option_problems
from .tarball import TAR_WARN_BYTES, source_bundle

DRY_RUN_ACCOUNT = "ACCOUNT_ID"  # placeholder in dry-run paths when FIREWORKS_ACCOUNT_ID is unset
# --entry names -> rollout path in spectrum_rft.tools.entries ("rft" is the MCP entry's historical name)
ENTRY_NAMES = {"turn": "turn", "rft": "mcp", "mcp": "mcp"}


@dataclass
class Plan:
    arm: Arm
    account_id: str
    base_url: str
    entry: str
    project_dir: Path
    dataset_id: str
    dataset_path: Path
    dataset_rows: int
    dataset_epochs: int
    rows_per_epoch: int
    reuse_dataset: str | None
    evaluator_id: str
    reuse_evaluator: bool
    evaluator_timeout: float
    job_id: str | None
    job_kwargs: dict[str, Any]
    epoch_mode: str
    start: dict[str, str]  # where training starts: {"from": "base_model" | "warm_start_from" | "source_job", ...}
    evaluation: dict[str, Any]  # how the job evaluates: {"mode": "heldout" | "carveout" | "dataset" | "none", ...}
    context: ContextNeed | None = None  # what one episode of the arm needs of the context
    notes: list[str] = field(default_factory=list)
    dataset: list[dict] = field(default_factory=list)  # EvaluationRow JSON, written by write_dataset
    eval_dataset: list[dict] = field(default_factory=list)  # the held-out rows (heldout.py), written beside it
    eval_dataset_id: str = ""
    source: dict[str, Any] = field(default_factory=dict)  # tarball: name, bytes, sha256, files
    tarball: bytes = b""
    dataset_file: Path | None = None  # where write_dataset put the rows (a temporary file unless kept)
    eval_dataset_file: Path | None = None  # and the held-out rows

    @property
    def dataset_on_disk(self) -> Path:
        """The file the dataset step uploads: where :func:`write_dataset` wrote it."""
        return self.dataset_file or self.dataset_path

    @property
    def eval_dataset_path(self) -> Path:
        """Where ``--keep`` writes the held-out rows: beside the training rows."""
        return self.dataset_path.with_name(f"{self.dataset_path.stem}-heldout.jsonl")

    @property
    def eval_dataset_on_disk(self) -> Path:
        return self.eval_dataset_file or self.eval_dataset_path

    @property
    def dataset_name(self) -> str:
        return self.reuse_dataset or f"accounts/{self.account_id}/datasets/{self.dataset_id}"

    @property
    def eval_dataset_name(self) -> str | None:
        """The evaluation dataset the job scores while it trains (None: none, or the platform's carve-out)."""
        if self.evaluation["mode"] == "dataset":
            return self.evaluation["dataset"]
        if self.evaluation["mode"] == "heldout":
            return f"accounts/{self.account_id}/datasets/{self.eval_dataset_id}"
        return None

    @property
    def evaluator_name(self) -> str:
        return f"accounts/{self.account_id}/evaluators/{self.evaluator_id}"


def resolve_entry(name: str) -> str:
    """``turn`` | ``rft`` (= ``mcp``) | ``FILE.py::FUNCTION`` -> ``FILE.py::FUNCTION``."""
    if name in ENTRY_NAMES:
        return entry_spec(ENTRY_NAMES[name])
    if "::" not in name:
        raise LaunchError(f"--entry {name!r}: expected {', '.join(map(repr, ENTRY_NAMES))} or FILE.py::FUNCTION "
                          f"(entries: {', '.join(entry_spec(p) for p in ENTRIES)})")
    return name


CREDENTIAL_VARIABLES = ("FIREWORKS_API_KEY", "FIREWORKS_ACCOUNT_ID")  # a real launch needs both


def _account(o: LaunchOptions, env: Mapping[str, str], notes: list[str]) -> str:
    """The account id; a real launch missing any credential variable is refused naming every one missing."""
    missing = [k for k in CREDENTIAL_VARIABLES if not env.get(k, "").strip()]
    if missing and not o.dry_run:
        raise LaunchError(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set (credentials "
                          "come only from the environment; --dry-run needs neither)")
    account = env.get("FIREWORKS_ACCOUNT_ID", "").strip()
    if not account:
        account = DRY_RUN_ACCOUNT
        notes.append(f"FIREWORKS_ACCOUNT_ID is not set: paths show the placeholder {DRY_RUN_ACCOUNT!r}")
    return account


def start_of(o: LaunchOptions, account: str) -> dict[str, str]:
    """Where training starts, for the job body, the dry run and the run record."""
    if o.warm_start_from:
        return {"from": "warm_start_from", "model": o.warm_start_from}
    if o.source_job:
        return {"from": "source_job", "job": resource_name(o.source_job, JOBS, account)}
    return {"from": "base_model", "model": o.start_model}


def describe_start(start: dict[str, str]) -> str:
    if start["from"] == "warm_start_from":
        return f"warm start from {start['model']} (training_config.warm_start_from)"
    if start["from"] == "source_job":
        return (f"warm start from the output model of {start['job']} (read through the SDK before anything is "
                "created; training_config.warm_start_from)")
    return f"base model {start['model']} (training_config.base_model)"


def _check_project(o: LaunchOptions, entry: str, project_dir: Path, notes: list[str]) -> None:
    if not o.reuse_evaluator:
        problems = []
        if not (project_dir / entry.split("::")[0]).is_file():
            problems.append(f"the entry file {entry.split('::')[0]} is not in the project directory")
        if not (project_dir / "requirements.txt").is_file():
            problems.append("the project directory has no requirements.txt (the evaluator build needs one)")
        for p in problems:
            if not o.dry_run:
                raise LaunchError(p)
            notes.append(f"WARNING: {p}")
    for name, keys in dotenv_keys(project_dir).items():
        shown = ", ".join(keys) if keys else "no keys"
        notes.append(f"WARNING: {name} in the project directory holds {shown}: `eval-protocol upload` / `ep create "
                     f"rft` would upload every key as a Fireworks secret. This launch uploads no secrets and "
                     f"leaves {name} out of the evaluator tarball.")


def _epochs(o: LaunchOptions, notes: list[str]) -> tuple[int, int]:
    """(dataset epochs, training epochs) of the epoch mode (values checked by :func:`option_problems`)."""
    if o.epoch_mode == "fresh":
        epochs = (o.epochs, 1)
    else:
        epochs = (1, o.epochs)
        notes.append("epoch mode 'repeat': every training epoch re-sees the same bands (content repetition "
                     "confounds memory with memorisation; use 'fresh' for a controlled run)")
    if o.salt == "process":
        notes.append("WARNING: salt 'process' draws bands per worker process: GRPO candidates of one row scored "
                     "in different workers see different bands (group integrity breaks). Replication only.")
    return epochs


# where a source job's output model goes before it is read (the dry run shows this; the mock answers it)
SOURCE_JOB_MODEL = "{account}/models/<output model of {job_id}, read at launch>"


def source_job_model(job: str) -> str:
    """The stand-in for the output model of ``job`` (``accounts/<a>/reinforcementFineTuningJobs/<id>``)."""
    account, job_id = job_ref(job, None)
    return SOURCE_JOB_MODEL.format(account=f"accounts/{account}", job_id=job_id)


def job_kwargs(o: LaunchOptions, arm: Arm, tag: str, stem: str, train_epochs: int, env: Mapping[str, str],
               notes: list[str], start: dict[str, str] | None = None,
               evaluation: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``reinforcement_fine_tuning_jobs.create`` arguments (less dataset and evaluator; the evaluation
    dataset's name is set by :func:`build_plan`). A ``source_job`` start is a warm start whose model
    :func:`~spectrum_rft.tools.launch.execute.execute` reads from the job before any request creates anything."""
    start = start or {"from": "base_model", "model": o.start_model}
    training: dict[str, Any] = {}
    if start["from"] == "base_model":
        training["base_model"] = start["model"]
    else:
        training["warm_start_from"] = start.get("model") or source_job_model(start["job"])
    training |= {"epochs": train_epochs, "learning_rate": o.learning_rate,
                 "output_model": resource_id(o.output_model or stem)}
    for k in ("lora_rank", "max_context_length", "batch_size", "learning_rate_warmup_steps"):
        if getattr(o, k) is not None:
            training[k] = getattr(o, k)
    inference: dict[str, Any] = {"temperature": o.temperature, "max_output_tokens": o.max_output_tokens,
                                 "response_candidates_count": o.response_candidates}
    if o.top_p is not None:
        inference["top_p"] = o.top_p
    if o.top_k is not None:
        inference["top_k"] = o.top_k
    if o.extra_body:
        try:
            inference["extra_body"] = json.dumps(json.loads(o.extra_body), separators=(",", ":"))
        except ValueError as e:
            raise LaunchError(f"--extra-body is not valid JSON: {e}") from None
    loss: dict[str, Any] = {"method": o.loss}
    if o.kl_beta is not None:
        loss["kl_beta"] = o.kl_beta
    job: dict[str, Any] = {"display_name": f"spectrum {arm.name} {tag}", "training_config": training,
                           "inference_parameters": inference, "loss_config": loss,
                           "max_concurrent_rollouts": o.max_concurrent_rollouts}
    for k in ("max_concurrent_evaluations", "node_count", "mcp_server"):
        if getattr(o, k) is not None:
            job[k] = getattr(o, k)
    if (evaluation or {}).get("mode") == "carveout":
        job["eval_auto_carveout"] = True
    chunk = o.chunk_size if o.chunk_size is not None else (o.rows if o.epoch_mode == "fresh" else 0)
    if chunk > MAX_CHUNK:  # only --rows can be above it (--chunk-size is checked)
        notes.append(f"chunk_size: --rows {chunk} is above the platform's maximum chunk size {MAX_CHUNK}: chunk_size "
                     f"{MAX_CHUNK}, so a rollout chunk is part of a dataset epoch, not one")
        chunk = MAX_CHUNK
    if chunk:
        job["chunk_size"] = chunk
    if o.wandb_project:
        wandb: dict[str, Any] = {"enabled": True, "project": o.wandb_project}
        if o.wandb_entity:
            wandb["entity"] = o.wandb_entity
        if o.wandb_run_id:
            wandb["run_id"] = o.wandb_run_id
        if env.get("WANDB_API_KEY"):
            wandb["api_key"] = env["WANDB_API_KEY"]
        else:
            notes.append("W&B: WANDB_API_KEY is not set; the job relies on a key stored with the account")
        job["wandb_config"] = wandb
    return job


def _evaluation(o: LaunchOptions, account: str) -> dict[str, Any]:
    """How the job evaluates while it trains: fresh held-out bands (default), the platform's carve-out, an
    uploaded evaluation dataset, or not at all (``--eval-rows 0``)."""
    if o.evaluation_dataset:
        return {"mode": "dataset", "dataset": resource_name(o.evaluation_dataset, DATASETS, account)}
    if o.eval_auto_carveout:
        return {"mode": "carveout"}
    n = DEFAULTS["eval_rows"] if o.eval_rows is None else o.eval_rows
    if n == 0:
        return {"mode": "none"}
    return {"mode": "heldout", "rows": n, "salt": o.eval_salt if o.eval_salt is not None else default_eval_salt(o.salt)}


def build_plan(o: LaunchOptions, env: Mapping[str, str] | None = None) -> Plan:
    """Validate the options and decide every id, row and request body (``env``: default os.environ). Every
    mistake is found before any request: one line each, all of them in one :class:`LaunchError`."""
    from spectrum_rft.rollouts import dataset as msd  # noqa: PLC0415
    from spectrum_rft.task.config import MEMORY_MODES  # noqa: PLC0415

    env = dict(os.environ if env is None else env)
    if o.arm not in ARMS:
        raise LaunchError(f"unknown arm {o.arm!r} (arms: {', '.join(ARMS)})")
    arm = ARMS[o.arm]
    if arm.memory_mode not in MEMORY_MODES:
        raise LaunchError(f"arm {arm.name}: memory mode {arm.memory_mode!r} is not supported by this checkout")
    problems = option_problems(o)  # before the rows are drawn: no work
    if problems:
        raise LaunchError("\n".join(problems))
    notes: list[str] = []
    account = _account(o, env, notes)
    reuse_dataset = resource_name(o.reuse_dataset, DATASETS, account) if o.reuse_dataset else None
    base_url = (o.base_url or env.get("FIREWORKS_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    entry = resolve_entry(o.entry)
    project_dir = Path(o.project_dir).resolve()
    _check_project(o, entry, project_dir, notes)

    tag = o.tag or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", tag):
        raise LaunchError(f"--tag {tag!r}: use 1-31 characters of a-z, 0-9 and '-'")
    stem = resource_id(f"spectrum-{arm.name}-{tag}")
    dataset_epochs, train_epochs = _epochs(o, notes)
    dataset_path = Path(o.dataset_out) if o.dataset_out else Path("out") / "launch" / f"{stem}.jsonl"
    rows: list[dict] = []
    if not o.reuse_dataset:
        raw = msd.make_rows(o.rows, prompt=arm.prompt, memory_mode=arm.memory_mode, preset=o.preset,
                            reward=o.reward, think=o.think, epochs=dataset_epochs, salt=o.salt, prefix=o.prefix)
        rows = [msd.to_evaluation_row_dict(r) for r in raw]
    start = start_of(o, account)
    evaluation = _evaluation(o, account)
    eval_rows = _heldout(o, arm, evaluation, rows, notes)
    context = _context(o, arm, rows or eval_rows, problems)
    if problems:
        raise LaunchError("\n".join(problems))
    job = job_kwargs(o, arm, tag, stem, train_epochs, env, notes, start, evaluation)

    plan = Plan(arm=arm, account_id=account, base_url=base_url, entry=entry, project_dir=project_dir,
                dataset_id=resource_id(o.dataset_id or stem), dataset_path=dataset_path,
                dataset_rows=len(rows) if rows else o.rows * dataset_epochs, dataset_epochs=dataset_epochs,
                rows_per_epoch=o.rows, reuse_dataset=reuse_dataset,
                evaluator_id=resource_id(o.evaluator_id or evaluator_id_for(entry)),
                reuse_evaluator=o.reuse_evaluator, evaluator_timeout=o.evaluator_timeout,
                job_id=resource_id(o.job_id) if o.job_id else None, job_kwargs=job, epoch_mode=o.epoch_mode,
                start=start, evaluation=evaluation, context=context, notes=notes, dataset=rows,
                eval_dataset=eval_rows, eval_dataset_id=resource_id(f"{o.dataset_id or stem}-heldout"))
    if plan.eval_dataset_name:
        job["evaluation_dataset"] = plan.eval_dataset_name
    if not o.reuse_evaluator:
        plan.tarball, plan.source = source_bundle(project_dir, exclude=[dataset_path, plan.eval_dataset_path])
        _check_source(o, entry, plan.source, notes)
        if len(plan.tarball) > TAR_WARN_BYTES:
            notes.append(f"WARNING: the evaluator tarball is {len(plan.tarball) / 2**20:.0f} MiB; untrack large "
                         "files (git rm --cached)")
    return plan


def _heldout(o: LaunchOptions, arm: Arm, evaluation: dict[str, Any], rows: list[dict], notes: list[str]) -> list[dict]:
    """The held-out rows, their bands checked disjoint from every training row's (refused otherwise)."""
    if evaluation["mode"] != "heldout":
        if evaluation["mode"] == "carveout":
            notes.append("evaluation: the platform carves evaluation rows out of the training dataset "
                         "(eval_auto_carveout): they are training-distribution bands, not fresh ones")
        return []
    out = heldout_rows(evaluation["rows"], prompt=arm.prompt, memory_mode=arm.memory_mode, preset=o.preset,
                       reward=o.reward, think=o.think, salt=evaluation["salt"], prefix=o.prefix)
    if not rows:  # what was checked, in words (the dry run's evaluation line, the run record)
        evaluation["bands_check"] = ("not checked against the training bands: the training rows are an uploaded "
                                     "dataset (--reuse-dataset)")
    elif o.salt == "process":
        evaluation["bands_check"] = ("not checked against the training bands: --salt process draws them in each "
                                     "worker process, so bands drawn here are not the job's")
    else:
        check_disjoint(rows, out)
        evaluation["bands_check"] = "checked: none a training row's"
    return out


def _context(o: LaunchOptions, arm: Arm, rows: list[dict], problems: list[str]) -> ContextNeed | None:
    """What one episode needs (:mod:`.context`); a ``--max-context-length`` or ``--batch-size`` below it is a
    problem. None when there is no row to play (an uploaded dataset and no held-out rows)."""
    if not rows:
        return None
    need = episode_need(rows[0], o.max_output_tokens)
    what = f"arm {arm.name}: {need.describe()}"
    if o.max_context_length is not None and o.max_context_length < need.total:
        problems.append(f"--max-context-length {o.max_context_length}: {what}")
    if o.batch_size is not None and o.batch_size < need.total:
        problems.append(f"--batch-size {o.batch_size} (tokens per packed batch) cannot hold one episode: {what}")
    return need


def _check_source(o: LaunchOptions, entry: str, source: dict[str, Any], notes: list[str]) -> None:
    """The tarball holds what git tracks: an entry or requirements.txt on disk but untracked would not reach the
    cloud (an error, a warning in a dry run); other untracked evaluator files are named (not packed)."""
    must = (entry.split("::")[0], "requirements.txt")
    for rel in must:
        if rel in source["untracked"]:
            problem = f"{rel} is not tracked by git, so it would not be uploaded (git add {rel})"
            if not o.dry_run:
                raise LaunchError(problem)
            notes.append(f"WARNING: {problem}")
    rest = [r for r in source["untracked"] if r not in must]
    if rest:
        shown = ", ".join(rest[:10]) + (f" and {len(rest) - 10} more" if len(rest) > 10 else "")
        notes.append(f"note: {len(rest)} untracked file(s) of the evaluator's folders are NOT uploaded (git add "
                     f"them to upload): {shown}")


def write_dataset(plan: Plan, folder: Path | None = None) -> Path | None:
    """Write the plan's dataset rows (what the dataset step uploads) to ``plan.dataset_path``, or into ``folder``
    under the same name (a temporary folder: the launch keeps nothing unless asked), and the held-out rows
    beside them (``<name>-heldout.jsonl``); returns the training rows' file, None when the plan reuses an
    uploaded dataset."""
    from spectrum_rft.rollouts.dataset import write_jsonl  # noqa: PLC0415

    if plan.eval_dataset:
        where = plan.eval_dataset_path if folder is None else folder / plan.eval_dataset_path.name
        plan.eval_dataset_file = write_jsonl(plan.eval_dataset, where)
    if plan.reuse_dataset:
        return None
    plan.dataset_file = write_jsonl(plan.dataset, plan.dataset_path if folder is None else folder / plan.dataset_path.name)
    return plan.dataset_file
