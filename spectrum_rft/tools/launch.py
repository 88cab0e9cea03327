"""``spectrum-rft launch``: one Fireworks RFT job per experiment arm, through the fireworks-ai SDK.

    spectrum-rft launch --arm weak-scaffold --dry-run            # print the exact requests, no network
    spectrum-rft launch --arm weak-scaffold                       # dataset -> evaluator -> job
    spectrum-rft launch --arm scrambled-control --reuse-evaluator # same evaluator code for every arm

Three steps, always in this order, each through ``fireworks.Fireworks``:

1. **dataset**: rows from :func:`make_spectrum_dataset.make_rows` (EvaluationRow JSON), ``datasets.create``
   then ``datasets.upload``.
2. **evaluator**: ``evaluators.create`` + ``get_upload_endpoint`` + PUT of the project tarball to the signed
   URL + ``validate_upload``, then ``evaluators.get`` until ACTIVE. (Not
   ``eval_protocol.evaluation.create_evaluation``: it reads its base URL only from the process-wide
   ``FIREWORKS_API_BASE`` variable, writes the tarball into the project directory, and logs a failed code
   upload as a warning while returning success, so a half-created evaluator would go unreported. The
   requests here are the same ones it sends, with the same ignore rules for the tarball.)
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
import fnmatch
import gzip
import hashlib
import io
import json
import logging
import os
import re
import shlex
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

DEFAULT_BASE_URL = "https://api.fireworks.ai"
DRY_RUN_ACCOUNT = "ACCOUNT_ID"  # placeholder in dry-run paths when FIREWORKS_ACCOUNT_ID is unset

# The original experiment's settings (its firectl command), every one overridable.
DEFAULTS: dict[str, Any] = {
    "base_model": "accounts/fireworks/models/qwen3-1p7b",
    "epochs": 10,
    "learning_rate": 5e-5,
    "temperature": 1.2,
    "max_output_tokens": 1024,
    "response_candidates": 12,
    "max_concurrent_rollouts": 96,
    "loss": "GRPO",
    "rows": 48,
}
LOSS_METHODS = ("GRPO", "DAPO", "GSPO_TOKEN")


@dataclass(frozen=True)
class Arm:
    """A named experiment arm: the dataset options that differ between arms (everything else equal)."""

    name: str
    prompt: str
    memory_mode: str
    summary: str


ARMS: dict[str, Arm] = {a.name: a for a in (
    Arm("explicit-scaffold", "explicit", "scaffold", "explicit memory instruction + env echo of the previous report"),
    Arm("weak-scaffold", "weak", "scaffold", "weak instruction + real echo (the arm with room to learn)"),
    Arm("scrambled-control", "explicit", "scrambled", "control: echo of seeded random content of the same size"),
    Arm("weak-scrambled", "weak", "scrambled", "control matched to weak-scaffold"),
    Arm("notepad", "notepad-explicit", "notepad", "agent-managed notepad tools, ICL-off window"),
    Arm("icl", "explicit", "icl", "full history in context (no memory aid)"),
    Arm("icl-notepad", "notepad-explicit", "icl_notepad", "CLBench's icl_notepad: notepad field in submit_report"),
    Arm("memoryless", "explicit", "none", "ICL-off window, no memory channel at all"),
)}

ENTRIES = {
    "turn": "test_spectrum_turn.py::test_spectrum_turn",
    "rft": "test_spectrum_rft.py::test_spectrum_rft",
}

# What eval-protocol's uploader never puts in the evaluator tarball (eval_protocol.evaluation), plus .gitignore.
TAR_DEFAULT_IGNORES = (
    ".git", ".github", "__pycache__", "*.pyc", "*.pyo", "*.pyd", ".venv", "venv", ".tox", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", ".ipynb_checkpoints", ".idea", ".vscode", ".cache", "node_modules", "vendor",
    "dist", "build", "*.egg-info", "*.egg", "*.whl", "*.tar.gz", "*.zip", "*.log", "*.tmp", "*.swp", ".DS_Store",
    "coverage", "htmlcov", ".coverage", "coverage.xml", ".env", ".env.*", "*.so", "*.dylib", "env",
    ".eval_protocol", ".hypothesis",
)
TAR_WARN_BYTES = 50 * 1024 * 1024


class LaunchError(Exception):
    """A launch that cannot proceed; the message is for the user (never contains a credential)."""


# --------------------------------------------------------------------------------------------------
# Ids, secrets
# --------------------------------------------------------------------------------------------------


def resource_id(text: str, limit: int = 63) -> str:
    """A Fireworks resource id: lowercase a-z, 0-9 and '-', starts with a letter, at most 63 chars."""
    s = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "", text.lower().replace("_", "-"))).strip("-")
    if not s or not s[0].isalpha():
        s = "x-" + s
    return s[:limit].rstrip("-")


def evaluator_id_for(entry: str) -> str:
    """The id ``eval-protocol upload`` derives from an entry (``file.py::func`` -> ``file-func``)."""
    path, _, func = entry.partition("::")
    return resource_id(f"{Path(path).stem}-{func}")


def dotenv_keys(project_dir: Path) -> dict[str, list[str]]:
    """Key names (never values) of the ``.env`` files in the project directory."""
    out = {}
    for p in sorted(project_dir.glob(".env*")):
        if not p.is_file():
            continue
        keys = []
        try:
            for line in p.read_text(errors="replace").splitlines():
                m = re.match(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=", line)
                if m:
                    keys.append(m.group(1))
        except OSError:
            keys.append("(unreadable)")
        out[p.name] = keys
    return out


class _Redact(logging.Filter):
    """Replaces secret strings in log records (the SDK logs request bodies at DEBUG: a W&B key is in one)."""

    def __init__(self, secrets: list[str]):
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            msg = record.getMessage()
            if any(s in msg for s in self.secrets):
                for s in self.secrets:
                    msg = msg.replace(s, "***")
                record.msg, record.args = msg, None
        return True


@contextlib.contextmanager
def _redacted_logs(secrets: list[str]) -> Iterator[None]:
    names = ["fireworks", "fireworks._base_client", "httpx", "httpcore", "httpcore.http11", "httpcore.connection"]
    flt = _Redact(secrets)
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addFilter(flt)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(flt)


# --------------------------------------------------------------------------------------------------
# The plan: everything decided before any request
# --------------------------------------------------------------------------------------------------


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
    notes: list[str] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)  # tarball: name, bytes, sha256, files
    tarball: bytes = b""

    @property
    def dataset_name(self) -> str:
        return self.reuse_dataset or f"accounts/{self.account_id}/datasets/{self.dataset_id}"

    @property
    def evaluator_name(self) -> str:
        return f"accounts/{self.account_id}/evaluators/{self.evaluator_id}"


def _gitignore_patterns(project_dir: Path) -> list[str]:
    p = project_dir / ".gitignore"
    if not p.is_file():
        return []
    return [ln.strip() for ln in p.read_text(errors="replace").splitlines() if ln.strip() and not ln.startswith("#")
            and not ln.strip().startswith("!")]


def _ignored(rel: str, is_dir: bool, patterns: list[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    for pat in patterns:
        dir_only = pat.endswith("/")
        pat = pat.rstrip("/")
        if dir_only and not is_dir:
            continue
        if pat.startswith("/"):  # anchored at the project root
            if fnmatch.fnmatch(rel, pat[1:]):
                return True
            continue
        if fnmatch.fnmatch(name, pat) or ("/" in pat and fnmatch.fnmatch(rel, pat)):
            return True
    return False


def source_files(project_dir: Path, exclude: list[Path] = ()) -> list[str]:
    """Project files the evaluator tarball holds (relative, sorted): eval-protocol's ignores + .gitignore."""
    patterns = list(TAR_DEFAULT_IGNORES) + _gitignore_patterns(project_dir)
    skip = {p.resolve() for p in exclude}
    out = []
    for root, dirs, files in os.walk(project_dir):
        rroot = Path(root)
        rel_root = rroot.relative_to(project_dir).as_posix()
        rel_of = (lambda n: n) if rel_root == "." else (lambda n: f"{rel_root}/{n}")
        dirs[:] = sorted(d for d in dirs if not _ignored(rel_of(d), True, patterns)
                         and not (rroot / d).is_symlink())
        for f in files:
            path = rroot / f
            if path.is_symlink() or not path.is_file() or path.resolve() in skip:
                continue
            if not _ignored(rel_of(f), False, patterns):
                out.append(rel_of(f))
    return sorted(out)


def build_tarball(project_dir: Path, files: list[str]) -> bytes:
    """A reproducible tar.gz (sorted, zeroed times and owners) rooted at the project directory's name,
    like eval-protocol's uploader."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            data = (project_dir / rel).read_bytes()
            info = tarfile.TarInfo(f"{project_dir.name}/{rel}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def build_plan(a: argparse.Namespace, env: dict[str, str] | None = None) -> Plan:
    """Validate options and decide every id, file and request body. Writes the dataset file."""
    from spectrum_rft.rollouts import dataset as msd  # noqa: PLC0415
    from spectrum_rft.task.environment import MEMORY_MODES  # noqa: PLC0415

    env = dict(os.environ if env is None else env)
    arm = ARMS[a.arm]
    if arm.memory_mode not in MEMORY_MODES:
        raise LaunchError(f"arm {arm.name}: memory mode {arm.memory_mode!r} is not supported by this checkout")
    notes: list[str] = []
    account = env.get("FIREWORKS_ACCOUNT_ID", "").strip()
    if not account:
        if not a.dry_run:
            raise LaunchError("FIREWORKS_ACCOUNT_ID is not set (credentials come only from the environment)")
        account = DRY_RUN_ACCOUNT
        notes.append(f"FIREWORKS_ACCOUNT_ID is not set: paths show the placeholder {DRY_RUN_ACCOUNT!r}")
    if not a.dry_run and not env.get("FIREWORKS_API_KEY", "").strip():
        raise LaunchError("FIREWORKS_API_KEY is not set (credentials come only from the environment)")
    base_url = (a.base_url or env.get("FIREWORKS_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")

    entry = ENTRIES.get(a.entry, a.entry)
    if "::" not in entry:
        raise LaunchError(f"--entry {a.entry!r}: expected 'turn', 'rft' or FILE.py::FUNCTION")
    project_dir = Path(a.project_dir).resolve()
    entry_file = project_dir / entry.split("::")[0]
    if not a.reuse_evaluator:
        problems = []
        if not entry_file.is_file():
            problems.append(f"the entry file {entry.split('::')[0]} is not in the project directory")
        if not (project_dir / "requirements.txt").is_file():
            problems.append("the project directory has no requirements.txt (the evaluator build needs one)")
        for p in problems:
            if not a.dry_run:
                raise LaunchError(p)
            notes.append(f"WARNING: {p}")

    for name, keys in dotenv_keys(project_dir).items():
        shown = ", ".join(keys) if keys else "no keys"
        notes.append(f"WARNING: {name} in the project directory holds {shown}: `eval-protocol upload` / `ep create "
                     f"rft` would upload every key as a Fireworks secret. This launch uploads no secrets and "
                     f"leaves {name} out of the evaluator tarball.")

    tag = a.tag or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", tag):
        raise LaunchError(f"--tag {tag!r}: use 1-31 characters of a-z, 0-9 and '-'")
    stem = resource_id(f"spectrum-{arm.name}-{tag}")
    rows_per_epoch, epochs = a.rows, a.epochs
    if rows_per_epoch < 1 or epochs < 1:
        raise LaunchError("--rows and --epochs must be >= 1")
    if a.epoch_mode == "fresh":
        dataset_epochs, train_epochs = epochs, 1
    else:
        dataset_epochs, train_epochs = 1, epochs
        notes.append("epoch mode 'repeat': every training epoch re-sees the same bands (content repetition "
                     "confounds memory with memorisation; use 'fresh' for a controlled run)")
    if a.salt == "process":
        notes.append("WARNING: salt 'process' draws bands per worker process: GRPO candidates of one row scored "
                     "in different workers see different bands (group integrity breaks). Replication only.")

    dataset_path = Path(a.dataset_out) if a.dataset_out else Path("out") / "launch" / f"{stem}.jsonl"
    n_rows = rows_per_epoch * dataset_epochs
    if not a.reuse_dataset:
        rows = msd.make_rows(rows_per_epoch, prompt=arm.prompt, memory_mode=arm.memory_mode, preset=a.preset,
                             reward=a.reward, think=a.think, epochs=dataset_epochs, salt=a.salt, prefix=a.prefix)
        msd.write_jsonl([msd.to_evaluation_row_dict(r) for r in rows], dataset_path)
        n_rows = len(rows)

    output_model = a.output_model or stem
    training = {"base_model": a.base_model, "epochs": train_epochs, "learning_rate": a.learning_rate,
                "output_model": resource_id(output_model)}
    for k in ("lora_rank", "max_context_length", "batch_size"):
        if getattr(a, k) is not None:
            training[k] = getattr(a, k)
    inference: dict[str, Any] = {"temperature": a.temperature, "max_output_tokens": a.max_output_tokens,
                                 "response_candidates_count": a.response_candidates}
    if a.top_p is not None:
        inference["top_p"] = a.top_p
    if a.top_k is not None:
        inference["top_k"] = a.top_k
    if a.extra_body:
        try:
            inference["extra_body"] = json.dumps(json.loads(a.extra_body), separators=(",", ":"))
        except ValueError as e:
            raise LaunchError(f"--extra-body is not valid JSON: {e}") from None
    loss: dict[str, Any] = {"method": a.loss}
    if a.kl_beta is not None:
        loss["kl_beta"] = a.kl_beta
    job: dict[str, Any] = {
        "display_name": f"spectrum {arm.name} {tag}",
        "training_config": training,
        "inference_parameters": inference,
        "loss_config": loss,
        "max_concurrent_rollouts": a.max_concurrent_rollouts,
    }
    chunk = a.chunk_size if a.chunk_size is not None else (rows_per_epoch if a.epoch_mode == "fresh" else 0)
    if chunk:
        job["chunk_size"] = chunk
    if a.wandb_project:
        wandb: dict[str, Any] = {"enabled": True, "project": a.wandb_project}
        if a.wandb_entity:
            wandb["entity"] = a.wandb_entity
        if a.wandb_run_id:
            wandb["run_id"] = a.wandb_run_id
        if env.get("WANDB_API_KEY"):
            wandb["api_key"] = env["WANDB_API_KEY"]
        else:
            notes.append("W&B: WANDB_API_KEY is not set; the job relies on a key stored with the account")
        job["wandb_config"] = wandb

    plan = Plan(arm=arm, account_id=account, base_url=base_url, entry=entry, project_dir=project_dir,
                dataset_id=resource_id(a.dataset_id or stem), dataset_path=dataset_path, dataset_rows=n_rows,
                dataset_epochs=dataset_epochs, rows_per_epoch=rows_per_epoch, reuse_dataset=a.reuse_dataset,
                evaluator_id=resource_id(a.evaluator_id or evaluator_id_for(entry)),
                reuse_evaluator=a.reuse_evaluator, evaluator_timeout=a.evaluator_timeout,
                job_id=resource_id(a.job_id) if a.job_id else None, job_kwargs=job, epoch_mode=a.epoch_mode,
                notes=notes)
    if a.reuse_dataset and not a.reuse_dataset.startswith("accounts/"):
        plan.reuse_dataset = f"accounts/{account}/datasets/{resource_id(a.reuse_dataset)}"
    if not a.reuse_evaluator:
        files = source_files(project_dir, exclude=[dataset_path])
        plan.tarball = build_tarball(project_dir, files)
        plan.source = {"tarball": f"{project_dir.name}.tar.gz", "bytes": len(plan.tarball),
                       "sha256": hashlib.sha256(plan.tarball).hexdigest(), "files": files}
        if len(plan.tarball) > TAR_WARN_BYTES:
            notes.append(f"WARNING: the evaluator tarball is {len(plan.tarball) / 2**20:.0f} MiB; add large "
                         "files to .gitignore")
    return plan


# --------------------------------------------------------------------------------------------------
# Running the steps
# --------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    created: list[dict[str, str]] = field(default_factory=list)  # {"kind", "name", "detail"}
    job: dict[str, Any] | None = None
    error: str | None = None
    failed_step: str | None = None


def _api_error_text(e: Exception) -> str:
    import fireworks  # noqa: PLC0415

    if isinstance(e, fireworks.APIStatusError):
        body = e.body
        msg = None
        if isinstance(body, dict):
            err = body.get("error", body)
            msg = err.get("message") if isinstance(err, dict) else err
        return f"HTTP {e.status_code}: {msg or e.message}"
    if isinstance(e, fireworks.APIConnectionError):
        return f"cannot reach the API ({type(e).__name__}: {e})"
    return f"{type(e).__name__}: {e}"


def execute(plan: Plan, client: Any, http: Any, *, log: Callable[[str], None] = lambda s: None,
            sleep: Callable[[float], None] = time.sleep, on_step: Callable[[str], None] = lambda s: None) -> Outcome:
    """Create dataset, evaluator and job in that order with the SDK ``client``; ``http`` (an httpx.Client)
    PUTs the source tarball to the signed URL (no Fireworks credentials on that request). Stops at the
    first failure; the outcome lists what exists by then."""
    out = Outcome()
    step = ""
    try:
        if plan.reuse_dataset:
            log(f"dataset: reusing {plan.reuse_dataset}")
        else:
            step = "dataset.create"
            on_step(step)
            client.datasets.create(dataset_id=plan.dataset_id, dataset={
                "display_name": plan.dataset_id, "eval_protocol": {}, "format": "FORMAT_UNSPECIFIED",
                "example_count": str(plan.dataset_rows)})
            out.created.append({"kind": "dataset", "name": plan.dataset_name, "detail": "created, file not uploaded"})
            step = "dataset.upload"
            on_step(step)
            client.datasets.upload(plan.dataset_id, file=(plan.dataset_path.name, plan.dataset_path.read_bytes(),
                                                          "application/jsonl"))
            out.created[-1]["detail"] = f"{plan.dataset_rows} rows uploaded"
            log(f"dataset: {plan.dataset_name} ({plan.dataset_rows} rows)")

        if plan.reuse_evaluator:
            log(f"evaluator: reusing {plan.evaluator_name}")
        else:
            step = "evaluator.create"
            on_step(step)
            client.evaluators.create(evaluator_id=plan.evaluator_id, evaluator={
                "display_name": plan.evaluator_id, "entry_point": plan.entry,
                "description": f"spectrum-rft {plan.entry} (source sha256 {plan.source['sha256'][:16]})"})
            out.created.append({"kind": "evaluator", "name": plan.evaluator_name, "detail": "created, no code"})
            step = "evaluator.get_upload_endpoint"
            on_step(step)
            name = plan.source["tarball"]
            resp = client.evaluators.get_upload_endpoint(plan.evaluator_id,
                                                         filename_to_size={name: str(len(plan.tarball))})
            url = (resp.filename_to_signed_urls or {}).get(name)
            if not url:
                raise LaunchError(f"getUploadEndpoint returned no signed URL for {name}")
            step = "evaluator.upload_source"
            on_step(step)
            r = http.put(url, content=plan.tarball, headers={
                "Content-Type": "application/octet-stream",
                "X-Goog-Content-Length-Range": f"{len(plan.tarball)},{len(plan.tarball)}"})
            if r.status_code >= 400:
                raise LaunchError(f"source upload to the signed URL failed: HTTP {r.status_code}")
            out.created[-1]["detail"] = "created, code uploaded, not validated"
            step = "evaluator.validate_upload"
            on_step(step)
            client.evaluators.validate_upload(plan.evaluator_id, body={})
            out.created[-1]["detail"] = "created, code uploaded and validated (building)"
        step = "evaluator.get"
        on_step(step)
        deadline = time.monotonic() + plan.evaluator_timeout
        while True:
            ev = client.evaluators.get(plan.evaluator_id)
            state = getattr(ev, "state", None) or "STATE_UNSPECIFIED"
            if state == "ACTIVE":
                break
            if state == "BUILD_FAILED":
                raise LaunchError(f"evaluator {plan.evaluator_name} build failed (see its build log in the "
                                  "Fireworks console)")
            if time.monotonic() >= deadline:
                raise LaunchError(f"evaluator {plan.evaluator_name} is still {state} after "
                                  f"{plan.evaluator_timeout:g}s (raise --evaluator-timeout, or rerun with "
                                  "--reuse-evaluator once it is ACTIVE)")
            log(f"evaluator: {state}, waiting")
            sleep(10.0)
        if out.created and out.created[-1]["kind"] == "evaluator":
            out.created[-1]["detail"] = "ACTIVE"
        log(f"evaluator: {plan.evaluator_name} ACTIVE")

        step = "job.create"
        on_step(step)
        kwargs = dict(plan.job_kwargs)
        if plan.job_id:
            kwargs["reinforcement_fine_tuning_job_id"] = plan.job_id
        job = client.reinforcement_fine_tuning_jobs.create(dataset=plan.dataset_name,
                                                            evaluator=plan.evaluator_name, **kwargs)
        out.job = {"name": getattr(job, "name", None), "state": getattr(job, "state", None)}
        out.created.append({"kind": "job", "name": out.job["name"] or "(unnamed)", "detail": str(out.job["state"])})
        log(f"job: {out.job['name']} ({out.job['state']})")
    except Exception as e:  # noqa: BLE001 -- every failure is reported with what exists so far
        out.error = str(e) if isinstance(e, LaunchError) else _api_error_text(e)
        out.failed_step = step
    except KeyboardInterrupt:  # still say what exists
        out.error, out.failed_step = "interrupted", step
    return out


def resume_flags(plan: Plan, out: Outcome) -> list[str]:
    flags = []
    kinds = {c["kind"]: c for c in out.created}
    if "dataset" in kinds and kinds["dataset"]["detail"].endswith(" rows uploaded"):
        flags += ["--reuse-dataset", plan.dataset_id]
    elif plan.reuse_dataset:
        flags += ["--reuse-dataset", plan.reuse_dataset]
    if plan.reuse_evaluator or kinds.get("evaluator", {}).get("detail") in ("ACTIVE",):
        flags.append("--reuse-evaluator")
    return flags


# --------------------------------------------------------------------------------------------------
# Dry run: the real SDK against an in-process transport that records and answers
# --------------------------------------------------------------------------------------------------

SIGNED_URL_PLACEHOLDER = "https://signed-upload-url.invalid/evaluator-source"


def _redact_body(obj: Any, secrets: list[str]) -> Any:
    if isinstance(obj, dict):
        return {k: ("***" if k in ("apiKey", "api_key") else _redact_body(v, secrets)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_body(v, secrets) for v in obj]
    if isinstance(obj, str) and any(s and s in obj for s in secrets):
        for s in secrets:
            obj = obj.replace(s, "***") if s else obj
    return obj


def describe_request(step: str, req: Any, plan: Plan, secrets: list[str]) -> dict:
    """A request as JSON: method, URL, query and JSON body (multipart and tarball bodies summarised)."""
    d: dict[str, Any] = {"step": step, "method": req.method,
                         "url": str(req.url.copy_with(query=None)) if req.url.query else str(req.url)}
    if req.url.query:
        d["query"] = dict(req.url.params)
    ctype = req.headers.get("content-type", "")
    body = req.content if hasattr(req, "_content") else req.read()
    if step == "evaluator.upload_source":
        d["url"] = "<signed URL from evaluator.get_upload_endpoint>"
        d["headers"] = {k: req.headers[k] for k in ("content-type", "x-goog-content-length-range")}
        d["body"] = {k: plan.source[k] for k in ("tarball", "bytes", "sha256")}
        d["body"]["files"] = len(plan.source["files"])
    elif ctype.startswith("multipart/"):
        data = plan.dataset_path.read_bytes()
        d["multipart"] = {"file": {"filename": plan.dataset_path.name, "local_path": str(plan.dataset_path),
                                   "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                   "rows": plan.dataset_rows}}
    elif body:
        d["json"] = _redact_body(json.loads(body), secrets)
    return d


def dry_run(plan: Plan, secrets: list[str]) -> list[dict]:
    """Run :func:`execute` with the real SDK client over ``httpx.MockTransport``: the recorded requests are
    exactly what a launch sends (modulo server-assigned names). Nothing leaves the process."""
    import httpx  # noqa: PLC0415
    from fireworks import Fireworks  # noqa: PLC0415

    recorded: list[tuple[str, Any]] = []
    current = {"step": ""}

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        recorded.append((current["step"], request))
        path = request.url.path
        if path.endswith(":getUploadEndpoint"):
            return httpx.Response(200, json={"filenameToSignedUrls": {plan.source["tarball"]: SIGNED_URL_PLACEHOLDER}})
        if request.method == "GET" and "/evaluators/" in path:
            return httpx.Response(200, json={"name": plan.evaluator_name, "state": "ACTIVE"})
        if path.endswith("/reinforcementFineTuningJobs"):
            jid = plan.job_id or "JOB_ID"
            return httpx.Response(200, json={"name": f"accounts/{plan.account_id}/reinforcementFineTuningJobs/{jid}",
                                             "state": "JOB_STATE_CREATING"})
        return httpx.Response(200, json={})

    with httpx.Client(transport=httpx.MockTransport(handler)) as http:
        client = Fireworks(api_key="dry-run", account_id=plan.account_id, base_url=plan.base_url,
                           http_client=http, max_retries=0)
        out = execute(plan, client, http, sleep=lambda s: None,
                      on_step=lambda s: current.__setitem__("step", s))
    if out.error:  # only our own validation can fail here
        raise LaunchError(f"dry run failed at {out.failed_step}: {out.error}")
    return [describe_request(step, req, plan, secrets) for step, req in recorded]


def firectl_lines(plan: Plan) -> list[str]:
    """The equivalent command lines (firectl for dataset and job; eval-protocol's uploader for the
    evaluator, as in the original experiment). Settings firectl flags were not verified for are listed."""
    q = shlex.quote
    t, i = plan.job_kwargs["training_config"], plan.job_kwargs["inference_parameters"]
    lines = []
    if not plan.reuse_dataset:
        lines.append(f"firectl create dataset {q(plan.dataset_id)} {q(str(plan.dataset_path))}")
    if not plan.reuse_evaluator:
        lines.append(f"python -m eval_protocol upload --entry {q(plan.entry)} --yes"
                     "   # also uploads every .env key as a Fireworks secret")
    job = ["firectl create reinforcement-fine-tuning-job",
           f"--base-model {q(t['base_model'])}", f"--dataset {q(plan.dataset_name)}",
           f"--evaluator {q(plan.evaluator_name)}", f"--output-model {q(t['output_model'])}",
           f"--epochs {t['epochs']}", f"--learning-rate {t['learning_rate']:g}",
           f"--temperature {i['temperature']:g}", f"--max-output-tokens {i['max_output_tokens']}",
           f"--response-candidates-count {i['response_candidates_count']}",
           f"--max-concurrent-rollouts {plan.job_kwargs['max_concurrent_rollouts']}"]
    lines.append(" \\\n    ".join(job))
    rest = {"loss_config": plan.job_kwargs["loss_config"]}
    for k in ("chunk_size", "display_name"):
        if k in plan.job_kwargs:
            rest[k] = plan.job_kwargs[k]
    for k in ("lora_rank", "max_context_length", "batch_size"):
        if k in t:
            rest[f"training_config.{k}"] = t[k]
    for k in ("top_p", "top_k", "extra_body"):
        if k in i:
            rest[f"inference_parameters.{k}"] = i[k]
    if "wandb_config" in plan.job_kwargs:
        rest["wandb_config"] = _redact_body(plan.job_kwargs["wandb_config"], [])
    lines.append("# also set by this launch, firectl flags not verified here: "
                 + json.dumps(rest, separators=(", ", ": ")))
    return lines


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="spectrum-rft launch", description=__doc__.split("\n\n")[0],
        epilog="arms: " + "; ".join(f"{a.name} = {a.prompt} + {a.memory_mode}" for a in ARMS.values()))
    ap.add_argument("--arm", choices=list(ARMS), help="experiment arm (required unless --list-arms)")
    ap.add_argument("--list-arms", action="store_true", help="print the arms and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the exact requests and firectl lines; no network")
    ap.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    g = ap.add_argument_group("dataset")
    g.add_argument("--rows", type=int, default=DEFAULTS["rows"], help="rows (bands) per epoch")
    g.add_argument("--epochs", type=int, default=DEFAULTS["epochs"], help="training epochs")
    g.add_argument("--epoch-mode", choices=("fresh", "repeat"), default="fresh",
                   help="fresh: rows x epochs never-repeating bands, one RFT pass; repeat: the same rows every epoch")
    g.add_argument("--preset", default="default")
    g.add_argument("--reward", default="default")
    g.add_argument("--think", action=argparse.BooleanOptionalAction, default=False)
    g.add_argument("--salt", default="", help="band salt (same salt and prefix => every arm sees the same bands)")
    g.add_argument("--prefix", default="spectrum", help="row id prefix")
    g.add_argument("--dataset-out", default=None, help="where to write the dataset (default out/launch/ID.jsonl)")
    g.add_argument("--dataset-id", default=None)
    g.add_argument("--reuse-dataset", default=None, metavar="ID", help="use an uploaded dataset; skip the step")
    g = ap.add_argument_group("evaluator")
    g.add_argument("--entry", default="turn", help="turn | rft | FILE.py::FUNCTION (default turn)")
    g.add_argument("--project-dir", default=".", help="evaluator source root (default: current directory)")
    g.add_argument("--evaluator-id", default=None, help="default: derived from the entry, as eval-protocol does")
    g.add_argument("--reuse-evaluator", action="store_true", help="use the uploaded evaluator as is")
    g.add_argument("--evaluator-timeout", type=float, default=900.0, help="seconds to wait for ACTIVE")
    g = ap.add_argument_group("job")
    g.add_argument("--base-model", default=DEFAULTS["base_model"])
    g.add_argument("--learning-rate", type=float, default=DEFAULTS["learning_rate"])
    g.add_argument("--temperature", type=float, default=DEFAULTS["temperature"])
    g.add_argument("--max-output-tokens", type=int, default=DEFAULTS["max_output_tokens"])
    g.add_argument("--response-candidates", type=int, default=DEFAULTS["response_candidates"])
    g.add_argument("--max-concurrent-rollouts", type=int, default=DEFAULTS["max_concurrent_rollouts"])
    g.add_argument("--loss", choices=LOSS_METHODS, default=DEFAULTS["loss"])
    g.add_argument("--kl-beta", type=float, default=None)
    g.add_argument("--lora-rank", type=int, default=None)
    g.add_argument("--max-context-length", type=int, default=None)
    g.add_argument("--batch-size", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--extra-body", default=None, help="JSON for inference_parameters.extra_body")
    g.add_argument("--chunk-size", type=int, default=None, help="default: --rows in fresh mode, unset in repeat")
    g.add_argument("--output-model", default=None, help="default: spectrum-ARM-TAG")
    g.add_argument("--job-id", default=None)
    g.add_argument("--tag", default=None, help="id suffix (default: UTC time YYYYmmdd-HHMMSS)")
    g.add_argument("--base-url", default=None, help="API base URL (default: FIREWORKS_BASE_URL or the cloud)")
    g.add_argument("--max-retries", type=int, default=0, help="SDK retries per request (default 0: a retried "
                   "create can create twice)")
    g = ap.add_argument_group("Weights & Biases (key from WANDB_API_KEY)")
    g.add_argument("--wandb-project", default=None)
    g.add_argument("--wandb-entity", default=None)
    g.add_argument("--wandb-run-id", default=None)
    return ap


def _print_plan(plan: Plan, err: Any) -> None:
    print(f"arm {plan.arm.name}: prompt={plan.arm.prompt} memory_mode={plan.arm.memory_mode} ({plan.arm.summary})",
          file=err)
    if plan.reuse_dataset:
        print(f"dataset: reuse {plan.reuse_dataset}", file=err)
    else:
        print(f"dataset: {plan.dataset_rows} rows = {plan.rows_per_epoch} x {plan.dataset_epochs} dataset epoch(s) "
              f"-> {plan.dataset_path}", file=err)
    if plan.source:
        print(f"evaluator source: {plan.source['tarball']} {len(plan.source['files'])} files, "
              f"{plan.source['bytes']} bytes, sha256 {plan.source['sha256'][:16]}", file=err)
    for n in plan.notes:
        print(n, file=err)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    if a.list_arms:
        for arm in ARMS.values():
            print(f"{arm.name:<18} prompt={arm.prompt:<17} memory_mode={arm.memory_mode:<12} {arm.summary}")
        return 0
    if not a.arm:
        ap.error("--arm is required (see --list-arms)")
    secrets = [os.environ.get(k, "") for k in ("FIREWORKS_API_KEY", "WANDB_API_KEY")]
    secrets = [s for s in secrets if len(s) >= 4]
    try:
        plan = build_plan(a)
    except (LaunchError, ValueError) as e:
        print(f"spectrum-rft launch: {e}", file=err)
        return 2
    _print_plan(plan, err)

    if a.dry_run:
        with _redacted_logs(secrets):
            try:
                requests = dry_run(plan, secrets)
            except LaunchError as e:
                print(f"spectrum-rft launch: {e}", file=err)
                return 2
        lines = firectl_lines(plan)
        if a.json:
            print(json.dumps({"dry_run": True, "arm": plan.arm.name, "requests": requests, "firectl": lines,
                              "notes": plan.notes}, indent=2), file=out)
        else:
            print("# dry run: no request was sent. The requests, in order:", file=out)
            print(json.dumps(requests, indent=2), file=out)
            print("\n# equivalent command lines:", file=out)
            print("\n".join(lines), file=out)
        return 0

    import httpx  # noqa: PLC0415
    from fireworks import Fireworks  # noqa: PLC0415

    with _redacted_logs(secrets), httpx.Client(timeout=httpx.Timeout(600.0, connect=30.0)) as http:
        client = Fireworks(api_key=os.environ["FIREWORKS_API_KEY"].strip(), account_id=plan.account_id,
                           base_url=plan.base_url, http_client=http, max_retries=a.max_retries)
        result = execute(plan, client, http, log=lambda s: print(s, file=err))
    report = {"arm": plan.arm.name, "created": result.created, "job": result.job, "error": result.error,
              "failed_step": result.failed_step}
    if result.error:
        flags = resume_flags(plan, result)
        report["resume_flags"] = flags
        print(f"\nspectrum-rft launch: FAILED at {result.failed_step}: {result.error}", file=err)
        if result.created:
            print("already created (not rolled back):", file=err)
            for c in result.created:
                print(f"  {c['kind']}: {c['name']} ({c['detail']})", file=err)
        else:
            print("nothing was created.", file=err)
        if flags:
            print(f"to resume without re-creating them, rerun with: {' '.join(flags)}", file=err)
    if a.json:
        print(json.dumps(report, indent=2), file=out)
    elif not result.error:
        print(f"created: {', '.join(c['kind'] + ' ' + c['name'] for c in result.created)}", file=out)
    return 1 if result.error else 0


if __name__ == "__main__":
    raise SystemExit(main())
