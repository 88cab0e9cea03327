"""SmolLM2-135M tokens/s through llama.cpp, for one or more llama-cpp-python builds in one invocation.

    python bench/bench_llama.py [--build NAME=DIR ...] [--threads 1] [--repeat 5] [--gen 64] [--json]

Each build runs in its own subprocess (``DIR`` is put first on ``PYTHONPATH``, so ``DIR/llama_cpp`` is
imported; without ``--build`` the installed one, named ``installed``). The workload is the task's own:
the system prompt and the first scan of a default-preset episode (~600 tokens of prompt evaluation),
then ``--gen`` greedy tokens of generation, ``--repeat`` times (the first run, which warms caches, is
dropped). Reported: prompt and generation tokens/s (median), and each build's ratio to the FIRST build,
measured in the same invocation, on the same machine and load. A build that crashes (SIGILL from
instructions the CPU does not execute) is reported as such, with its exit code.

Example (native build saved beside the portable one): ``--build portable=.venv/lib/python3.11/site-packages
--build native=DIR`` (DIR holds a copy of a native build's ``llama_cpp`` package).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import llama_cpp
from spectrum_rft.tools import local_llm
from spectrum_rft.task.environment import EnvConfig, SpectrumEnv
threads, repeat, gen = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
env = SpectrumEnv(EnvConfig())
env.reset(7)
prompt = env.system_prompt() + "\n\n" + env.observation()["prompt"]
llm = llama_cpp.Llama(model_path=str(local_llm.gguf_path()), n_ctx=2048, n_threads=threads,
                      n_threads_batch=threads, verbose=False)
toks = llm.tokenize(prompt.encode())
pp, tg = [], []
for i in range(repeat + 1):
    llm.reset()
    t0 = time.perf_counter(); llm.eval(toks); t1 = time.perf_counter()
    tok = llm.sample(temp=0.0)
    n = 0
    t2 = time.perf_counter()
    while n < gen:
        llm.eval([tok]); tok = llm.sample(temp=0.0); n += 1
    t3 = time.perf_counter()
    if i:
        pp.append(len(toks) / (t1 - t0)); tg.append(n / (t3 - t2))
print(json.dumps({"llama_cpp": llama_cpp.__file__, "prompt_tokens": len(toks), "pp": pp, "tg": tg}))
"""


def run_build(name: str, path: str, threads: int, repeat: int, gen: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", _CHILD, path, str(threads), str(repeat), str(gen)],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        sig = f" ({signal.Signals(-p.returncode).name})" if p.returncode < 0 else ""
        return {"build": name, "error": f"exit {p.returncode}{sig}: {p.stderr.strip()[-300:]}"}
    d = json.loads(p.stdout.strip().splitlines()[-1])
    return {"build": name, "llama_cpp": d["llama_cpp"], "prompt_tokens": d["prompt_tokens"],
            "prompt_tok_s": statistics.median(d["pp"]), "gen_tok_s": statistics.median(d["tg"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.threads < 1 or a.repeat < 1 or a.gen < 1:
        ap.error("--threads, --repeat and --gen must be >= 1")
    builds = [b.split("=", 1) for b in a.build] or [["installed", ""]]
    t0 = time.monotonic()
    results = [run_build(n, p, a.threads, a.repeat, a.gen) for n, p in builds]
    base = next((r for r in results if "error" not in r), None)
    for r in results:
        if "error" not in r and base is not None:
            r["prompt_ratio"] = r["prompt_tok_s"] / base["prompt_tok_s"]
            r["gen_ratio"] = r["gen_tok_s"] / base["gen_tok_s"]
    if a.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"SmolLM2-135M Q4_1, {a.threads} thread(s), median of {a.repeat} runs, {time.monotonic() - t0:.0f} s")
    print(f"{'build':<12} {'prompt tok/s':>13} {'gen tok/s':>10} {'prompt x':>9} {'gen x':>7}")
    for r in results:
        if "error" in r:
            print(f"{r['build']:<12} {r['error']}")
        else:
            print(f"{r['build']:<12} {r['prompt_tok_s']:>13.1f} {r['gen_tok_s']:>10.1f} {r['prompt_ratio']:>9.2f} "
                  f"{r['gen_ratio']:>7.2f}   ({r['prompt_tokens']} prompt tokens; {r['llama_cpp']})")
    if base is not None:
        print(f"ratios against {base['build']}, measured in this invocation")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
