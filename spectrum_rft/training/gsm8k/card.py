"""``spectrum-rft train --task gsm8k`` (also ``--preset card``): the GSM8K score-centring card (``../seeds/002``: plain vs score-centred
GRPO at an aggressive learning rate) on TRL's GRPOTrainer with our loss (:mod:`.sc_grpo`).

The card's numbers are the defaults: P = 32 prompts x G = 8 completions per step, 512 tokens, LoRA rank 32
on every linear layer, AdamW at a constant 1e-4, 100 steps, advantage = reward - group mean (no std
scaling), no gradient clipping (the norm is logged), greedy exact-match evaluation on the first 500 GSM8K
test problems at step 0, every 10 steps and at the end. The two arms differ only by ``--score-centering``;
a seed fixes the data order (the same for both arms) and the sampling.

Data: the Hugging Face dataset ``openai/gsm8k`` (config ``main``) by default, ``--data DIR`` for a local
copy (``train.jsonl``, ``test.jsonl``). The reward is :func:`spectrum_rft.training.gsm8k.data.score`.

Run directory (``--out``): ``config.json`` (effective config + arm), ``code_revision.json``,
``metrics.jsonl`` (TRL's log, one line per step: reward, loss, grad_norm, logprob_gap, entropy,
centring_l1, ...), ``rollouts.jsonl`` (one line per completion: step, item, reward, extracted answer),
``eval.jsonl`` (one line per evaluation) with ``eval/step_NNNN.jsonl`` (per-item predictions),
``evaluator.json`` (evaluator identity), ``items.json`` (eval item manifest, training data provenance),
``checkpoints/step_NNNN/`` (LoRA at each evaluation), ``adapter/`` and ``model/`` (final), ``summary.json``.
``spectrum-rft train-report RUN...`` gives the card's verdict.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from spectrum_rft.training.gsm8k import data as gsm
from spectrum_rft.training.provenance import (append_jsonl, code_revision, evaluator_identity, item_manifest,
                                              manifest_sha256, sha256_file, write_json)
from spectrum_rft.training.sc_options import check_loss_options
from spectrum_rft.training.trl_common import (GrpoRunConfig, grpo_args, load_model, load_tokenizer, log_callback,
                                              lora_config, parse_or_say, portable_path, quiet, save_model, start_process,
                                              start_record, sync_vllm_in_place)

CARD_PRESETS = ("card",)  # the design card's settings (not the env's band presets, spectrum_rft.task.presets)


class CardSetupError(Exception):
    """The run cannot start: its data or model cannot be found (one line for the user)."""


@dataclass
class CardConfig(GrpoRunConfig):
    """Every knob of a card run; the defaults are the card's (the shared ones in :class:`GrpoRunConfig`)."""

    out: str = "runs/card"
    data: str = ""  # a local GSM8K folder (train.jsonl, test.jsonl); "": Hugging Face openai/gsm8k, main
    preset: str = "card"  # card: the design card's settings (the defaults here)
    steps: int = 100
    prompts: int = 32  # P: problems (groups) per step
    group: int = 8  # G: completions per problem
    max_tokens: int = 512  # tokens per completion
    lora_rank: int = 32
    lora_alpha: int = 32
    weight_decay: float = 0.0  # AdamW weight decay (the card: none)
    max_grad_norm: float = 0.0  # 0: no clipping (the card); the norm is logged either way
    loss: str = "pg"  # pg | tis | mis | is
    score_centering: bool = False  # the score-centred arm (without: the card's plain GRPO arm)
    topk: int = 0  # 0: full-vocabulary form; K: top-k form over the sampler's head
    sampler: str = "learner"  # learner (q = p) | bfloat16 (a lower-precision q: a real mismatch)
    eval_every: int = 10  # a greedy evaluation every N steps
    eval_n: int = 500  # GSM8K test problems per evaluation (the first N)
    eval_max_tokens: int = 0  # 0: max_tokens
    eval_at_start: bool = True  # evaluate at step 0 too
    eval_batch: int = 32  # sequences per greedy generation batch
    micro_batch: int = 8  # sequences per learner forward/backward (P*G is accumulated over micro-batches)

    def check(self) -> None:
        if self.preset not in CARD_PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(CARD_PRESETS)}")
        super().check()
        check_loss_options(self.loss, self.score_centering, self.topk, self.sampler, self.use_vllm, self.bf16)
        for name in ("max_tokens", "eval_batch", "micro_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if min(self.eval_every, self.eval_n, self.eval_max_tokens) < 0:
            raise ValueError("eval_every, eval_n and eval_max_tokens must be >= 0")
        if self.max_grad_norm < 0 or self.weight_decay < 0:
            raise ValueError("max_grad_norm and weight_decay must be >= 0")

    @property
    def arm(self) -> str:
        """Arm name: loss, centring, form, sampler (the seed is recorded separately)."""
        name = self.loss + ("+sc" if self.score_centering else "")
        if self.topk:
            name += f"-top{self.topk}"
        if self.sampler != "learner":
            name += f"-q{self.sampler}"
        return name


# --------------------------------------------------------------------------------------------------
# Data, reward, evaluation
# --------------------------------------------------------------------------------------------------


def chat_prompt(item: dict) -> list[dict]:
    return [{"role": "user", "content": gsm.user_message(item)}]


def train_rows(items: list[dict], n: int, seed: int) -> list[dict]:
    """``n`` training rows in a seeded order (the same for every arm of a seed), cycling through the items."""
    import numpy as np  # noqa: PLC0415

    order = np.random.default_rng(seed).permutation(len(items))
    rows = []
    for i in range(n):
        it = items[int(order[i % len(items)])]
        rows.append({"prompt": chat_prompt(it), "answer": it["answer"], "item_id": it["id"]})
    return rows


def completion_text(completion: Any) -> str:
    """A TRL completion (a list of messages for chat prompts, else a string) as text."""
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    return str(completion)


def make_reward(path: Path | None):
    """TRL's reward function: exact match (:func:`gsm8k.score`), one ``rollouts.jsonl`` line per completion."""

    def gsm8k_exact_match(completions, answer, item_id, trainer_state=None, **_: Any) -> list[float]:
        step = trainer_state.global_step if trainer_state is not None else None
        out = []
        for c, a, i in zip(completions, answer, item_id):
            reward, pred = gsm.score(completion_text(c), {"answer": a})
            out.append(reward)
            if path is not None:
                append_jsonl(path, {"step": step, "item_id": i, "reward": reward, "pred": pred})
        return out

    return gsm8k_exact_match


def greedy_completions(model, tok, prompts: list[list[dict]], max_new: int, batch: int, eos_ids: list[int]) -> list[list[int]]:
    """Greedy completions (token ids, EOS excluded) of chat prompts, left-padded batches."""
    import torch  # noqa: PLC0415

    side = tok.padding_side
    tok.padding_side = "left"
    was_training = model.training
    model.eval()
    out: list[list[int]] = []
    try:
        for i in range(0, len(prompts), batch):
            texts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts[i:i + batch]]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=max_new, do_sample=False, use_cache=True,
                                     pad_token_id=tok.pad_token_id, eos_token_id=eos_ids, temperature=None,
                                     top_p=None, top_k=None)
            for row in gen[:, enc["input_ids"].shape[1]:].tolist():
                cut = next((j for j, t in enumerate(row) if t in eos_ids), len(row))
                out.append(row[:cut])
    finally:
        tok.padding_side = side
        model.train(was_training)
    return out


def lora_model(model: str = "smollm2", cache_dir: str = CardConfig.cache_dir, rank: int = 32, alpha: int = 32):
    """(a fresh LoRA-wrapped model, its tokenizer) outside any run: for probes and benches of the loss."""
    from peft import get_peft_model  # noqa: PLC0415

    from spectrum_rft.training.models import resolve_model_dir  # noqa: PLC0415

    model_dir, _ = resolve_model_dir(model, cache_dir)
    return get_peft_model(load_model(model_dir), lora_config(rank, alpha)), load_tokenizer(model_dir, tools=False)


def eos_token_ids(tok, model_dir) -> list[int]:  # noqa: ANN001
    from transformers import GenerationConfig  # noqa: PLC0415

    ids = {tok.eos_token_id}
    try:
        g = GenerationConfig.from_pretrained(model_dir).eos_token_id
        ids |= set(g if isinstance(g, list) else [g])
    except OSError:
        pass
    return sorted(int(i) for i in ids if i is not None)


def greedy_eval_callback(out: Path, cfg: CardConfig, tok, test: list[dict], eos_ids: list[int], evaluator_id: str,
                         resumed: bool = False):
    """A TrainerCallback: greedy exact match on ``test`` at step 0 (``eval_at_start``; not when ``resumed``),
    every ``eval_every`` steps and at the last step; writes ``eval.jsonl``, ``eval/step_NNNN.jsonl`` and the
    LoRA checkpoint. The main process evaluates (the others wait at their next collective)."""
    from transformers import TrainerCallback  # noqa: PLC0415

    max_new = cfg.eval_max_tokens or cfg.max_tokens

    def evaluate(model, step: int) -> None:  # noqa: ANN001
        t0 = time.perf_counter()
        comps = greedy_completions(model, tok, [chat_prompt(it) for it in test], max_new, cfg.eval_batch, eos_ids)
        preds = []
        for it, ids in zip(test, comps):
            text = tok.decode(ids, skip_special_tokens=True)
            reward, pred = gsm.score(text, it)
            preds.append({"id": it["id"], "gold": gsm.gold_answer(it), "pred": pred, "correct": bool(reward),
                          "n_tokens": len(ids), "completion": text})
        (out / "eval").mkdir(exist_ok=True)
        pred_path = out / "eval" / f"step_{step:04d}.jsonl"
        pred_path.write_text("".join(json.dumps(p, sort_keys=True) + "\n" for p in preds))
        ckpt = f"checkpoints/step_{step:04d}"
        model.save_pretrained(out / ckpt)
        append_jsonl(out / "eval.jsonl", {
            "step": step, "metric": "accuracy", "score": sum(p["correct"] for p in preds) / max(len(preds), 1),
            "n": len(preds), "evaluator_id": evaluator_id, "predictions": str(pred_path.relative_to(out)),
            "predictions_sha256": sha256_file(pred_path), "seconds": round(time.perf_counter() - t0, 3),
            "checkpoint": ckpt})

    class GreedyEval(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001
            if cfg.eval_at_start and not resumed and cfg.eval_every and cfg.eval_n and state.is_world_process_zero:
                evaluate(model, 0)

        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001
            s = state.global_step
            if cfg.eval_every and cfg.eval_n and state.is_world_process_zero and \
                    (s % cfg.eval_every == 0 or s == state.max_steps):
                evaluate(model, s)

    return GreedyEval()


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def run_card(cfg: CardConfig, reward: Callable | None = None, sampler: Any = None) -> dict:
    """One card run. ``reward`` replaces the exact-match reward and ``sampler`` the named sampler (tests:
    forced rewards, an injected q)."""
    import peft  # noqa: PLC0415
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    import trl  # noqa: PLC0415
    from datasets import Dataset  # noqa: PLC0415

    from spectrum_rft.training.models import resolve_model_dir  # noqa: PLC0415
    from spectrum_rft.training.sc_grpo import ScoreCentringGRPOTrainer  # noqa: PLC0415

    state = start_process(cfg)
    procs, main = state.num_processes, state.is_main_process
    batch = cfg.prompts * cfg.group
    if batch % (cfg.micro_batch * procs):
        raise CardSetupError(f"prompts x group ({batch}) must be a multiple of micro_batch x processes "
                             f"({cfg.micro_batch} x {procs})")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = start_record(out, cfg.resume, main)  # a new record, or (--resume) cut back to the checkpoint
    data_dir = Path(cfg.data).expanduser() if cfg.data else None
    try:
        train = gsm.load_split("train", data_dir)
        test = gsm.load_split("test", data_dir, limit=cfg.eval_n) if cfg.eval_n else []
        model_dir, prov = resolve_model_dir(cfg.model, cfg.cache_dir)
    except (OSError, RuntimeError, KeyError, ValueError) as e:
        raise CardSetupError(f"{type(e).__name__}: {e}") from e
    tok = load_tokenizer(model_dir, tools=False)
    eos_ids = eos_token_ids(tok, model_dir)
    decoding = {"greedy": True, "temperature": 0, "max_tokens": cfg.eval_max_tokens or cfg.max_tokens,
                "stop": eos_ids, "sampler": "transformers generate"}
    evaluator = evaluator_identity(task="gsm8k", metric="accuracy", scorer_sources=["spectrum_rft/training/gsm8k/data.py"],
                                   prompt_template=gsm.PROMPT_TEMPLATE, parser_rule=gsm.PARSER_RULE,
                                   decoding=decoding, chat_template=getattr(tok, "chat_template", None))
    provenance = {"data_source": gsm.source_name(data_dir), "n_train_items": len(train), "train_order_seed": cfg.seed,
                  "train_items_sha256": manifest_sha256([{"id": it["id"], "sha256": gsm.item_sha256(it)} for it in train])}
    if data_dir is not None:
        provenance["train_file_sha256"] = sha256_file(data_dir / "train.jsonl")
    if main:
        write_json(out / "evaluator.json", evaluator)
        write_json(out / "items.json", item_manifest([{"id": it["id"], "sha256": gsm.item_sha256(it)} for it in test],
                                                     {"task": "gsm8k", **provenance}))
        write_json(out / "config.json", {**asdict(cfg), "arm": cfg.arm, "task": "gsm8k", "processes": procs,
                                         "model_dir": portable_path(model_dir), "model_provenance": prov,
                                         "torch": torch.__version__, "transformers": transformers.__version__,
                                         "peft": peft.__version__, "trl": trl.__version__,
                                         "threads": torch.get_num_threads(), "argv": sys.argv[1:]})
        write_json(out / "code_revision.json", code_revision())
    state.wait_for_everyone()  # no process appends to the record before it is reset
    accum = batch // (cfg.micro_batch * procs)
    args = grpo_args(cfg, out, micro_batch=cfg.micro_batch, accumulation=accum, max_completion_length=cfg.max_tokens,
                     lr_scheduler_type="constant", weight_decay=cfg.weight_decay,
                     max_grad_norm=cfg.max_grad_norm or float("inf"),  # inf: no clipping, norm still logged
                     beta=0.0, scale_rewards="none")
    model = load_model(model_dir)
    lora = lora_config(cfg.lora_rank, cfg.lora_alpha)
    rows = train_rows(train, cfg.steps * cfg.prompts, cfg.seed)
    trainer = quiet(ScoreCentringGRPOTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(rows),
        reward_funcs=[reward or make_reward(out / "rollouts.jsonl")], processing_class=tok, peft_config=lora,
        callbacks=[log_callback(out / "metrics.jsonl"),
                   greedy_eval_callback(out, cfg, tok, test, eos_ids, evaluator["evaluator_id"], resumed=ckpt is not None)],
        loss_kind=cfg.loss, score_centering=cfg.score_centering, topk=cfg.topk,
        sampler=sampler if sampler is not None else cfg.sampler))
    sync_vllm_in_place(trainer)
    t0 = time.time()
    trainer.train(resume_from_checkpoint=str(ckpt[0]) if ckpt else None)
    save_model(trainer, tok, out)
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()] \
        if (out / "eval.jsonl").is_file() else []
    summary = {"arm": cfg.arm, "seed": cfg.seed, "steps": trainer.state.global_step, "processes": procs,
               "resumed_from_step": ckpt[1] if ckpt else None,
               "train_s": round(time.time() - t0, 1), "evals": [{"step": e["step"], "accuracy": e["score"]} for e in evals]}
    if main:
        write_json(out / "summary.json", summary)
    return {**summary, "main_process": main}


def main(argv: list[str] | None = None) -> int:
    cfg = parse_or_say(CardConfig, argv, "spectrum-rft train --task gsm8k",
                       "The GSM8K score-centring card on TRL's GRPOTrainer with our loss (pg/tis/mis +- centring).")
    if cfg is None:
        return 2
    try:
        s = run_card(cfg)
    except CardSetupError as e:
        print(f"spectrum-rft train --task gsm8k: {e}", file=sys.stderr)
        return 1
    if not s["main_process"]:
        return 0
    evals = ", ".join(f"step {e['step']} {e['accuracy']:.4f}" for e in s["evals"])
    print(f"card {s['arm']} s{s['seed']}: {s['steps']} steps, {s['train_s']} s -> {cfg.out}; accuracy: {evals or 'not evaluated'}")
    return 0
