"""The policy-gradient losses of the local GRPO trainer, and nothing else (pure torch, no I/O).

Per completion token, with sampler distribution ``q``, learner distribution ``p``, sampled token ``y``,
ratio ``r = p/q``, importance weight ``w(r)`` and advantage ``A`` (``sg`` = stop-gradient)::

    uncentred:  loss = -A * sg(w(r_y)) log p(y)
    centred:    loss = -A * [ sg(w(r_y)) log p(y) - sum_v sg(q(v) w(r_v)) log p(v) ]

so the centred gradient is ``-A (w_y grad log p_y - E_{q w}[grad log p])`` (score centring, Marek &
Ryabinin). Weights: ``pg`` w = 1 (no importance weight), ``tis`` w = min(r, 2), ``mis`` w = r on
[0.5, 5] else 0, and ``is`` w = r (untruncated; an arm only to show the identity below). As in the
reference (MJ10/score-centering ``is_weights``), the sampled token's weight is taken on the clipped
log-ratio, ``w_y = w(exp(clip(log p_y - log q_y, -20, 20)))``, so ``is`` never exceeds e^20.

The centring masses ``c_v = q_v w(r_v)`` are computed in log space (never ``q * r``, which is 0 * inf =
nan in float32 once log p - log q > 88): ``log c = log q`` (pg), ``log p`` (is: c = p exactly, no clip),
``min(log p, log q + log 2)`` (tis), ``log p`` if ``log 0.5 <= log p - log q <= log 5`` else c = 0 (mis).

Identity: with w(r) = r the centring term is ``sum_v q_v (p_v/q_v) grad log p_v = grad sum_v p_v = 0``:
plain IS and IS + centring have identical gradients. Only truncated/masked or absent weights
(``tis``, ``mis``, ``pg``) can differ, and only where q != p.

Top-k form (the sampler reports only its head H of k tokens): the tail is assumed to keep the ratio of
its total masses, rho = max(1 - sum_H q, 1e-6) / max(1 - sum_H p, 1e-6), so a tail token has
r = 1/rho and the tail's share of the centring term is alpha = rho * w(1/rho) times ``-sum_H p_v grad log
p_v`` plus the gradient-free ``sum_V p_v grad log p_v = 0``. Hence residual_v = q_v w(p_v/q_v) - alpha p_v
and ``loss = -A (sg(w_y) log p_y - sum_H sg(residual_v) log p_v - sg(alpha sum_V p_v log p_v))``: the last
term carries no gradient but makes the VALUE the full form's centring term with q's tail modelled as
rho p (without it a large alpha, e.g. ~1e3 with a bf16 sampler, dominates the logged loss). The head is
not renormalised; the sampled token counts even when it is not in the head. With H = the whole
vocabulary the alpha terms cancel, so loss value and gradient equal the full form's.

All log-probabilities are float32. The batch loss is the token mean over every completion token of the
batch (``token_mean``), so micro-batches are summed with the batch's total token count.
"""

from __future__ import annotations

import math

import torch


WEIGHTS: tuple[str, ...] = ("pg", "is", "tis", "mis")
TIS_CAP = 2.0
MIS_RANGE = (0.5, 5.0)
EPS_TAIL = 1e-6
LOG_RATIO_CLIP = 20.0  # the sampled token's log p - log q is clipped to +/- this (reference: is_weights)


def _f32(x: torch.Tensor) -> torch.Tensor:
    """At least float32 (bf16/fp16 log-probs are upcast; float64 fixtures stay float64)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def importance_weight(kind: str, ratio: torch.Tensor) -> torch.Tensor:
    """w(r) for a loss kind. Always detached (the weight is a stop-gradient factor)."""
    r = ratio.detach()
    if kind == "pg":
        return torch.ones_like(r)
    if kind == "is":
        return torch.clamp(r, min=math.exp(-LOG_RATIO_CLIP), max=math.exp(LOG_RATIO_CLIP))
    if kind == "tis":
        return torch.clamp(r, max=TIS_CAP)
    if kind == "mis":
        lo, hi = MIS_RANGE
        return torch.where((r >= lo) & (r <= hi), r, torch.zeros_like(r))
    raise ValueError(f"unknown loss {kind!r}; choose one of {', '.join(WEIGHTS)}")


def token_weight(kind: str, log_ratio: torch.Tensor) -> torch.Tensor:
    """The sampled token's weight ``w(exp(clip(log r, -20, 20)))`` (detached; finite for any log r)."""
    lr = torch.clamp(log_ratio.detach(), min=-LOG_RATIO_CLIP, max=LOG_RATIO_CLIP)
    return importance_weight(kind, torch.exp(lr))


def centring_mass(kind: str, logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """``c = q w(p/q)``, computed in log space (detached). For ``is`` this is ``p`` exactly: no overflow of
    r, no underflow of q, no clip. ``logq = -inf`` gives c = 0 except for ``is`` (c = p)."""
    logp, logq = logp.detach(), logq.detach()
    if kind == "pg":
        logc = logq
    elif kind == "is":
        logc = logp
    elif kind == "tis":
        logc = torch.minimum(logp, logq + math.log(TIS_CAP))
    elif kind == "mis":
        lo, hi = MIS_RANGE
        lr = logp - logq
        logc = torch.where((lr >= math.log(lo)) & (lr <= math.log(hi)), logp, torch.full_like(logp, -math.inf))
    else:
        raise ValueError(f"unknown loss {kind!r}; choose one of {', '.join(WEIGHTS)}")
    return torch.exp(logc)


def _tail_alpha(kind: str, q_h: torch.Tensor, p_h: torch.Tensor) -> torch.Tensor:
    """alpha = rho w(1/rho), the tail's centring mass per unit p (one token with p = 1, q = rho)."""
    log_rho = (torch.log(torch.clamp(1.0 - q_h.sum(-1), min=EPS_TAIL))
               - torch.log(torch.clamp(1.0 - p_h.sum(-1), min=EPS_TAIL)))
    return centring_mass(kind, torch.zeros_like(log_rho), log_rho)


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
    w_y = token_weight(kind, logp_y.detach() - logq.gather(-1, idx).squeeze(-1))
    inner = w_y * logp_y
    if centered:
        inner = inner - (centring_mass(kind, logp, logq) * logp).sum(-1)
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
    w_y = token_weight(kind, logp_y.detach() - _f32(sampler_logp_y).detach())
    inner = w_y * logp_y
    if centered:
        logp_h = logp.gather(-1, head_ids.long())
        logq_h = _f32(head_logq).detach()
        q_h, p_h = torch.exp(logq_h), torch.exp(logp_h.detach())
        alpha = _tail_alpha(kind, q_h, p_h)
        residual = centring_mass(kind, logp_h, logq_h) - alpha.unsqueeze(-1) * p_h
        lpd = logp.detach()
        # gradient-free (sum_v p_v grad log p_v = 0), value only; p = 0 (log p = -inf) contributes 0
        plogp = torch.where(torch.isfinite(lpd), torch.exp(lpd) * lpd, torch.zeros_like(lpd)).sum(-1)
        inner = inner - (residual.detach() * logp_h).sum(-1) - alpha * plogp
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
            c = centring_mass(kind, logp, _f32(sampler_logp))
        else:
            if head_logq is None:
                raise ValueError("give head_logq with head_ids (the top-k form)")
            logq_h = _f32(head_logq)
            logp_h = logp.gather(-1, head_ids.long())
            q_h, p_h = torch.exp(logq_h), torch.exp(logp_h)
            alpha = _tail_alpha(kind, q_h, p_h)
            res = centring_mass(kind, logp_h, logq_h) - alpha.unsqueeze(-1) * p_h
            c = torch.zeros_like(p).scatter(-1, head_ids.long(), res)
        return (c - c.sum(-1, keepdim=True) * p).abs().sum(-1)
