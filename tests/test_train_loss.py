"""Correctness preflight of the score-centring losses (spectrum_train_loss), on small synthetic fixtures.

The fixture stands in for a batch of completion tokens: learner logits ``theta`` (the parameters), a
sampler distribution q that differs from p by noise, sampled tokens and advantages. Since
``d log p_v / d theta = e_v - p``, every gradient has a closed form to check autograd against.
"""

from __future__ import annotations

import pytest

import torch
from hypothesis import given, settings, strategies as st

from spectrum_rft.training import loss as L  # noqa: E402

KINDS = ("pg", "is", "tis", "mis")


def fixture(seed: int = 0, N: int = 12, V: int = 16, noise: float = 0.3, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(N, V, generator=g, dtype=dtype)
    sampler_logits = theta + noise * torch.randn(N, V, generator=g, dtype=dtype)
    logq = torch.log_softmax(sampler_logits, -1)
    tokens = torch.multinomial(logq.exp(), 1, generator=g).squeeze(-1)
    adv = torch.randn(N, generator=g, dtype=dtype)
    return theta, logq, tokens, adv


def grad_full(theta, logq, tokens, adv, kind, centered):
    th = theta.clone().requires_grad_(True)
    L.token_loss_full(torch.log_softmax(th, -1), logq, tokens, adv, kind, centered).sum().backward()
    return th.grad


def grad_topk(theta, logq, tokens, adv, kind, centered, k):
    th = theta.clone().requires_grad_(True)
    hv, hi = logq.topk(k, -1)
    logq_y = logq.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    L.token_loss_topk(torch.log_softmax(th, -1), logq_y, hi, hv, tokens, adv, kind, centered).sum().backward()
    return th.grad


def w_of(kind, r):
    return L.importance_weight(kind, r)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("centered", [False, True])
def test_autograd_matches_closed_form(kind, centered):
    """grad = -A (w_y grad log p_y - E_{q w}[grad log p]), with grad_theta log p_v = e_v - p."""
    theta, logq, tokens, adv = fixture(1)
    N, V = theta.shape
    p = torch.softmax(theta, -1)
    q = logq.exp()
    onehot = torch.nn.functional.one_hot(tokens, V).to(theta.dtype)
    r = p / q
    w = w_of(kind, r)
    w_y = w.gather(-1, tokens.unsqueeze(-1))
    expected = w_y * (onehot - p)
    if centered:
        qw = q * w
        expected = expected - (qw - qw.sum(-1, keepdim=True) * p)  # sum_v q_v w_v (e_v - p)
    expected = -adv.unsqueeze(-1) * expected
    torch.testing.assert_close(grad_full(theta, logq, tokens, adv, kind, centered), expected, rtol=1e-9, atol=1e-12)


def test_topk_closed_form():
    """Top-k: grad = -A (w_y (e_y - p) - sum_H residual_v (e_v - p))."""
    theta, logq, tokens, adv = fixture(2, V=20)
    k = 5
    for kind in KINDS:
        got = grad_topk(theta, logq, tokens, adv, kind, True, k)
        p, q = torch.softmax(theta, -1), logq.exp()
        hv, hi = logq.topk(k, -1)
        q_h, p_h = hv.exp(), p.gather(-1, hi)
        rho = (1 - q_h.sum(-1)).clamp(min=1e-6) / (1 - p_h.sum(-1)).clamp(min=1e-6)
        alpha = rho * w_of(kind, 1 / rho)
        res = q_h * w_of(kind, p_h / q_h) - alpha.unsqueeze(-1) * p_h
        V = theta.shape[1]
        e_h = torch.zeros_like(theta).scatter(-1, hi, res)  # sum_H res_v e_v
        w_y = w_of(kind, (p / q).gather(-1, tokens.unsqueeze(-1)))
        onehot = torch.nn.functional.one_hot(tokens, V).to(theta.dtype)
        expected = -adv.unsqueeze(-1) * (w_y * (onehot - p) - (e_h - res.sum(-1, keepdim=True) * p))
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)


def test_centring_term_vanishes_for_untruncated_ratio():
    """w(r) = r: sum_v q_v (p_v/q_v) grad log p_v = grad sum_v p_v = 0, so IS == IS + centring."""
    theta, logq, tokens, adv = fixture(3)
    torch.testing.assert_close(grad_full(theta, logq, tokens, adv, "is", True),
                               grad_full(theta, logq, tokens, adv, "is", False), rtol=0, atol=1e-12)
    torch.testing.assert_close(grad_topk(theta, logq, tokens, adv, "is", True, 4),
                               grad_topk(theta, logq, tokens, adv, "is", False, 4), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ("pg", "tis", "mis"))
def test_centred_and_uncentred_differ_when_q_differs_from_p(kind):
    theta, logq, tokens, adv = fixture(4, noise=0.5)
    diff = grad_full(theta, logq, tokens, adv, kind, True) - grad_full(theta, logq, tokens, adv, kind, False)
    assert diff.abs().max() > 1e-3
    diff_k = grad_topk(theta, logq, tokens, adv, kind, True, 6) - grad_topk(theta, logq, tokens, adv, kind, False, 6)
    assert diff_k.abs().max() > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_centring_vanishes_on_policy(kind):
    """q == p: every weight is w(1) and the centring term is w(1) grad sum_v p_v = 0 (both forms)."""
    theta, _, tokens, adv = fixture(5)
    logp = torch.log_softmax(theta, -1)
    torch.testing.assert_close(grad_full(theta, logp, tokens, adv, kind, True),
                               grad_full(theta, logp, tokens, adv, kind, False), rtol=0, atol=1e-12)
    torch.testing.assert_close(grad_topk(theta, logp, tokens, adv, kind, True, 4),
                               grad_topk(theta, logp, tokens, adv, kind, False, 4), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("centered", [False, True])
def test_topk_with_whole_vocabulary_equals_full_form(kind, centered):
    theta, logq, tokens, adv = fixture(6, V=16)
    torch.testing.assert_close(grad_topk(theta, logq, tokens, adv, kind, centered, 16),
                               grad_full(theta, logq, tokens, adv, kind, centered), rtol=1e-9, atol=1e-12)


def test_topk_keeps_sampled_token_outside_the_head():
    """The sampled token's term uses its own log p even when the head (k=1) does not contain it."""
    theta, logq, tokens, adv = fixture(7, V=10)
    hv, hi = logq.topk(1, -1)
    outside = tokens != hi.squeeze(-1)
    assert outside.any()
    th = theta.clone().requires_grad_(True)
    logq_y = logq.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    L.token_loss_topk(torch.log_softmax(th, -1), logq_y, hi, hv, tokens, adv, "pg", False).sum().backward()
    p = torch.softmax(theta, -1)
    onehot = torch.nn.functional.one_hot(tokens, 10).to(theta.dtype)
    torch.testing.assert_close(th.grad, -adv.unsqueeze(-1) * (onehot - p))


def test_weights():
    r = torch.tensor([0.1, 0.49, 0.5, 1.0, 1.9, 2.5, 5.0, 5.01, 9.0])
    assert L.importance_weight("pg", r).tolist() == [1.0] * 9
    assert L.importance_weight("tis", r).tolist() == pytest.approx([0.1, 0.49, 0.5, 1.0, 1.9, 2.0, 2.0, 2.0, 2.0])
    assert L.importance_weight("mis", r).tolist() == pytest.approx([0, 0, 0.5, 1.0, 1.9, 2.5, 5.0, 0, 0])
    with pytest.raises(ValueError):
        L.importance_weight("ppo", r)


def test_token_mean_uses_batch_token_count():
    per = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mask = torch.tensor([1, 1, 0, 1])
    assert float(L.token_mean(per, mask)) == pytest.approx(7.0 / 3)
    assert float(L.token_mean(per, mask, n_tokens=7)) == pytest.approx(1.0)


# ---- property tests ---------------------------------------------------------------------------------

settings.register_profile("train_loss", max_examples=40, deadline=None)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 24), noise=st.floats(0.0, 2.0),
       kind=st.sampled_from(KINDS), centered=st.booleans())
def test_property_topk_full_vocab_equals_full(seed, V, noise, kind, centered):
    theta, logq, tokens, adv = fixture(seed, N=4, V=V, noise=noise)
    torch.testing.assert_close(grad_topk(theta, logq, tokens, adv, kind, centered, V),
                               grad_full(theta, logq, tokens, adv, kind, centered), rtol=1e-7, atol=1e-10)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 24), noise=st.floats(0.0, 2.0),
       k=st.integers(1, 24))
def test_property_is_identity(seed, V, noise, k):
    """The w(r) = r identity holds for any fixture and any head size."""
    theta, logq, tokens, adv = fixture(seed, N=4, V=V, noise=noise)
    k = min(k, V)
    torch.testing.assert_close(grad_full(theta, logq, tokens, adv, "is", True),
                               grad_full(theta, logq, tokens, adv, "is", False), rtol=0, atol=1e-10)
    torch.testing.assert_close(grad_topk(theta, logq, tokens, adv, "is", True, k),
                               grad_topk(theta, logq, tokens, adv, "is", False, k), rtol=0, atol=1e-10)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 24), noise=st.floats(0.0, 2.0),
       kind=st.sampled_from(KINDS), centered=st.booleans(), scale=st.floats(-3.0, 3.0))
def test_property_linear_in_advantage_and_zero_at_zero(seed, V, noise, kind, centered, scale):
    """Loss and gradient scale linearly with A; A = 0 gives exactly zero."""
    theta, logq, tokens, adv = fixture(seed, N=4, V=V, noise=noise)
    g1 = grad_full(theta, logq, tokens, adv, kind, centered)
    gs = grad_full(theta, logq, tokens, scale * adv, kind, centered)
    torch.testing.assert_close(gs, scale * g1, rtol=1e-7, atol=1e-10)
    assert grad_full(theta, logq, tokens, 0 * adv, kind, centered).abs().max() == 0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 24), noise=st.floats(0.0, 2.0),
       kind=st.sampled_from(KINDS))
def test_property_centred_gradient_sums_to_zero_over_logits(seed, V, noise, kind):
    """Any score-function gradient w.r.t. logits sums to 0 over the vocabulary (softmax shift
    invariance); the centring term must keep that."""
    theta, logq, tokens, adv = fixture(seed, N=4, V=V, noise=noise)
    for centered in (False, True):
        g = grad_full(theta, logq, tokens, adv, kind, centered)
        torch.testing.assert_close(g.sum(-1), torch.zeros(4, dtype=g.dtype), rtol=0, atol=1e-10)


def test_float32_inputs_are_accepted():
    theta, logq, tokens, adv = fixture(8, dtype=torch.float32)
    g = grad_full(theta, logq, tokens, adv, "tis", True)
    assert g.dtype == torch.float32 and torch.isfinite(g).all()


@pytest.mark.parametrize("kind", KINDS)
def test_centring_l1_is_the_centring_gradient_size(kind):
    """centring_logit_l1 = L1 norm (over logits) of (centred - uncentred) gradient per unit advantage;
    zero for w(r) = r and on-policy."""
    theta, logq, tokens, adv = fixture(9, V=12, noise=0.6)
    logp = torch.log_softmax(theta, -1)
    diff = (grad_full(theta, logq, tokens, adv, kind, True) - grad_full(theta, logq, tokens, adv, kind, False))
    want = (diff / adv.abs().unsqueeze(-1)).abs().sum(-1)
    got = L.centring_logit_l1(logp, kind, sampler_logp=logq)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    hv, hi = logq.topk(4, -1)
    diff_k = grad_topk(theta, logq, tokens, adv, kind, True, 4) - grad_topk(theta, logq, tokens, adv, kind, False, 4)
    got_k = L.centring_logit_l1(logp, kind, head_ids=hi, head_logq=hv)
    torch.testing.assert_close(got_k, (diff_k / adv.abs().unsqueeze(-1)).abs().sum(-1), rtol=1e-9, atol=1e-12)
    if kind == "is":
        assert got.max() < 1e-12 and got_k.max() < 1e-12
    else:
        assert got.max() > 1e-3
    assert L.centring_logit_l1(logp, kind, sampler_logp=logp).max() < 1e-12
