"""The policy-gradient losses of the local GRPO trainer, and nothing else (pure torch, no I/O).

Per completion token, with sampler distribution ``q``, learner distribution ``p``, sampled token ``y``,
ratio ``r = p/q``, importance weight ``w(r)`` and advantage ``A`` (``sg`` = stop-gradient)::

    uncentred:  loss = -A * sg(w(r_y)) log p(y)
    centred:    loss = -A * [ sg(w(r_y)) log p(y) - sum_v sg(q(v) w(r_v)) log p(v) ]

so the centred gradient is ``-A (w_y grad log p_y - E_{q w}[grad log p])`` (score centring, Marek &
Ryabinin). Weights: ``pg`` w = 1 (no importance weight), ``tis`` w = min(r, 2), ``mis`` w = r on
[0.5, 5] else 0, and ``is`` w = r (untruncated; an arm only to show the identity below).

Identity: with w(r) = r the centring term is ``sum_v q_v (p_v/q_v) grad log p_v = grad sum_v p_v = 0``:
plain IS and IS + centring have identical gradients. Only truncated/masked or absent weights
(``tis``, ``mis``, ``pg``) can differ, and only where q != p.

Top-k form (the sampler reports only its head H of k tokens): the tail is assumed to keep the ratio of
its total masses, rho = max(1 - sum_H q, 1e-6) / max(1 - sum_H p, 1e-6), so a tail token has
r = 1/rho and the tail's share of the centring term is alpha = rho * w(1/rho) times ``-sum_H p_v grad log
p_v``. Hence residual_v = q_v w(p_v/q_v) - alpha p_v and ``loss = -A (sg(w_y) log p_y - sum_H
sg(residual_v) log p_v)``. The head is not renormalised; the sampled token counts even when it is not in
the head. With H = the whole vocabulary the alpha term has zero gradient, so the gradient equals the full
form's (its loss value differs by a constant-gradient term).

All log-probabilities are float32. The batch loss is the token mean over every completion token of the
batch (``token_mean``), so micro-batches are summed with the batch's total token count.
"""

from __future__ import annotations

import torch

LOSSES: tuple[str, ...] = ("pg", "tis", "mis", "is")  # "is" (w = r) is the identity check: centring is a no-op
WEIGHTS: tuple[str, ...] = ("pg", "is", "tis", "mis")
TIS_CAP = 2.0
MIS_RANGE = (0.5, 5.0)
EPS_TAIL = 1e-6


def _f32(x: torch.Tensor) -> torch.Tensor:
    """At least float32 (bf16/fp16 log-probs are upcast; float64 fixtures stay float64)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def importance_weight(kind: str, ratio: torch.Tensor) -> torch.Tensor:
    """w(r) for a loss kind. Always detached (the weight is a stop-gradient factor)."""
    r = ratio.detach()
    if kind == "pg":
        return torch.ones_like(r)
    if kind == "is":
        return r
    if kind == "tis":
        return torch.clamp(r, max=TIS_CAP)
    if kind == "mis":
        lo, hi = MIS_RANGE
        return torch.where((r >= lo) & (r <= hi), r, torch.zeros_like(r))
    raise ValueError(f"unknown loss {kind!r}; choose one of {', '.join(WEIGHTS)}")


def token_loss_full(
    learner_logp: torch.Tensor,  # [N, V] float32 log p (carries the gradient)
    sampler_logp: torch.Tensor,  # [N, V] float32 log q
    tokens: torch.Tensor,  # [N] sampled token ids
    adv: torch.Tensor,  # [N] advantage of the token's completion
    kind: str,
    centered: bool,
) -> torch.Tensor:
    """Per-token loss, full-vocabulary form. Returns [N]."""
    logp = _f32(learner_logp)
    logq = _f32(sampler_logp).detach()
    idx = tokens.long().unsqueeze(-1)
    logp_y = logp.gather(-1, idx).squeeze(-1)
    w_y = importance_weight(kind, torch.exp(logp_y.detach() - logq.gather(-1, idx).squeeze(-1)))
    inner = w_y * logp_y
    if centered:
        q = torch.exp(logq)
        w_v = importance_weight(kind, torch.exp(logp.detach() - logq))
        inner = inner - ((q * w_v).detach() * logp).sum(-1)
    return -adv.to(inner.dtype).detach() * inner


def token_loss_topk(
    learner_logp: torch.Tensor,  # [N, V] float32 log p (carries the gradient)
    sampler_logp_y: torch.Tensor,  # [N] log q(y) of the sampled token, as the sampler reported it
    head_ids: torch.Tensor,  # [N, K] the sampler's top-k token ids
    head_logq: torch.Tensor,  # [N, K] their sampler log-probabilities
    tokens: torch.Tensor,  # [N]
    adv: torch.Tensor,  # [N]
    kind: str,
    centered: bool,
) -> torch.Tensor:
    """Per-token loss, top-k form (the sampler's head only). Returns [N]."""
    logp = _f32(learner_logp)
    logp_y = logp.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    w_y = importance_weight(kind, torch.exp(logp_y.detach() - _f32(sampler_logp_y).detach()))
    inner = w_y * logp_y
    if centered:
        logp_h = logp.gather(-1, head_ids.long())
        logq_h = _f32(head_logq).detach()
        q_h, p_h = torch.exp(logq_h), torch.exp(logp_h.detach())
        rho = torch.clamp(1.0 - q_h.sum(-1), min=EPS_TAIL) / torch.clamp(1.0 - p_h.sum(-1), min=EPS_TAIL)
        alpha = rho * importance_weight(kind, 1.0 / rho)
        residual = q_h * importance_weight(kind, torch.exp(logp_h.detach() - logq_h)) - alpha.unsqueeze(-1) * p_h
        inner = inner - (residual.detach() * logp_h).sum(-1)
    return -adv.to(inner.dtype).detach() * inner


def token_mean(per_token: torch.Tensor, mask: torch.Tensor, n_tokens: int | float | None = None) -> torch.Tensor:
    """Sum of the masked per-token losses over ``n_tokens`` (default: this tensor's masked count)."""
    m = mask.to(per_token.dtype)
    denom = float(n_tokens) if n_tokens is not None else float(m.sum().clamp(min=1.0))
    return (per_token * m).sum() / max(denom, 1.0)


def centring_logit_l1(
    learner_logp: torch.Tensor,  # [N, V]
    kind: str,
    sampler_logp: torch.Tensor | None = None,  # [N, V] (full form)
    head_ids: torch.Tensor | None = None,  # [N, K] (top-k form)
    head_logq: torch.Tensor | None = None,  # [N, K]
) -> torch.Tensor:
    """Size of the centring term per unit advantage: the L1 norm over the vocabulary of its gradient with
    respect to the logits, ``c - (sum c) p`` with ``c_v = q_v w(r_v)`` (full) or ``residual_v`` on the head
    (top-k). Zero exactly when centring cannot change the update (w(r) = r, or q = p). Returns [N], no grad.
    """
    with torch.no_grad():
        logp = _f32(learner_logp.detach())
        p = torch.exp(logp)
        if head_ids is None:
            if sampler_logp is None:
                raise ValueError("give sampler_logp (full form) or head_ids/head_logq (top-k form)")
            logq = _f32(sampler_logp)
            c = torch.exp(logq) * importance_weight(kind, torch.exp(logp - logq))
        else:
            logq_h = _f32(head_logq)
            logp_h = logp.gather(-1, head_ids.long())
            q_h, p_h = torch.exp(logq_h), torch.exp(logp_h)
            rho = torch.clamp(1.0 - q_h.sum(-1), min=EPS_TAIL) / torch.clamp(1.0 - p_h.sum(-1), min=EPS_TAIL)
            alpha = rho * importance_weight(kind, 1.0 / rho)
            res = q_h * importance_weight(kind, torch.exp(logp_h - logq_h)) - alpha.unsqueeze(-1) * p_h
            c = torch.zeros_like(p).scatter(-1, head_ids.long(), res)
        return (c - c.sum(-1, keepdim=True) * p).abs().sum(-1)
