"""What a launch is asked for, as typed values (:class:`LaunchOptions`), their defaults, and the one error
type a launch reports to the user (:class:`LaunchError`)."""

from __future__ import annotations

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
}
LOSS_METHODS = ("GRPO", "DAPO", "GSPO_TOKEN")
EPOCH_MODES = ("fresh", "repeat")


class LaunchError(Exception):
    """A launch that cannot proceed; the message is for the user (never contains a credential)."""


@dataclass(frozen=True)
class LaunchOptions:
    """Every choice of one launch (the CLI flags, same names); credentials are not options."""

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
    # evaluator
    entry: str = "turn"
    project_dir: str = "."
    evaluator_id: str | None = None
    reuse_evaluator: bool = False
    evaluator_timeout: float = 900.0
    # job
    base_model: str = DEFAULTS["base_model"]
    learning_rate: float = DEFAULTS["learning_rate"]
    temperature: float = DEFAULTS["temperature"]
    max_output_tokens: int = DEFAULTS["max_output_tokens"]
    response_candidates: int = DEFAULTS["response_candidates"]
    max_concurrent_rollouts: int = DEFAULTS["max_concurrent_rollouts"]
    loss: str = DEFAULTS["loss"]
    kl_beta: float | None = None
    lora_rank: int | None = None
    max_context_length: int | None = None
    batch_size: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    extra_body: str | None = None  # JSON text for inference_parameters.extra_body
    chunk_size: int | None = None
    output_model: str | None = None
    job_id: str | None = None
    tag: str | None = None
    base_url: str | None = None
    # Weights & Biases (the key comes from WANDB_API_KEY)
    wandb_project: str | None = None
    wandb_entity: str | None = None
    wandb_run_id: str | None = None
