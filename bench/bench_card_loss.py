"""Cost of the score-centring loss in TRL: one ``compute_loss`` + backward on the same batch with TRL's own
GRPO loss (``loss_type="dapo"``, fused log-prob head: no full logits) and with ``ScoreCentringGRPOTrainer``
(full logits, log-softmax over the vocabulary) for pg, pg + centring (full form) and pg + centring (top-32)
with a bfloat16 sampler. SmolLM2-135M with LoRA rank 32, random token batch, CPU.

    python bench/bench_card_loss.py [--batch 8] [--prompt 128] [--completion 128] [--repeats 3] [--threads 2]

Every variant is timed in this invocation, on this machine, alternately ``--repeats`` times; the best of
each is kept (the least disturbed by other load) and reported as a ratio to TRL's loss. The analytic size
of the logits our loss materialises is printed too (batch x completion x vocabulary x 4 bytes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--completion", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    from spectrum_rft.training.gsm8k import card as C
    from spectrum_rft.training.sc_grpo import loss_and_gradient, probe_trainer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, tok = C.lora_model("smollm2", rank=32, alpha=32)
    V = model.config.vocab_size
    B, P, T = args.batch, args.prompt, args.completion
    g = torch.Generator().manual_seed(0)
    inputs = {"prompt_ids": torch.randint(0, V, (B, P), generator=g), "prompt_mask": torch.ones(B, P, dtype=torch.long),
              "completion_ids": torch.randint(0, V, (B, T), generator=g), "completion_mask": torch.ones(B, T, dtype=torch.long),
              "advantages": torch.randn(B, generator=g), "num_items_in_batch": torch.tensor(B * T)}
    with tempfile.TemporaryDirectory() as tmp:
        variants = {
            "trl dapo (fused head)": probe_trainer(model, tok, tmp, trl_loss=True),
            "ours pg": probe_trainer(model, tok, tmp, loss_kind="pg"),
            "ours pg+sc full, bf16 q": probe_trainer(model, tok, tmp, loss_kind="pg", score_centering=True,
                                                     sampler="bfloat16"),
            "ours pg+sc top32, bf16 q": probe_trainer(model, tok, tmp, loss_kind="pg", score_centering=True, topk=32,
                                                      sampler="bfloat16"),
        }
        best = {k: float("inf") for k in variants}
        for _ in range(args.repeats):
            for name, tr in variants.items():
                t0 = time.perf_counter()
                loss_and_gradient(tr, model, inputs)  # the same work for each: forward, loss, backward
                best[name] = min(best[name], time.perf_counter() - t0)
    base = best["trl dapo (fused head)"]
    print(f"batch {B} x (prompt {P} + completion {T}) tokens, vocabulary {V}, LoRA r32, {args.threads} threads, "
          f"best of {args.repeats}")
    print(f"full logits our loss holds: {B * T * V * 4 / 2**20:.0f} MiB float32 (+ log-softmax, + q for a sampler)")
    for name, t in best.items():
        print(f"{name:<28} {t:7.3f} s   x{t / base:.2f}")


if __name__ == "__main__":
    main()
