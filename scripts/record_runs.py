"""Copy the record of training runs (no weights) into the repository: results/<name>/<run>/.

    python scripts/record_runs.py results/memory-evidence runs/evidence/sft1 runs/evidence/grpo/*

Copies config.json, code_revision.json, summary.json, metrics.jsonl, rollouts.jsonl of each run directory,
and for GSM8K card runs eval.jsonl, evaluator.json, items.json and the eval/ predictions (adapter/, model/
and checkpoints/ stay out: hundreds of MB), refusing a record that names the home folder, the temp folder
or the folder holding the checkout, so nothing machine-specific is committed.

    python scripts/record_runs.py --with-adapter results/memory-evidence3 runs/evidence3/sft

``--with-adapter`` also keeps the run's LoRA adapter (adapter/adapter_model.safetensors and its config, the
base model's path replaced by the run's ``--model``), so ``spectrum-rft sft --from-adapter`` can restore a
warm start exactly elsewhere (an SFT adapter of SmolLM2-135M, r16 on every layer, is ~19 MB).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

FILES = ("config.json", "code_revision.json", "summary.json", "metrics.jsonl", "rollouts.jsonl",
         "eval.jsonl", "evaluator.json", "items.json")  # the last three: GSM8K card runs (with eval/*.jsonl)


def main(argv: list[str]) -> int:
    with_adapter = "--with-adapter" in argv
    argv = [a for a in argv if a != "--with-adapter"]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    dest = Path(argv[0])
    for run in map(Path, argv[1:]):
        out = dest / run.name
        out.mkdir(parents=True, exist_ok=True)
        names = [*FILES, *(f"eval/{f.name}" for f in sorted((run / "eval").glob("*.jsonl")))]
        if (run / "eval").is_dir():
            (out / "eval").mkdir(exist_ok=True)
        for name in names:
            src = run / name
            if not src.is_file():
                continue
            text = src.read_text()
            # the home folder, the temp folder and the folder holding this checkout: machine-specific
            for bad in (str(Path.home()), tempfile.gettempdir(), str(Path.cwd().resolve().parent)):
                if len(bad) > 1 and bad + "/" in text:
                    print(f"{src}: names a machine path ({bad}...); fix the record first", file=sys.stderr)
                    return 1
            shutil.copyfile(src, out / name)
        if with_adapter and (run / "adapter" / "adapter_model.safetensors").is_file():
            (out / "adapter").mkdir(exist_ok=True)
            shutil.copyfile(run / "adapter" / "adapter_model.safetensors", out / "adapter" / "adapter_model.safetensors")
            config = json.loads((run / "adapter" / "adapter_config.json").read_text())
            config["base_model_name_or_path"] = json.loads((run / "config.json").read_text())["model"]
            (out / "adapter" / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
        print(f"{run} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
