"""The trainer's configuration: every knob of a run (the experiment card's defaults) and its arm name."""

from __future__ import annotations

from dataclasses import dataclass

from spectrum_rft.training import loss as L
from spectrum_rft.training.models import DEFAULT_MODEL

TASKS = ("gsm8k",)  # the spectrum task trains on TRL (spectrum_rft.training.trl_run)
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class TrainConfig:
    """Every knob of a run; the defaults are the experiment card's (P=32, G=8, 512 tokens, rank 32, ...)."""

    task: str = "gsm8k"
    out: str = "runs/train"
    model: str = DEFAULT_MODEL  # "smollm2" or a local Hugging Face model directory
    cache_dir: str = "~/.cache/spectrum-rft"
    data: str | None = None  # local GSM8K folder with train.jsonl/test.jsonl (None: Hugging Face openai/gsm8k, main)
    steps: int = 100
    prompts: int = 32  # P: prompts (groups) per step
    group: int = 8  # G: completions per prompt
    max_tokens: int = 512
    temperature: float = 1.0
    lora_rank: int = 32
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lr: float = 1e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 0.0  # 0: no clipping (the norm is logged either way)
    loss: str = "pg"
    score_centering: bool = False
    topk: int = 0  # 0: full-vocabulary form; K > 0: top-k form over the sampler's head
    dtype: str = "float32"  # learner
    sampler_dtype: str = "same"  # "same" = the learner's dtype (the sampler is then the learner itself)
    eval_every: int = 10
    eval_n: int = 500
    eval_max_tokens: int = 0  # 0: same as max_tokens
    eval_at_start: bool = True
    gen_batch: int = 64  # sequences per sampling batch
    micro_batch: int = 8  # sequences per learner forward/backward
    seed: int = 0
    device: str = "auto"
    threads: int = 0  # torch CPU threads (0: torch's default)
    progress: bool = True

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        if self.loss not in L.LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; choose one of {', '.join(L.LOSSES)}")
        if self.dtype not in DTYPES or self.sampler_dtype not in (*DTYPES, "same"):
            raise ValueError(f"dtypes must be one of {', '.join(DTYPES)} (sampler: or 'same')")
        for name in ("steps", "prompts", "group", "max_tokens", "lora_rank", "gen_batch", "micro_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if min(self.topk, self.eval_every, self.eval_n, self.eval_max_tokens) < 0:
            raise ValueError("topk, eval_every, eval_n and eval_max_tokens must be >= 0")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 (evaluation is greedy regardless)")

    @property
    def arm(self) -> str:
        """Arm name: loss, centring, form, sampler dtype (the seed is recorded separately)."""
        name = self.loss + ("+sc" if self.score_centering else "")
        if self.topk:
            name += f"-top{self.topk}"
        if self.sampler_dtype not in ("same", self.dtype):
            name += f"-q{self.sampler_dtype}"
        return name
