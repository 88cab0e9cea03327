"""Gradient probe of the score-centring loss on TRL: how far is the centred gradient from the uncentred one?

One batch of GSM8K prompts (the test fixture), G completions each sampled by SmolLM2 (transformers
generate), advantages forced to one winner per group (+(G-1)/G, -1/G: a 135M model solves nothing, so the
real rewards would give zero advantages), then ``ScoreCentringGRPOTrainer.compute_loss(...).backward()``
for ``--loss`` with and without centring, for each sampler/form. Prints the cosine and the relative
difference of the two LoRA gradients, and the centring term's size.

    python scripts/grad_probe.py [--loss pg] [--prompts 2] [--group 4] [--max-tokens 64] [--threads 2]

Expected: with ``--sampler learner`` (q = p) the two gradients agree to float32 rounding; with the
bfloat16 sampler they differ.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loss", default="pg")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=str(ROOT / "tests" / "fixtures" / "gsm8k"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from spectrum_rft.training.gsm8k import card as C
    from spectrum_rft.training.gsm8k import data as gsm
    from spectrum_rft.training.sc_grpo import loss_and_gradient, probe_trainer

    model, tok = C.lora_model("smollm2", rank=32, alpha=32)
    items = gsm.load_split("train", args.data)[:args.prompts]
    tok.padding_side = "left"
    texts = [tok.apply_chat_template(C.chat_prompt(it), add_generation_prompt=True, tokenize=False)
             for it in items for _ in range(args.group)]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=args.max_tokens, do_sample=True, temperature=1.0, top_k=None,
                             top_p=None, pad_token_id=tok.pad_token_id)
    comp = out[:, enc["input_ids"].shape[1]:]
    cmask = torch.ones_like(comp)
    for i, row in enumerate(comp.tolist()):  # after the first EOS nothing counts
        if tok.eos_token_id in row:
            cmask[i, row.index(tok.eos_token_id) + 1:] = 0
    G = args.group
    adv = torch.tensor([(1.0 if i % G == 0 else 0.0) - 1.0 / G for i in range(len(texts))])
    inputs = {"prompt_ids": enc["input_ids"], "prompt_mask": enc["attention_mask"], "completion_ids": comp,
              "completion_mask": cmask, "advantages": adv, "num_items_in_batch": cmask.sum()}
    print(f"{len(texts)} completions, {int(cmask.sum())} tokens, loss {args.loss}")
    with tempfile.TemporaryDirectory() as tmp:
        for sampler, topk in (("bfloat16", 32), ("bfloat16", 0), ("learner", 0)):
            grads, stats = {}, {}
            for sc in (False, True):
                tr = probe_trainer(model, tok, tmp, loss_kind=args.loss, score_centering=sc, topk=topk, sampler=sampler)
                grads[sc] = loss_and_gradient(tr, model, inputs)[1].double()
                s = tr.loss_stats
                stats[sc] = (s["logprob_gap"] / s["n_tokens"], s["centring_l1"] / max(s["n_centring"], 1))
            cos = float(torch.nn.functional.cosine_similarity(grads[False], grads[True], dim=0))
            rel = float((grads[True] - grads[False]).norm() / grads[False].norm())
            print(f"sampler {sampler:<9} top{topk:<3} |gap| {stats[True][0]:.4f}  centring_l1 {stats[True][1]:.4g}  "
                  f"cosine(sc, plain) {cos:.6f}  |g_sc - g|/|g| {rel:.3g}")

if __name__ == "__main__":
    main()
