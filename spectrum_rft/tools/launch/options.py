"""What a launch is asked for, as typed values (:class:`LaunchOptions`), their defaults, the checks every value
passes before any request (:func:`option_problems`, one line per mistake), and the one error type a launch
reports to the user (:class:`LaunchError`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

DEFAULT_BASE_URL = "https://api.fireworks.ai"
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
    "eval_rows": 24,  # held-out bands scored during the job: 24 gives an SE over bands of ~0.2 sd
}
LOSS_METHODS = ("GRPO", "DAPO", "GSPO_TOKEN")
EPOCH_MODES = ("fresh", "repeat")
# Fireworks resource names (never normalised from a bare id where the account is ambiguous)
MODEL_NAME = re.compile(r"accounts/[A-Za-z0-9][A-Za-z0-9_.-]*/models/[A-Za-z0-9][A-Za-z0-9_.-]*")
RESOURCE_NAME = re.compile(r"accounts/[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z][A-Za-z0-9]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
JOB_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
MAX_CHUNK = 10_000  # the platform's valid range for chunk_size: 1-10,000


class LaunchError(Exception):
    """A launch that cannot proceed; the message is for the user (never contains a credential). Several
    mistakes are several lines, one each."""


@dataclass(frozen=True)
class LaunchOptions:
    """Every choice of one launch (the CLI flags, same names); credentials are not options. ``None`` means
    "not sent": the platform's own default applies (named in the flag's help)."""

    arm: str
    dry_run: bool = False
    # dataset
    rows: int = DEFAULTS["rows"]
    epochs: int = DEFAULTS["epochs"]
    epoch_mode: str = "fresh"
    preset: str = "default"
    reward: str = "default"
    think: bool = False
    salt: str = ""
    prefix: str = "spectrum"
    dataset_out: str | None = None
    dataset_id: str | None = None
    reuse_dataset: str | None = None
    # held-out evaluation during the job (heldout.py): fresh bands of their own, or the platform's carve-out
    eval_rows: int | None = None  # None: DEFAULTS["eval_rows"], or 0 with eval_auto_carveout / evaluation_dataset
    eval_salt: str | None = None  # None: heldout.default_eval_salt(salt)
    eval_auto_carveout: bool = False
    evaluation_dataset: str | None = None  # an uploaded evaluation dataset (skips writing one)
    # evaluator
    entry: str = "turn"
    project_dir: str = "."
    evaluator_id: str | None = None
    reuse_evaluator: bool = False
    evaluator_timeout: float = 900.0
    # job: where training starts (exactly one; none given: DEFAULTS["base_model"])
    base_model: str | None = None
    warm_start_from: str | None = None  # a PEFT model (an SFT run's, an earlier job's)
    source_job: str | None = None  # an earlier RFT job: warm start from its output model
    # job: training and inference
    learning_rate: float = DEFAULTS["learning_rate"]
    learning_rate_warmup_steps: int | None = None
    temperature: float = DEFAULTS["temperature"]
    max_output_tokens: int = DEFAULTS["max_output_tokens"]
    response_candidates: int = DEFAULTS["response_candidates"]
    max_concurrent_rollouts: int = DEFAULTS["max_concurrent_rollouts"]
    max_concurrent_evaluations: int | None = None
    node_count: int | None = None
    loss: str = DEFAULTS["loss"]
    kl_beta: float | None = None
    lora_rank: int | None = None
    max_context_length: int | None = None
    batch_size: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    extra_body: str | None = None  # JSON text for inference_parameters.extra_body
    chunk_size: int | None = None
    mcp_server: str | None = None
    output_model: str | None = None
    job_id: str | None = None
    tag: str | None = None
    base_url: str | None = None
    # Weights & Biases (the key comes from WANDB_API_KEY)
    wandb_project: str | None = None
    wandb_entity: str | None = None
    wandb_run_id: str | None = None

    @property
    def start_model(self) -> str:
        """The base model when training starts from one (no warm start given)."""
        return self.base_model or DEFAULTS["base_model"]


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# (field, flag, lowest, highest): integers checked when given (None = not sent)
INT_RANGES: tuple[tuple[str, str, int, int | None], ...] = (
    ("rows", "--rows", 1, None), ("epochs", "--epochs", 1, None),
    ("eval_rows", "--eval-rows", 0, None),
    ("max_output_tokens", "--max-output-tokens", 1, None),
    ("response_candidates", "--response-candidates", 2, None),  # GRPO compares candidates: one is no group
    ("max_concurrent_rollouts", "--max-concurrent-rollouts", 1, None),
    ("max_concurrent_evaluations", "--max-concurrent-evaluations", 1, None),
    ("node_count", "--node-count", 1, None), ("lora_rank", "--lora-rank", 1, 1024),
    ("max_context_length", "--max-context-length", 1, None), ("batch_size", "--batch-size", 1, None),
    ("learning_rate_warmup_steps", "--learning-rate-warmup-steps", 0, None), ("top_k", "--top-k", 1, None),
    ("chunk_size", "--chunk-size", 1, MAX_CHUNK),
)


def option_problems(o: LaunchOptions) -> list[str]:
    """Every mistake in the values of ``o`` that needs no project, rows or network to see, one line each
    (the context-length check needs the arm's episode: :mod:`.context`)."""
    bad: list[str] = []
    for name, flag, lo, hi in INT_RANGES:
        v = getattr(o, name)
        if v is None:
            continue
        if not _int(v) or v < lo or (hi is not None and v > hi):
            bad.append(f"{flag} {v!r}: expected an integer " + (f"from {lo} to {hi}" if hi is not None else f">= {lo}"))
    if not (_num(o.learning_rate) and o.learning_rate > 0):
        bad.append(f"--learning-rate {o.learning_rate!r}: expected a number > 0")
    if not (_num(o.temperature) and 0 <= o.temperature <= 2):
        bad.append(f"--temperature {o.temperature!r}: expected a number from 0 to 2")
    if o.top_p is not None and not (_num(o.top_p) and 0 < o.top_p <= 1):
        bad.append(f"--top-p {o.top_p!r}: expected a number in (0, 1]")
    if o.kl_beta is not None and not (_num(o.kl_beta) and o.kl_beta >= 0):
        bad.append(f"--kl-beta {o.kl_beta!r}: expected a number >= 0")
    if o.loss not in LOSS_METHODS:
        bad.append(f"--loss {o.loss!r}: expected one of {', '.join(LOSS_METHODS)}")
    if o.epoch_mode not in EPOCH_MODES:
        bad.append(f"--epoch-mode {o.epoch_mode!r}: expected one of {', '.join(EPOCH_MODES)}")
    bad += _start_problems(o) + _eval_problems(o) + _resource_problems(o)
    if (o.wandb_entity or o.wandb_run_id) and not o.wandb_project:
        bad.append("--wandb-entity/--wandb-run-id need --wandb-project (W&B logging is on only with a project)")
    return bad


def _start_problems(o: LaunchOptions) -> list[str]:
    given = [f for f, v in (("--base-model", o.base_model), ("--warm-start-from", o.warm_start_from),
                            ("--source-job", o.source_job)) if v is not None]
    if len(given) > 1:
        return [f"{' and '.join(given)}: give one (training starts from a base model, or warm starts from a PEFT "
                "model or an earlier job's output model; the platform takes base_model or warm_start_from, not both)"]
    if o.base_model is not None and not MODEL_NAME.fullmatch(o.base_model):
        return [model_name_problem("--base-model", o.base_model)]
    if o.warm_start_from is not None and not MODEL_NAME.fullmatch(o.warm_start_from):
        return [model_name_problem("--warm-start-from", o.warm_start_from)]
    if o.source_job is not None and not (JOB_ID.fullmatch(o.source_job) or (
            RESOURCE_NAME.fullmatch(o.source_job) and "/reinforcementFineTuningJobs/" in o.source_job)):
        return [f"--source-job {o.source_job!r}: expected a job id or "
                "accounts/<account>/reinforcementFineTuningJobs/<id>"]
    return []


def model_name_problem(flag: str, name: str) -> str:
    """A model is a Fireworks resource name, ``accounts/<account>/models/<model>``: anything else is refused (never
    normalised: a bare name may mean the fireworks catalogue or your own account's model), with the catalogue's
    name when the bare name looks like one."""
    bare = name.rsplit("/", 1)[-1] if isinstance(name, str) else ""
    hint = f" (the Fireworks catalogue's: {flag} accounts/fireworks/models/{bare})" if bare else ""
    return f"{flag} {name!r}: expected a Fireworks model name accounts/<account>/models/<model>{hint}"


def _eval_problems(o: LaunchOptions) -> list[str]:
    ways = [f for f, on in (("--eval-rows", o.eval_rows not in (None, 0)),
                            ("--eval-auto-carveout", o.eval_auto_carveout),
                            ("--evaluation-dataset", o.evaluation_dataset is not None)) if on]
    if len(ways) > 1:
        return [f"{' and '.join(ways)}: give one way to evaluate during the job (fresh held-out bands, the "
                "platform's carve-out of the training rows, or an uploaded evaluation dataset; --eval-rows 0 for none)"]
    if o.eval_salt is not None and o.eval_salt == o.salt:
        return [f"--eval-salt {o.eval_salt!r} is the training salt: held-out bands need a salt of their own"]
    if o.eval_salt == "process":
        return ["--eval-salt 'process': held-out bands must not depend on the worker process (they are compared "
                "across the job's evaluation passes)"]
    return []


def _resource_problems(o: LaunchOptions) -> list[str]:
    bad = []
    if o.mcp_server is not None and not RESOURCE_NAME.fullmatch(o.mcp_server):
        bad.append(f"--mcp-server {o.mcp_server!r}: expected an MCP server resource name "
                   "accounts/<account>/<kind>/<id>")
    if o.evaluation_dataset is not None and not (JOB_ID.fullmatch(o.evaluation_dataset) or (
            RESOURCE_NAME.fullmatch(o.evaluation_dataset) and "/datasets/" in o.evaluation_dataset)):
        bad.append(f"--evaluation-dataset {o.evaluation_dataset!r}: expected a dataset id or "
                   "accounts/<account>/datasets/<id>")
    return bad
