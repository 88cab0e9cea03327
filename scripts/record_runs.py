"""Copy the record of training runs (no weights) into the repository: results/<name>/<run>/.

    python scripts/record_runs.py results/memory-evidence runs/evidence/sft1 runs/evidence/grpo/*

Copies config.json, code_revision.json, summary.json, metrics.jsonl, rollouts.jsonl, bands.jsonl (an SFT run's
bands) of each run directory,
and for GSM8K card runs eval.jsonl, evaluator.json, items.json and the eval/ predictions (adapter/, model/
and checkpoints/ stay out: hundreds of MB), refusing a record that names the home folder, the temp folder
or the folder holding the checkout, so nothing machine-specific is committed.

    python scripts/record_runs.py --with-adapter results/memory-evidence3 runs/evidence3/sft

``--with-adapter`` also keeps the run's LoRA adapter (adapter/adapter_model.safetensors and its config, the
base model's path replaced by the run's ``--model``), so ``spectrum-rft sft --from-adapter`` can restore a
warm start exactly elsewhere (an SFT adapter of SmolLM2-135M, r16 on every layer, is ~19 MB). ``--float16``
keeps it in float16 (~10 MB; merged into the model its weights are within ~1e-6 of the run's float32 ones).

    python scripts/record_runs.py --with-checkpoint results/memory-evidence5 runs/evidence5/grpo/weak-scaffold-s2

``--with-checkpoint`` keeps, for a run that has not finished (no summary.json), what ``train --resume`` needs of
its newest TRL checkpoint (``trl/checkpoint-N``: the LoRA weights, optimiser, scheduler, RNG and trainer state;
~16 MB for an evidence run), as ``checkpoint-N/`` beside its logs, so that the evidence script's ``restore``
stage lets the run go on from step N on another machine (``runs/`` is not kept between machines). A run's
older recorded checkpoint is removed; so is every recorded checkpoint of a run recorded finished.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from spectrum_rft.training.trl_common import latest_checkpoint  # stdlib only: no training extra needed

# what `train --resume` reads of a TRL checkpoint (Trainer: weights, optimiser, scheduler, RNG, state); the
# tokenizer and chat template come from the run's --model
CHECKPOINT_FILES = ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
                    "rng_state.pth", "trainer_state.json", "training_args.bin")
FILES = ("config.json", "code_revision.json", "summary.json", "metrics.jsonl", "rollouts.jsonl", "bands.jsonl",
         "eval.jsonl", "evaluator.json", "items.json")  # the last three: GSM8K card runs (with eval/*.jsonl)


def names_a_machine_path(src: Path) -> bool:
    """Whether the text file names the home folder, the temp folder or the folder holding this checkout
    (machine-specific); says so on stderr."""
    text = src.read_text()
    for bad in (str(Path.home()), tempfile.gettempdir(), str(Path.cwd().resolve().parent)):
        if len(bad) > 1 and bad + "/" in text:
            print(f"{src}: names a machine path ({bad}...); fix the record first", file=sys.stderr)
            return True
    return False


def main(argv: list[str]) -> int:
    with_adapter, with_checkpoint, half = "--with-adapter" in argv, "--with-checkpoint" in argv, "--float16" in argv
    argv = [a for a in argv if a not in ("--with-adapter", "--with-checkpoint", "--float16")]
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
            if names_a_machine_path(src):
                return 1
            shutil.copyfile(src, out / name)
        if with_adapter and (run / "adapter" / "adapter_model.safetensors").is_file():
            (out / "adapter").mkdir(exist_ok=True)
            if half:
                from safetensors.torch import load_file, save_file  # noqa: PLC0415

                weights = load_file(run / "adapter" / "adapter_model.safetensors")
                save_file({k: v.half().contiguous() for k, v in weights.items()},
                          out / "adapter" / "adapter_model.safetensors", metadata={"format": "pt"})
            else:
                shutil.copyfile(run / "adapter" / "adapter_model.safetensors", out / "adapter" / "adapter_model.safetensors")
            config = json.loads((run / "adapter" / "adapter_config.json").read_text())
            config["base_model_name_or_path"] = json.loads((run / "config.json").read_text())["model"]
            (out / "adapter" / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
        finished = (run / "summary.json").is_file()
        found = None if finished or not with_checkpoint else latest_checkpoint(run)
        newest = found[0] if found else None
        for old in out.glob("checkpoint-*"):  # a finished run's, or one older than the newest
            if old.is_dir() and (finished or (newest is not None and old.name != newest.name)):
                shutil.rmtree(old)
        if with_checkpoint and not finished and newest is None:
            print(f"{run}: not finished and no checkpoint (trl/checkpoint-N) to keep", file=sys.stderr)
            return 1
        if newest is not None:
            missing = [f for f in CHECKPOINT_FILES if not (newest / f).is_file()]
            if missing:
                print(f"{newest}: no {', '.join(missing)}; not a checkpoint train --resume can use", file=sys.stderr)
                return 1
            if any(names_a_machine_path(newest / f) for f in CHECKPOINT_FILES if f.endswith(".json")):
                return 1
            (out / newest.name).mkdir(exist_ok=True)
            for f in CHECKPOINT_FILES:
                shutil.copyfile(newest / f, out / newest.name / f)
            print(f"{run}: unfinished, its {newest.name} kept for train --resume")
        print(f"{run} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
