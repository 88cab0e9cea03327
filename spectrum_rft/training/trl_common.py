"""What both TRL commands share (the spectrum task's ``trl_run`` and the GSM8K card's ``card``): a config
from dataclass defaults + a TOML file + flags, the run record's portable paths and TRL log, saving a
LoRA run, loading the base model."""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from spectrum_rft.training.provenance import append_jsonl


def build_parser(cls: type, prog: str, description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--config", default=None, help="TOML file of defaults (keys: the flags with _); flags win")
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else None
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=f"(default {default})")
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            ap.add_argument(flag, type=kind, default=None, help=f"(default {default!r})")
    return ap


def load_config(cls: type, argv: list[str], prog: str, description: str) -> Any:
    """The config: the dataclass defaults, then the TOML file, then the flags; checked."""
    args = build_parser(cls, prog, description).parse_args(argv)
    values: dict[str, Any] = {}
    if args.config:
        with open(args.config, "rb") as fh:
            file_values = tomllib.load(fh)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(file_values) - known)
        if unknown:
            raise ValueError(f"{args.config}: unknown keys {', '.join(unknown)}")
        values.update(file_values)
    values.update({k: v for k, v in vars(args).items() if k != "config" and v is not None})
    cfg = cls(**values)
    cfg.check()
    return cfg


def parse_or_say(cls: type, argv: list[str] | None, prog: str, description: str) -> Any:
    """The command's config, or None after printing the one-line reason it is unusable."""
    try:
        return load_config(cls, list(sys.argv[1:] if argv is None else argv), prog, description)
    except (ValueError, OSError, tomllib.TOMLDecodeError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None


def portable_path(path: str | Path) -> str:
    """A path as a run record keeps it: relative to the working directory when inside it, else with the
    home directory written ``~`` (records are committed and compared across machines). A string that names
    no existing path (a hub id such as ``org/model``) is kept as it is."""
    if isinstance(path, str) and not Path(path).expanduser().exists():
        return path
    p = Path(path).expanduser().resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        home = Path.home().resolve()
        return "~/" + str(p.relative_to(home)) if p.is_relative_to(home) else str(p)


def log_callback(path: Path):
    """TRL's log lines appended to ``path`` by the main process (every process sees ``on_log``)."""
    from transformers import TrainerCallback  # noqa: PLC0415

    class LogToJsonl(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            if logs and state.is_world_process_zero:
                append_jsonl(path, {"step": state.global_step, "time": time.time(), **logs})

    return LogToJsonl()


def save_model(trainer, tok, out: Path) -> None:
    """``out/adapter`` (the LoRA weights) and ``out/model`` (merged, with the run's tokenizer); on
    several processes (``accelerate launch``) the main one writes them."""
    trainer.accelerator.wait_for_everyone()
    if not trainer.accelerator.is_main_process:
        return
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.save_pretrained(out / "adapter")
    merged = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    merged.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")


def merge_adapter(model_dir: Path | str, adapter: Path | str, out: Path) -> None:
    """``out/model`` rebuilt from a base model and a saved LoRA adapter (``OUT/adapter`` of a run, or its copy
    in ``results/``): merged as :func:`save_model` merges, with the base's tokenizer and the tool template,
    so a recorded warm start can be restored exactly on a machine that did not train it."""
    from peft import PeftModel  # noqa: PLC0415

    merged = PeftModel.from_pretrained(load_model(model_dir), str(adapter)).merge_and_unload()
    merged.save_pretrained(out / "model")
    load_tokenizer(Path(model_dir)).save_pretrained(out / "model")


def load_model(model_dir: Path | str):
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM  # noqa: PLC0415

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


RECORD_LOGS = ("metrics.jsonl", "rollouts.jsonl", "eval.jsonl", "summary.json")  # appended during a run


def latest_checkpoint(out: Path) -> tuple[Path, int] | None:
    """The newest TRL checkpoint of a run (``out/trl/checkpoint-N``) and its step N, or None."""
    found = [(int(p.name.split("-", 1)[1]), p) for p in (out / "trl").glob("checkpoint-*")
             if p.is_dir() and p.name.split("-", 1)[1].isdigit()]
    if not found:
        return None
    step, path = max(found)
    return path, step


def start_record(out: Path, resume: bool, is_main: bool) -> tuple[Path, int] | None:
    """Before a run: with ``resume`` and a checkpoint, the checkpoint (the record is cut back to its step:
    log and eval lines of steps <= N, rollouts generated before step N+1, so the resumed steps are not
    recorded twice); otherwise None and a new record (the logs of an earlier run into ``out`` removed).
    Only the main process changes files."""
    ckpt = latest_checkpoint(out) if resume else None
    if not is_main:
        return ckpt
    if ckpt is None:
        for name in RECORD_LOGS:
            (out / name).unlink(missing_ok=True)
        return None
    step = ckpt[1]
    keep = {"metrics.jsonl": lambda r: (r.get("step") or 0) <= step, "eval.jsonl": lambda r: r["step"] <= step,
            "rollouts.jsonl": lambda r: (r.get("step") or 0) < step}
    for name, ok in keep.items():
        path = out / name
        if path.is_file():
            lines = [line for line in path.read_text().splitlines() if line.strip() and ok(json.loads(line))]
            path.write_text("".join(line + "\n" for line in lines))
    (out / "summary.json").unlink(missing_ok=True)
    return ckpt


def load_tokenizer(model_dir: Path) -> Any:
    """A checkpoint's tokenizer with a tool-calling chat template (:mod:`.chat_template`) and a pad token."""
    from transformers import AutoTokenizer  # noqa: PLC0415

    from spectrum_rft.training.chat_template import with_tool_template  # noqa: PLC0415

    tok = with_tool_template(AutoTokenizer.from_pretrained(model_dir))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok
