"""``spectrum-rft train --task gsm8k``: the GSM8K score-centring card's GRPO trainer (LoRA via peft on a
transformers causal LM) with GSM8K evaluation and a complete experiment record per run. The spectrum task
trains on TRL (:mod:`.trl_run`); this sampler and loop remain only until the card moves to TRL as well.

One step: sample G completions for each of P prompts from the current policy with our own sampling loop
(it records, per token, the sampler's log-probability of the sampled token and its top-k), score them,
advantage = reward - group mean (no std scaling), the loss of :mod:`.loss`, one AdamW step.

Sampler vs learner. The sampler is the current policy, in ``--sampler-dtype`` (default: the learner's
dtype, and then it *is* the learner). The top-k form (``--topk K``) uses exactly what the sampler
reported while generating (log q(y), top-k ids and log-probs). The full-vocabulary form needs all of q:
it is recomputed by a no-grad teacher-forced pass of the sampler model over the same tokens (when the
sampler is the learner itself that pass is the learner's own, detached, so q = p exactly and every arm
collapses to the same gradient: the record's ``ratio_dev`` says so). A real mismatch comes from
``--sampler-dtype bfloat16`` with a float32 learner, or from the top-k form (generation-time numbers).

Run directory (``--out``): ``config.json`` (effective config), ``code_revision.json``, ``metrics.jsonl``
(one line per step), ``eval.jsonl`` (one line per checkpoint) with ``eval/step_NNNN.jsonl`` per-item
predictions, ``evaluator.json`` (evaluator identity), ``items.json`` (item manifest), and LoRA
checkpoints under ``checkpoints/step_NNNN/``.

The package: :mod:`.config` (the knobs), :mod:`.models` (GGUF -> plain model, cached), :mod:`.tasks` (GSM8K), :mod:`.provenance` (code revision, evaluator identity, item manifest),
:mod:`.loss` (the losses); this module: the sampler, the learner step, the loop and the CLI.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from spectrum_rft.training import loss as L
from spectrum_rft.training.config import DTYPES, TASKS, TrainConfig
from spectrum_rft.training.models import resolve_model_dir, torch_dtype
from spectrum_rft.training.provenance import (append_jsonl, code_revision, evaluator_identity, item_manifest,
                                              sha256_file, write_json)
from spectrum_rft.training.tasks import Gsm8kTask

__all__ = ["DTYPES", "TASKS", "Rollout", "TrainConfig", "Trainer", "build_parser", "main", "sample",
           "sample_batched"]


# --------------------------------------------------------------------------------------------------
# Sampling (our own loop: records exactly the distribution it samples from)
# --------------------------------------------------------------------------------------------------


@dataclass
class Rollout:
    prompt_ids: list[int]
    ids: list[int]  # completion token ids (EOS included when emitted)
    logq: list[float]  # sampler log q(y) per completion token
    head_ids: list[list[int]] | None = None  # sampler top-k ids per token (topk > 0)
    head_logq: list[list[float]] | None = None
    text: str = ""
    reward: float = 0.0
    adv: float = 0.0
    info: dict = field(default_factory=dict)


def _left_pad(seqs: list[list[int]], pad: int, device):
    import torch  # noqa: PLC0415

    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, n - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, n - len(s):] = 1
    return ids.to(device), mask.to(device)


def _cache_kwarg(model) -> str:
    """The KV-cache argument of the model's forward: ``cache`` (transformers >= 5.2x) or the older
    ``past_key_values``."""
    import inspect  # noqa: PLC0415

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def sample(model, prompts: list[list[int]], *, max_new: int, eos_ids: set[int], pad_id: int, greedy: bool,
           temperature: float, topk: int, generator, device) -> list[Rollout]:
    """Generate one completion per prompt (a batch, KV-cached). Records the float32 log-probability of
    every sampled token under the distribution actually sampled from (softmax(logits / temperature)),
    and the top-k of that distribution when ``topk`` > 0."""
    import torch  # noqa: PLC0415

    B = len(prompts)
    ids, mask = _left_pad(prompts, pad_id, device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = [Rollout(list(p), [], [], [] if topk else None, [] if topk else None) for p in prompts]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    eos = torch.tensor(sorted(eos_ids), device=device)
    cache_kw = _cache_kwarg(model)
    past = None
    cur_ids, cur_pos = ids, pos
    with torch.no_grad():
        for _ in range(max_new):
            res = model(input_ids=cur_ids, attention_mask=mask, position_ids=cur_pos, use_cache=True,
                        logits_to_keep=1, **{cache_kw: past})
            past = res[cache_kw] if cache_kw in res else res.past_key_values
            logits = res.logits[:, -1, :].float()
            logq = torch.log_softmax(logits / (1.0 if greedy else temperature), dim=-1)
            if greedy:
                tok = logq.argmax(-1)
            else:
                tok = torch.multinomial(logq.exp(), 1, generator=generator).squeeze(-1)
            lq = logq.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
            if topk:
                hv, hi = logq.topk(topk, dim=-1)
                hv, hi = hv.tolist(), hi.tolist()
            tl, ll = tok.tolist(), lq.tolist()
            for i in range(B):
                if done[i]:
                    continue
                r = out[i]
                r.ids.append(tl[i])
                r.logq.append(ll[i])
                if topk:
                    r.head_ids.append(hi[i])
                    r.head_logq.append(hv[i])
            done = done | torch.isin(tok, eos)
            if bool(done.all()):
                break
            tok = torch.where(done, torch.full_like(tok, pad_id), tok)
            cur_ids = tok.unsqueeze(-1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
            cur_pos = cur_pos[:, -1:] + 1
    return out


def sample_batched(model, prompts: list[list[int]], batch: int, **kw) -> list[Rollout]:
    out: list[Rollout] = []
    for i in range(0, len(prompts), batch):
        out += sample(model, prompts[i:i + batch], **kw)
    return out


# --------------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------------


class Trainer:
    def __init__(self, cfg: TrainConfig):
        import torch  # noqa: PLC0415
        from peft import LoraConfig, get_peft_model  # noqa: PLC0415
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

        self.cfg = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto"
                                   else cfg.device)
        torch.manual_seed(cfg.seed)
        self.model_dir, self.model_prov = resolve_model_dir(cfg.model, cfg.cache_dir)
        self.tok = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        base = AutoModelForCausalLM.from_pretrained(self.model_dir, local_files_only=True,
                                                    dtype=torch_dtype(cfg.dtype))
        lcfg = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules="all-linear", task_type="CAUSAL_LM")
        self.model = get_peft_model(base, lcfg).to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        sd = cfg.dtype if cfg.sampler_dtype == "same" else cfg.sampler_dtype
        self.sampler = self.model if sd == cfg.dtype else copy.deepcopy(self.model).to(torch_dtype(sd))
        self.sampler_dtype = sd
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        eos = {self.tok.eos_token_id}
        gen_eos = getattr(getattr(base, "generation_config", None), "eos_token_id", None)
        eos |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        self.eos_ids = {int(e) for e in eos if e is not None}
        self.gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.task = Gsm8kTask(cfg, self.tok)
        self.out = Path(cfg.out)

    # ---- sampler sync ----------------------------------------------------------------------------

    def sync_sampler(self) -> None:
        """Copy the learner's LoRA weights into the sampler copy (when it is a separate dtype)."""
        if self.sampler is self.model:
            return
        import torch  # noqa: PLC0415

        with torch.no_grad():
            for (n_s, p_s), (n_l, p_l) in zip(self.sampler.named_parameters(), self.model.named_parameters()):
                if p_l.requires_grad:
                    assert n_s == n_l, (n_s, n_l)
                    p_s.copy_(p_l.to(p_s.dtype))

    def _policy(self, greedy: bool, max_new: int, model=None):
        def run(prompts: list[list[int]]) -> list[Rollout]:
            m = model if model is not None else self.sampler
            m.eval()
            rolls = sample_batched(m, prompts, self.cfg.gen_batch, max_new=max_new, eos_ids=self.eos_ids,
                                   pad_id=self.pad_id, greedy=greedy, temperature=self.cfg.temperature,
                                   topk=0 if greedy else self.cfg.topk, generator=self.gen, device=self.device)
            for r in rolls:
                r.text = self.tok.decode([t for t in r.ids if t not in self.eos_ids], skip_special_tokens=True)
            return rolls
        return run

    # ---- the learner pass ------------------------------------------------------------------------

    def _teacher_forced(self, model, rolls: list[Rollout]):
        """float32 log-probs [B, T, V] of the completion positions, and the mask [B, T]."""
        import torch  # noqa: PLC0415

        T = max(len(r.ids) for r in rolls)
        seqs = [r.prompt_ids for r in rolls]
        ids, mask = _left_pad(seqs, self.pad_id, self.device)
        comp = torch.full((len(rolls), T), self.pad_id, dtype=torch.long, device=self.device)
        cmask = torch.zeros((len(rolls), T), dtype=torch.long, device=self.device)
        for i, r in enumerate(rolls):
            comp[i, :len(r.ids)] = torch.tensor(r.ids, dtype=torch.long)
            cmask[i, :len(r.ids)] = 1
        full_ids = torch.cat([ids, comp], -1)
        full_mask = torch.cat([mask, cmask], -1)
        pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
        res = model(input_ids=full_ids, attention_mask=full_mask, position_ids=pos, logits_to_keep=T + 1)
        logp = torch.log_softmax(res.logits[:, :-1, :].float(), dim=-1)
        return logp, comp, cmask.bool()

    def learn(self, rolls: list[Rollout], apply: bool = True) -> dict:
        """One optimiser step on a batch of scored rollouts (token-mean loss over the whole batch).
        ``apply=False`` only computes the gradient and leaves it in ``p.grad`` (for probes and tests).

        A micro-batch whose advantages are all zero contributes exactly zero gradient under every loss,
        so it gets a no-grad forward only (for the logged signals) and no backward."""
        import torch  # noqa: PLC0415

        cfg = self.cfg
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        n_tok = sum(len(r.ids) for r in rolls)
        tot = {"loss": 0.0, "gap": 0.0, "ent": 0.0, "n": 0, "ratio_dev": 0.0, "n_trained": 0, "w_y": 0.0,
               "centring_l1": 0.0}
        mb = cfg.micro_batch
        for i in range(0, len(rolls), mb):
            chunk = [r for r in rolls[i:i + mb] if r.ids]
            if not chunk:
                continue
            trains = any(r.adv != 0 for r in chunk)
            with torch.set_grad_enabled(trains):
                logp, comp, cmask = self._teacher_forced(self.model, chunk)
            lp, tokens = logp[cmask], comp[cmask]  # [N, V], [N]
            gen_logq = torch.tensor([x for r in chunk for x in r.logq], device=self.device, dtype=torch.float32)
            if trains:
                adv = torch.tensor([r.adv for r in chunk for _ in r.ids], device=self.device, dtype=torch.float32)
                if cfg.topk:
                    head_ids = torch.tensor([h for r in chunk for h in r.head_ids], device=self.device)
                    head_logq = torch.tensor([h for r in chunk for h in r.head_logq], device=self.device)
                    per_tok = L.token_loss_topk(lp, gen_logq, head_ids, head_logq, tokens, adv, cfg.loss,
                                                cfg.score_centering)
                    logq_y = gen_logq
                    cl1 = L.centring_logit_l1(lp, cfg.loss, head_ids=head_ids, head_logq=head_logq)
                else:
                    if self.sampler is self.model:
                        lq = lp.detach()  # the sampler's teacher-forced pass *is* this one: q = p exactly
                    else:
                        with torch.no_grad():
                            slogp, _, _ = self._teacher_forced(self.sampler, chunk)
                            lq = slogp[cmask]
                    if cfg.temperature != 1.0:  # q is the tempered distribution the sampler drew from
                        lq = torch.log_softmax(lq / cfg.temperature, dim=-1)
                    per_tok = L.token_loss_full(lp, lq, tokens, adv, cfg.loss, cfg.score_centering)
                    logq_y = lq.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
                    cl1 = L.centring_logit_l1(lp, cfg.loss, sampler_logp=lq)
                loss = per_tok.sum() / n_tok
                loss.backward()
            with torch.no_grad():
                lp = lp.detach()
                lp_y = lp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
                tot["gap"] += float((lp_y - gen_logq).abs().sum())
                tot["ent"] += float(-(lp.exp() * lp).sum(-1).sum())
                tot["n"] += int(tokens.numel())
                if trains:
                    ratio = torch.exp(lp_y - logq_y)
                    tot["loss"] += float(loss)
                    tot["ratio_dev"] += float((ratio - 1).abs().sum())
                    tot["w_y"] += float(L.importance_weight(cfg.loss, ratio).sum())
                    tot["n_trained"] += int(tokens.numel())
                    tot["centring_l1"] += float(cl1.sum())
            del logp, lp
        grads = [p.grad for p in self.params if p.grad is not None]
        gnorm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))\
            if grads else 0.0
        if cfg.max_grad_norm > 0 and grads:
            torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        for p in self.params:  # a zero gradient still steps Adam (momentum), as the card's loop does
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        n, nt = max(tot["n"], 1), tot["n_trained"]
        stats = {"loss": tot["loss"], "grad_norm": gnorm, "logprob_gap": tot["gap"] / n, "entropy": tot["ent"] / n,
                 "n_tokens": n_tok, "n_trained_tokens": nt,
                 "ratio_dev": tot["ratio_dev"] / nt if nt else None, "mean_w_y": tot["w_y"] / nt if nt else None,
                 "centring_l1": tot["centring_l1"] / nt if nt else None}
        if not apply:
            return stats
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.sync_sampler()
        return stats

    # ---- evaluation and checkpoints --------------------------------------------------------------

    def evaluate(self, step: int, evaluator: dict) -> dict:
        t0 = time.perf_counter()
        max_new = self.cfg.eval_max_tokens or self.cfg.max_tokens
        score, preds = self.task.evaluate(self._policy(True, max_new, model=self.model))
        (self.out / "eval").mkdir(exist_ok=True)
        pred_path = self.out / "eval" / f"step_{step:04d}.jsonl"
        with open(pred_path, "w", encoding="utf-8") as f:
            for p in preds:
                f.write(json.dumps(p, sort_keys=True) + "\n")
        rec = {"step": step, "metric": self.task.metric, "score": score, "n": len(preds),
               "evaluator_id": evaluator["evaluator_id"], "predictions": str(pred_path.relative_to(self.out)),
               "predictions_sha256": sha256_file(pred_path), "seconds": round(time.perf_counter() - t0, 3),
               "checkpoint": f"checkpoints/step_{step:04d}"}
        append_jsonl(self.out / "eval.jsonl", rec)
        self.model.save_pretrained(self.out / "checkpoints" / f"step_{step:04d}")
        return rec

    # ---- the loop --------------------------------------------------------------------------------

    def write_header(self) -> dict:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
        import peft  # noqa: PLC0415

        self.out.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "eval.jsonl"):
            (self.out / name).unlink(missing_ok=True)
        max_new = self.cfg.eval_max_tokens or self.cfg.max_tokens
        decoding = {"greedy": True, "temperature": 0, "max_tokens": max_new, "stop": sorted(self.eos_ids),
                    "sampler": "spectrum_train.sample"}
        evaluator = evaluator_identity(self.task, decoding, getattr(self.tok, "chat_template", None))
        write_json(self.out / "evaluator.json", evaluator)
        extra: dict[str, Any] = {"task": self.cfg.task}
        if isinstance(self.task, Gsm8kTask):
            extra.update(self.task.train_provenance())  # source, items' content hash, train.jsonl sha256 if local
            extra["train_order_seed"] = self.cfg.seed
            extra["n_train_items"] = len(self.task.train)
        write_json(self.out / "items.json", item_manifest(self.task.eval_items(), extra))
        conf = asdict(self.cfg)
        conf.update(arm=self.cfg.arm, sampler_dtype_effective=self.sampler_dtype, device=str(self.device),
                    model_provenance=self.model_prov, torch=torch.__version__, transformers=transformers.__version__,
                    peft=peft.__version__, threads=torch.get_num_threads(), argv=sys.argv[1:],
                    trainable_params=sum(p.numel() for p in self.params))
        write_json(self.out / "config.json", conf)
        write_json(self.out / "code_revision.json", code_revision())
        return evaluator

    def run(self) -> Path:
        cfg = self.cfg
        evaluator = self.write_header()
        evals = bool(cfg.eval_every and cfg.eval_n)
        if cfg.eval_at_start and evals:
            self.evaluate(0, evaluator)
        bar = None
        if cfg.progress:
            from tqdm.auto import tqdm  # noqa: PLC0415

            bar = tqdm(total=cfg.steps, desc=f"train {cfg.arm} s{cfg.seed}", unit="step", file=sys.stderr)
        for step in range(1, cfg.steps + 1):
            t0 = time.perf_counter()
            groups = self.task.next_groups(cfg.prompts)
            prompts = [g["prompt"] for g in groups for _ in range(cfg.group)]
            rolls = self._policy(False, cfg.max_tokens)(prompts)
            t_gen = time.perf_counter() - t0
            rewards = []
            for gi, g in enumerate(groups):
                grp = rolls[gi * cfg.group:(gi + 1) * cfg.group]
                self.task.score_group(g, grp)
                mean = sum(r.reward for r in grp) / len(grp)
                for r in grp:
                    r.adv = r.reward - mean
                rewards += [r.reward for r in grp]
                self.task.advance(g, grp)
            t1 = time.perf_counter()
            stats = self.learn(rolls)
            t_learn = time.perf_counter() - t1
            dt = time.perf_counter() - t0
            n_gen = sum(len(r.ids) for r in rolls)
            rec = {"step": step, "mean_reward": sum(rewards) / len(rewards), **stats,
                   "tokens_per_s": n_gen / dt, "gen_tokens_per_s": n_gen / max(t_gen, 1e-9),
                   "step_seconds": dt, "gen_seconds": t_gen, "learn_seconds": t_learn,
                   "mean_completion_tokens": n_gen / len(rolls),
                   "frac_zero_adv_groups": sum(1 for gi in range(len(groups))
                                               if all(r.adv == 0 for r in rolls[gi * cfg.group:(gi + 1) * cfg.group]))
                   / len(groups),
                   "items": [g["id"] for g in groups]}
            append_jsonl(self.out / "metrics.jsonl", rec)
            if bar is not None:
                bar.set_postfix(reward=f"{rec['mean_reward']:.3f}", loss=f"{rec['loss']:.4f}",
                                gnorm=f"{rec['grad_norm']:.3g}", s=f"{dt:.1f}")
                bar.update(1)
            if evals and (step % cfg.eval_every == 0 or step == cfg.steps):
                self.evaluate(step, evaluator)
        if bar is not None:
            bar.close()
        if not evals:
            self.model.save_pretrained(self.out / "checkpoints" / f"step_{cfg.steps:04d}")
        return self.out


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

_HELP = {
    "task": "gsm8k (the spectrum task trains on TRL: spectrum-rft train --help)", "out": "run directory", "model": "'smollm2' or a local HF model directory",
    "cache_dir": "where the converted GGUF model is cached",
    "data": "a local GSM8K folder with train.jsonl and test.jsonl; None: the Hugging Face dataset "
            "openai/gsm8k, config main (needs the network the first time)",
    "prompts": "P, groups per step", "group": "G, completions per prompt", "max_tokens": "sampling budget",
    "loss": "pg | tis | mis", "score_centering": "add the score-centring term",
    "topk": "top-k form over the sampler's head (0: full vocabulary)", "dtype": "learner dtype",
    "sampler_dtype": "sampler dtype ('same' = the learner)", "eval_n": "GSM8K test items",
    "eval_max_tokens": "greedy eval budget (0: max_tokens)", "max_grad_norm": "clip (0: off)",
    "threads": "torch CPU threads (0: default)",
}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="spectrum-rft train", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=_HELP.get(f.name))
        elif f.name in ("loss",):
            ap.add_argument(flag, choices=L.LOSSES, default=default, help=_HELP.get(f.name))
        elif f.name in ("task",):
            ap.add_argument(flag, choices=TASKS, default=default, help=_HELP.get(f.name))
        else:
            typ = {"int": int, "float": float}.get(str(f.type), str)
            ap.add_argument(flag, type=typ, default=default, help=_HELP.get(f.name))
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = TrainConfig(**vars(args))
    except ValueError as e:
        print(f"spectrum-rft train: {e}", file=sys.stderr)
        return 2
    out = Trainer(cfg).run()
    last = (out / "metrics.jsonl").read_text().strip().splitlines()[-1]
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()] \
        if (out / "eval.jsonl").exists() else []
    m = json.loads(last)
    print(f"run {out}: {cfg.steps} steps, last step {m['step_seconds']:.2f}s, reward {m['mean_reward']:.3f}; "
          + ", ".join(f"step {e['step']} {e['metric']} {e['score']:.4f}" for e in evals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
