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
import os
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
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from spectrum_rft.training.models import resolve_model_dir
    from spectrum_rft.training.sc_grpo import ScoreCentringGRPOTrainer
    from spectrum_rft.training.trl_common import load_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model_dir, _ = resolve_model_dir("smollm2", "~/.cache/spectrum-rft")
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.pad_token = tok.pad_token or tok.eos_token
    model = get_peft_model(load_model(model_dir), LoraConfig(r=32, lora_alpha=32, target_modules="all-linear",
                                                             task_type="CAUSAL_LM"))
    V = model.config.vocab_size
    B, P, T = args.batch, args.prompt, args.completion
    g = torch.Generator().manual_seed(0)
    inputs = {"prompt_ids": torch.randint(0, V, (B, P), generator=g), "prompt_mask": torch.ones(B, P, dtype=torch.long),
              "completion_ids": torch.randint(0, V, (B, T), generator=g), "completion_mask": torch.ones(B, T, dtype=torch.long),
              "advantages": torch.randn(B, generator=g), "num_items_in_batch": torch.tensor(B * T)}
    ds = Dataset.from_list([{"prompt": "x"}] * 4)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = GRPOConfig(output_dir=tmp, use_cpu=True, bf16=False, per_device_train_batch_size=2, num_generations=2,
                         report_to=[], loss_type="dapo")
        kw = dict(model=model, args=cfg, processing_class=tok, train_dataset=ds,
                  reward_funcs=[lambda completions, **_: [0.0] * len(completions)])
        variants = {
            "trl dapo (fused head)": GRPOTrainer(**kw),
            "ours pg": ScoreCentringGRPOTrainer(**kw, loss_kind="pg"),
            "ours pg+sc full, bf16 q": ScoreCentringGRPOTrainer(**kw, loss_kind="pg", score_centering=True,
                                                                 sampler="bfloat16"),
            "ours pg+sc top32, bf16 q": ScoreCentringGRPOTrainer(**kw, loss_kind="pg", score_centering=True, topk=32,
                                                                  sampler="bfloat16"),
        }
        best = {k: float("inf") for k in variants}
        model.eval()  # no accumulation scaling; the same work either way
        for _ in range(args.repeats):
            for name, tr in variants.items():
                model.zero_grad(set_to_none=True)
                t0 = time.perf_counter()
                tr.compute_loss(model, inputs).backward()
                best[name] = min(best[name], time.perf_counter() - t0)
    base = best["trl dapo (fused head)"]
    print(f"batch {B} x (prompt {P} + completion {T}) tokens, vocabulary {V}, LoRA r32, {args.threads} threads, "
          f"best of {args.repeats}")
    print(f"full logits our loss holds: {B * T * V * 4 / 2**20:.0f} MiB float32 (+ log-softmax, + q for a sampler)")
    for name, t in best.items():
        print(f"{name:<28} {t:7.3f} s   x{t / base:.2f}")


if __name__ == "__main__":
    main()
