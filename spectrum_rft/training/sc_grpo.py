"""Score-centred GRPO on TRL: ``ScoreCentringGRPOTrainer`` is TRL's ``GRPOTrainer`` (sampling, tool loop,
rewards, group advantages, vLLM, accelerate) whose loss is ours, :mod:`.loss` (``pg``/``tis``/``mis``/``is``,
with or without score centring, full-vocabulary or top-k form).

It overrides the public ``compute_loss(model, inputs, ...)`` only: one forward of the learner over prompt +
completion gives the full logits (TRL's own pass keeps only the sampled token's log-prob), tempered like
TRL's (``logits / temperature``, the distribution the completions were sampled from).

The sampler distribution q (``sampler=``):

* ``"learner"`` (default, CPU and transformers generation): the sampler *is* the learner at these
  weights, so q = p exactly; centring then vanishes by the identity (``logprob_gap`` and
  ``centring_l1`` log 0) and every arm has plain GRPO's gradient. That is the honest CPU case.
* ``"bfloat16"``: q from a no-grad forward of the same model under bfloat16 autocast: what a bfloat16
  sampler computes at these weights. A real sampler/learner mismatch for smoke runs and tests.
* any callable ``fn(model, input_ids, attention_mask, logits_to_keep) -> logits [B, T+1, V]`` (no grad):
  an injected q (tests; another sampler model).
* with ``use_vllm`` TRL hands on vLLM's log-prob of each sampled token (``sampling_per_token_logps``):
  that is log q(y) of the importance weight. vLLM's other log-probs are not passed on by TRL 1.16, so
  score centring (which needs q beyond the sampled token) is refused with ``use_vllm``; tokens vLLM could
  not score (NaN) get the learner's own value (ratio 1).

Top-k form (``topk`` = K): the head is the sampler's top K of q at each position (what a sampler reporting
top-K log-probs gives), log q(y) as above.

Normalisation: the card's token mean over the whole generation batch (all processes), TRL's ``dapo``
normaliser: ``sum(per-token loss) / (tokens in the batch / processes)``, scaled for accumulation the way
TRL scales it. Logged per step (means over the step's completion tokens): ``logprob_gap`` |log p(y) -
log q(y)|, ``entropy`` of p, ``ratio_dev`` |p/q - 1| and ``mean_w_y`` (trained tokens), ``centring_l1``
(size of the centring term per unit advantage; 0 = the arms cannot differ), ``n_tokens``,
``n_trained_tokens`` (tokens with a non-zero advantage). TRL logs ``grad_norm``, ``reward``,
``frac_reward_zero_std``.

Shared prefix (``shared_prefix=True``): the learner runs each distinct prompt of the micro-batch once and
copies its KV cache to that prompt's completions (:func:`completion_logits`). The completions' logits are
those of the full forward (same weights, same positions; a test holds them to float32 round-off), the
gradient still flows into the prompt's activations of the LoRA layers, but a GRPO group of G completions
costs one prompt forward and backward instead of G. Scan-episode prompts are ~590 tokens and reports ~50,
so this is most of the learner's work (``bench/bench_grpo_step.py``). ``learner_tokens`` (logged per step)
counts the tokens the learner really ran.

Gradient probe: :func:`probe_trainer` builds a trainer for a model outside any training run and
:func:`loss_and_gradient` runs ``compute_loss(...).backward()`` on one batch of inputs (the dict TRL's
generation step makes): the loss value and the flattened gradient (``scripts/grad_probe.py``, the bench,
the tests).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import torch
from trl import GRPOConfig, GRPOTrainer

from spectrum_rft.training import loss as L
from spectrum_rft.training.sc_options import check_loss_options
from spectrum_rft.training.trl_common import kv_cache_arg, kv_cache_of

SamplerFn = Callable[[Any, torch.Tensor, torch.Tensor, int], torch.Tensor]
MasksFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
STATS = ("logprob_gap", "entropy", "ratio_dev", "mean_w_y", "centring_l1")
MASK_STATS = ("is_ratio_masked", "is_ratio_unmasked", "seq_log_ratio_masked", "seq_log_ratio_unmasked")
# A logit the grammar forbids: finite, so a forbidden token has probability exactly 0 and every 0 * log 0 in
# the loss stays 0 (-inf would make it nan); its gradient is p = 0.
MASKED_LOGIT = -1e30


def completion_logits(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                      completion_mask: torch.Tensor, *, shared_prefix: bool = False) -> tuple[torch.Tensor, int]:
    """The learner's logits at the positions that predict each completion token, ``[B, T, V]``, and the
    number of tokens it ran through the model.

    TRL's batch layout: prompts left-padded (``prompt_mask``), completions right-padded. Plain: one
    forward over prompt + completion. ``shared_prefix``: the rows are grouped by their prompt (by its
    tokens, wherever the rows sit in the batch: TRL shuffles a generation batch before splitting it); each
    distinct prompt is run once, without its padding, and its KV cache copied to the group's completions
    (``DynamicCache.batch_repeat_interleave``), which then run as one batch. Right padding after a
    completion is causal-masked out of every real token's view, so no mask is needed beyond it."""
    T = completion_ids.size(1)
    if not shared_prefix:
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=T + 1, use_cache=False).logits[:, :-1]
        return logits, int(mask.sum())
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (ids, m) in enumerate(zip(prompt_ids.tolist(), prompt_mask.tolist())):
        groups.setdefault(tuple(t for t, keep in zip(ids, m) if keep), []).append(i)
    parts, order, ran = [], [], 0
    for prompt, rows in groups.items():
        if len(prompt) < 1:
            raise ValueError("an empty prompt has no position to predict the first completion token from")
        pre = model(input_ids=torch.tensor([prompt], device=prompt_ids.device), use_cache=True, logits_to_keep=1)
        cache = kv_cache_of(pre)
        cache.batch_repeat_interleave(len(rows))
        first = pre.logits[:, -1:].expand(len(rows), -1, -1)  # predicts completion token 0
        ran += len(prompt)
        if T > 1:
            c = completion_ids[rows, :-1]
            mask = torch.ones(len(rows), len(prompt) + T - 1, dtype=prompt_mask.dtype, device=prompt_mask.device)
            rest = model(input_ids=c, attention_mask=mask, use_cache=True, **{kv_cache_arg(model): cache}).logits
            parts.append(torch.cat([first, rest], dim=1))
            ran += int(completion_mask[rows, :-1].sum())
        else:
            parts.append(first)
        order += rows
    logits = torch.cat(parts, dim=0)
    inverse = torch.empty(len(order), dtype=torch.long, device=logits.device)
    inverse[torch.tensor(order, device=logits.device)] = torch.arange(len(order), device=logits.device)
    return logits[inverse], ran


def bfloat16_sampler(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
    """Logits of the same model under bfloat16 autocast (no grad): a lower-precision sampler."""
    with torch.no_grad(), torch.autocast(device_type=input_ids.device.type, dtype=torch.bfloat16):
        return model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep,
                     use_cache=False).logits


class ScoreCentringGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with the loss of :mod:`.loss`. Extra keyword arguments: ``loss_kind`` (pg | tis | mis
    | is), ``score_centering``, ``topk`` (0: full form), ``sampler`` ("learner", "bfloat16" or a callable),
    ``shared_prefix`` (one learner forward per distinct prompt: :func:`completion_logits`), ``grammar_masks``
    (a constrained sampler's masks, ``fn(completion_ids, mask) -> allowed [N, V]`` at the trained positions: the learner is
    then the policy that sampled, the masks applied in its log-softmax, so a token the grammar forced has
    log-prob 0 and no gradient; the importance ratio of the masked and of the unmasked policy to the
    sampler's log-probs is logged per step: ``is_ratio_*`` per token, ``seq_log_ratio_*`` per completion)."""

    args: GRPOConfig  # what GRPOTrainer is given and keeps (Trainer declares the base TrainingArguments)

    def __init__(self, *args: Any, loss_kind: str = "pg", score_centering: bool = False, topk: int = 0,
                 sampler: str | SamplerFn = "learner", shared_prefix: bool = False,
                 grammar_masks: MasksFn | None = None, **kwargs: Any):
        grpo_args = kwargs.get("args")
        check_loss_options(loss_kind, score_centering, topk, sampler, bool(getattr(grpo_args, "use_vllm", False)),
                           bool(getattr(grpo_args, "bf16", False)))
        if grammar_masks is not None and sampler != "learner":
            raise ValueError("grammar masks apply to the learner's own distribution: keep sampler='learner'")
        super().__init__(*args, **kwargs)
        self.loss_kind, self.score_centering, self.topk = loss_kind, score_centering, topk
        self.shared_prefix = shared_prefix
        self.grammar_masks = grammar_masks
        self.sampler_fn: SamplerFn | None = (bfloat16_sampler if sampler == "bfloat16"
                                             else sampler if callable(sampler) else None)
        self.loss_stats: dict[str, float] = defaultdict(float)

    # ---- the loss --------------------------------------------------------------------------------

    def learner_logprobs(self, model, inputs: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The learner's tempered log-probabilities at the trained completion positions, as the loss uses
        them: ``lp`` ``[N, V]`` (with the gradient; under the grammar's masks when the trainer has
        ``grammar_masks``), the sampled tokens ``[N]``, the positions ``mask`` ``[B, T]`` and, with masks, the
        unmasked policy's log-prob of each sampled token ``[N]`` (no grad; else None)."""
        completion_ids = inputs["completion_ids"]
        mask = inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        mask = mask.bool()
        with self.accelerator.autocast():
            logits, ran = completion_logits(model, inputs["prompt_ids"], inputs["prompt_mask"], completion_ids,
                                            inputs["completion_mask"], shared_prefix=self.shared_prefix)
        self.loss_stats["learner_tokens"] += ran
        scaled = logits[mask].float() / float(self.args.temperature)  # [N, V]
        del logits
        tokens = completion_ids[mask]
        unmasked_y = None
        if self.grammar_masks is not None:  # the policy that sampled: the grammar's masks in the log-softmax
            with torch.no_grad():
                unmasked_y = torch.log_softmax(scaled.detach(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            allowed = self.grammar_masks(completion_ids, mask).to(scaled.device)  # at the trained positions
            scaled = scaled.masked_fill(~allowed, MASKED_LOGIT)
        return torch.log_softmax(scaled, dim=-1), tokens, mask, unmasked_y

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001
        if return_outputs:
            raise ValueError("ScoreCentringGRPOTrainer does not return outputs")
        completion_ids = inputs["completion_ids"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        T = completion_ids.size(1)
        temp = float(self.args.temperature)
        lp, tokens, mask, unmasked_y = self.learner_logprobs(model, inputs)
        adv = inputs["advantages"]
        adv = (adv.unsqueeze(1).expand(-1, T) if adv.dim() == 1 else adv)[mask].float()
        lp_y = lp.detach().gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        if self.sampler_fn is None:
            lq = lp.detach()
        else:
            q_logits = self.sampler_fn(model, input_ids, attention_mask, T + 1)
            lq = torch.log_softmax(q_logits[:, :-1, :].float() / temp, dim=-1)[mask].detach()
            del q_logits
        lq_y = lq.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        vllm_lq = inputs.get("sampling_per_token_logps")
        if vllm_lq is not None:  # the log-prob vLLM sampled with; NaN (unscored) -> the learner's own (ratio 1)
            v = vllm_lq[mask].float()
            lq_y = torch.where(torch.isnan(v), lp_y, v)
        kind, sc = self.loss_kind, self.score_centering
        trained = adv != 0  # the centring term's size is logged on these tokens only
        if self.topk and sc:
            head_logq, head_ids = lq.topk(min(self.topk, lq.size(-1)), dim=-1)
            per_tok = L.token_loss_topk(lp, lq_y, head_ids, head_logq, tokens, adv, kind, True)
            cl1 = L.centring_logit_l1(lp[trained], kind, head_ids=head_ids[trained], head_logq=head_logq[trained])
        elif sc:
            per_tok = L.token_loss_full(lp, lq, tokens, adv, kind, True)
            cl1 = L.centring_logit_l1(lp[trained], kind, sampler_logp=lq[trained])
        else:  # uncentred: only log q(y) enters (the head is unused), so vLLM's value serves
            per_tok = L.token_loss_topk(lp, lq_y, tokens.unsqueeze(-1), lq_y.unsqueeze(-1), tokens, adv, kind, False)
            # what centring would change here; unknown with vLLM (its q is only the sampled token's)
            cl1 = L.centring_logit_l1(lp[trained], kind, sampler_logp=lq[trained]) if vllm_lq is None else None
        normaliser = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if model.training:  # TRL's dapo scaling: the batch's token mean across accumulation steps
            normaliser = normaliser * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        loss = per_tok.sum() / normaliser
        self._record(lp, lp_y, lq_y, trained, cl1)
        if vllm_lq is not None:
            self._record_ratios(lp_y, unmasked_y, v, mask)
        return loss

    def _record_ratios(self, lp_y, unmasked_y, sampler_y, mask) -> None:  # noqa: ANN001
        """The importance ratio learner / sampler of the sampled tokens, for the policy trained (``masked``
        with grammar masks) and for the model's own unconstrained policy (``unmasked``): per token (mean of
        the ratio) and per completion (mean of the summed log-ratio). Tokens the sampler did not score are
        left out."""
        with torch.no_grad():
            ok = ~torch.isnan(sampler_y)
            row = torch.arange(mask.size(0), device=mask.device).unsqueeze(1).expand_as(mask)[mask][ok]
            s = self.loss_stats
            s["n_ratio_tokens"] += int(ok.sum())
            s["n_ratio_rows"] += int(row.unique().numel())
            pairs: tuple[tuple[str, torch.Tensor], ...]  # (which learner, its log-prob of each sampled token)
            if unmasked_y is None:  # no grammar masks: the learner is the model's own (unmasked) policy
                pairs = (("unmasked", lp_y),)
            else:
                pairs = (("masked", lp_y), ("unmasked", unmasked_y))
                s["n_masked"] += 1
            for name, learner_y in pairs:
                d = torch.clamp((learner_y.detach() - sampler_y)[ok], -L.LOG_RATIO_CLIP, L.LOG_RATIO_CLIP)
                s[f"is_ratio_{name}"] += float(torch.exp(d).sum())
                s[f"seq_log_ratio_{name}"] += float(d.sum())

    def _record(self, lp, lp_y, lq_y, trained, cl1) -> None:  # noqa: ANN001
        with torch.no_grad():
            s = self.loss_stats
            lpd = lp.detach()
            s["n_tokens"] += lp_y.numel()
            s["logprob_gap"] += float((lp_y - lq_y).abs().sum())
            s["entropy"] += float(-(torch.where(torch.isfinite(lpd), lpd.exp() * lpd, torch.zeros_like(lpd))).sum())
            s["n_trained_tokens"] += int(trained.sum())
            ratio = torch.exp(torch.clamp(lp_y - lq_y, -L.LOG_RATIO_CLIP, L.LOG_RATIO_CLIP))[trained]  # as the loss clips
            s["ratio_dev"] += float((ratio - 1).abs().sum())
            s["mean_w_y"] += float(L.importance_weight(self.loss_kind, ratio).sum())
            if cl1 is not None:
                s["centring_l1"] += float(cl1.sum())
                s["n_centring"] += int(cl1.numel())

    # ---- logging ---------------------------------------------------------------------------------

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """TRL's log line, plus this step's loss signals (summed over processes, then averaged per token)."""
        if "loss" in logs and self.loss_stats:
            keys = ("n_tokens", "n_trained_tokens", "n_centring", "learner_tokens", "n_ratio_tokens", "n_ratio_rows",
                    "n_masked", *STATS, *MASK_STATS)
            local = torch.tensor([float(self.loss_stats.get(k, 0.0)) for k in keys], device=self.accelerator.device)
            tot = dict(zip(keys, self.accelerator.reduce(local, reduction="sum").tolist()))
            n, nt, nc = tot["n_tokens"], tot["n_trained_tokens"], tot["n_centring"]
            nr, nrows = tot["n_ratio_tokens"], tot["n_ratio_rows"]
            means = {"logprob_gap": (tot["logprob_gap"], n), "entropy": (tot["entropy"], n),
                     "ratio_dev": (tot["ratio_dev"], nt), "mean_w_y": (tot["mean_w_y"], nt),
                     "centring_l1": (tot["centring_l1"], nc),
                     **{k: (tot[k], nr if k.startswith("is_") else nrows) for k in MASK_STATS
                        if tot["n_masked"] or k.endswith("_unmasked")}}
            logs = {**logs, "n_tokens": int(n), "n_trained_tokens": int(nt), "learner_tokens": int(tot["learner_tokens"]),
                    **{k: v / d for k, (v, d) in means.items() if d}}  # no trained token: no ratio to log
            self.loss_stats.clear()
        super().log(logs, *args, **kwargs)


def _no_reward(completions: list, **_: Any) -> list[float]:
    return [0.0] * len(completions)


def probe_trainer(model, tok, output_dir: str, *, temperature: float = 1.0, trl_loss: bool = False,
                  **loss_kw: Any) -> GRPOTrainer:
    """A trainer around ``model`` only for calling ``compute_loss`` on batches of one's own (no data, no
    reward): ours with ``loss_kw`` (loss_kind, score_centering, topk, sampler), or with ``trl_loss`` TRL's
    own GRPO loss (``dapo``). CPU, float32."""
    from datasets import Dataset  # noqa: PLC0415

    args = GRPOConfig(output_dir=str(output_dir), use_cpu=True, bf16=False, per_device_train_batch_size=2,
                      num_generations=2, report_to=[], temperature=temperature, loss_type="dapo")
    kw = dict(model=model, args=args, processing_class=tok, train_dataset=Dataset.from_list([{"prompt": "x"}] * 2),
              reward_funcs=[_no_reward])
    return GRPOTrainer(**kw) if trl_loss else ScoreCentringGRPOTrainer(**kw, **loss_kw)


def loss_and_gradient(trainer: GRPOTrainer, model, inputs: dict) -> tuple[float, torch.Tensor]:
    """One ``compute_loss`` + backward in eval mode (no accumulation scaling: the normaliser is the batch's
    token count): the loss and the trainable parameters' gradient, flattened (a copy)."""
    model.zero_grad(set_to_none=True)
    model.eval()
    loss = trainer.compute_loss(model, inputs)
    loss.backward()
    return float(loss.detach()), torch.cat([q.grad.flatten() for q in model.parameters() if q.grad is not None]).clone()
