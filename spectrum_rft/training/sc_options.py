"""The options of the score-centring trainer and why a combination cannot run: checked by
``ScoreCentringGRPOTrainer`` and by ``spectrum-rft train --task gsm8k`` before any model is loaded
(this module needs neither TRL nor a model)."""

from __future__ import annotations

from typing import Any

# the losses of spectrum_rft.training.loss, named here so the options check (and --help) needs no torch
LOSSES: tuple[str, ...] = ("pg", "tis", "mis", "is")  # "is" (w = r) is the identity check: centring is a no-op
SAMPLERS = ("learner", "bfloat16")  # q = p, or the same model under bfloat16 autocast (sc_grpo)


def check_loss_options(loss_kind: str, score_centering: bool, topk: int, sampler: Any, use_vllm: bool,
                       bf16: bool = False) -> None:
    """The reasons a combination cannot run (ValueError), before any model is loaded."""
    if loss_kind not in LOSSES:
        raise ValueError(f"unknown loss {loss_kind!r}; choose one of {', '.join(LOSSES)}")
    if topk < 0:
        raise ValueError("topk must be >= 0 (0: the full-vocabulary form)")
    if not callable(sampler) and sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    if use_vllm and score_centering:
        raise ValueError("score centring needs the sampler's distribution beyond the sampled token, and TRL passes on "
                         "only vLLM's log-prob of the sampled token: run without --use-vllm, or without centring")
    if use_vllm and sampler != "learner":
        raise ValueError("with --use-vllm the sampler is vLLM: leave --sampler at 'learner'")
    if bf16 and sampler == "bfloat16":
        raise ValueError("--bf16 makes the learner compute in bfloat16 too, so the bfloat16 sampler would equal it "
                         "(q = p, nothing for centring to correct): drop --bf16 to keep a float32 learner")
