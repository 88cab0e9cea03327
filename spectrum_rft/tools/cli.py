"""``spectrum-rft``: one command, several jobs. Each subcommand lives in its own module (imported on
demand, so ``spectrum-rft audit`` does not pay for torch or the Fireworks SDK)."""

from __future__ import annotations

import importlib
import os
import sys

from spectrum_rft.common.quiet import cache_log, library_warnings_kept, out_arg

# litellm fetches its model cost map over the network at import unless this is set; offline the failed fetch
# has been seen to race a lazy import in a background thread and kill the import (issue 29). The command
# and every process it starts use the map bundled with litellm, unless the user chose otherwise.
COST_MAP_VARIABLE = "LITELLM_LOCAL_MODEL_COST_MAP"

# name -> ("module:function taking argv", one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "audit": ("spectrum_rft.baselines.audit:main", "reward audit: scripted policies vs a preset and reward"),
    "dataset": ("spectrum_rft.rollouts.dataset:main", "write a dataset (same as make_spectrum_dataset.py)"),
    "eval": ("spectrum_rft.tools.evaluation:main", "run the evaluator offline on baseline policies or a model"),
    "serve-local": ("spectrum_rft.tools.local_llm:main", "serve SmolLM2-135M with llama.cpp on 127.0.0.1"),
    "bench90": ("spectrum_rft.tools.bench90:main", "evaluate a model on the CLBench-style 90-scan schedule"),
    "launch": ("spectrum_rft.tools.launch:main", "launch a Fireworks RFT job (dataset, evaluator, job)"),
    "report": ("spectrum_rft.tools.report:main", "evaluated rows: models with SEs, paired differences, curves; per-epoch analysis"),
    "sft": ("spectrum_rft.training.spectrum.trl_run:sft_main", "TRL SFT warm start on memoryless trajectories"),
    "train": ("spectrum_rft.training.train_cli:train_command", "GRPO on TRL: the spectrum task; --task gsm8k: the GSM8K score-centring card"),
    "scan-eval": ("spectrum_rft.training.spectrum.scan_eval:main", "a checkpoint on scan episodes: valid-report rate, gain, echo_copy"),
    "channel": ("spectrum_rft.training.spectrum.channel:main", "what a scan episode's memory channel is worth (before any run)"),
    "memory-report": ("spectrum_rft.training.spectrum.memory_report:main", "TRL runs: did GRPO teach memory? (real echo vs control)"),
    "serve-hf": ("spectrum_rft.training.spectrum.serve:main", "serve a Hugging Face checkpoint OpenAI-compatibly"),
    "smoke": ("spectrum_rft.training.spectrum.smoke:main", "sft -> 1 GRPO step -> serve-hf -> eval, tiny and timed (configs/train/smoke.toml)"),
    "train-report": ("spectrum_rft.training.gsm8k.report:main", "compare training runs: peak/final accuracy, verdict"),
}


def usage() -> str:
    lines = ["usage: spectrum-rft COMMAND [options]   (spectrum-rft COMMAND --help for each)", "", "commands:"]
    lines += [f"  {name:<13} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault(COST_MAP_VARIABLE, "True")  # before any subcommand imports litellm
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"spectrum-rft: unknown command {cmd!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, func = COMMANDS[cmd][0].split(":")
    try:
        with library_warnings_kept(cache_log(cmd), out_arg(rest)):  # torch/transformers/pydantic warnings: the log, not the screen
            return int(getattr(importlib.import_module(module), func)(rest) or 0)
    except KeyboardInterrupt:  # a command that does not handle Ctrl-C itself: one line, no traceback
        print(f"spectrum-rft {cmd}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
