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


# ---- loss VALUES against an independent float64 formulation (issue 14) ---------------------------------
# Written from the card's definitions (Marek & Ryabinin score centring, the reference's losses.py
# semantics), in numpy float64, sharing no code with the module:
#   sampled token:  w_y = W(exp(clip(log p_y - log q_y, -20, 20)))
#   full centring:  c_v = q_v W(p_v / q_v)   (no clip: for w = r this is p_v exactly)
#   top-k centring: c_v on the head H, plus the modelled tail q_tail = rho p_tail with
#                   rho = max(1 - sum_H q, 1e-6) / max(1 - sum_H p, 1e-6), alpha = rho W(1/rho):
#                   centre = sum_H c_v log p_v + alpha (sum_V p_v log p_v - sum_H p_v log p_v)
#   loss = -A (w_y log p_y - centre)

import math  # noqa: E402

import numpy as np  # noqa: E402


def _W64(kind, r):
    r = np.asarray(r, dtype=np.float64)
    if kind == "pg":
        return np.ones_like(r)
    if kind == "is":
        return r
    if kind == "tis":
        return np.minimum(r, 2.0)
    if kind == "mis":
        return np.where((r >= 0.5) & (r <= 5.0), r, 0.0)
    raise ValueError(kind)


def ref_loss64(logp, logq, tokens, adv, kind, centered, k=None):
    """Per-token loss in float64 (numpy). k=None: full form; else the sampler's top-k head of logq."""
    logp = np.asarray(logp, np.float64)
    logq = np.asarray(logq, np.float64)
    tokens = np.asarray(tokens)
    adv = np.asarray(adv, np.float64)
    out = np.empty(len(tokens))
    for i, y in enumerate(tokens):
        lp, lq = logp[i], logq[i]
        w_y = _W64(kind, math.exp(min(max(lp[y] - lq[y], -20.0), 20.0)))
        inner = w_y * lp[y]
        if centered:
            p, q = np.exp(lp), np.exp(lq)
            if k is None:
                c = q * _W64(kind, p / q)
                inner -= float((c * lp).sum())
            else:
                H = np.argsort(-lq, kind="stable")[:k]
                qh, ph = q[H], p[H]
                rho = max(1.0 - qh.sum(), 1e-6) / max(1.0 - ph.sum(), 1e-6)
                alpha = rho * float(_W64(kind, 1.0 / rho))
                centre = (qh * _W64(kind, ph / qh) * lp[H]).sum() + alpha * ((p * lp).sum() - (ph * lp[H]).sum())
                inner -= float(centre)
        out[i] = -adv[i] * inner
    return out


def loss_full(logp, logq, tokens, adv, kind, centered):
    return L.token_loss_full(logp, logq, tokens, adv, kind, centered)


def loss_topk(logp, logq, tokens, adv, kind, centered, k):
    hv, hi = logq.topk(k, -1)
    logq_y = logq.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return L.token_loss_topk(logp, logq_y, hi, hv, tokens, adv, kind, centered)


def _topk_ref(logq, tokens, adv, kind, centered, k, logp):
    # the reference's head must be the same set torch.topk picks (ties are measure-zero here)
    return ref_loss64(logp.detach().double().numpy(), logq.double().numpy(), tokens.numpy(), adv.double().numpy(),
                      kind, centered, k)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 24), noise=st.floats(0.0, 3.0),
       kind=st.sampled_from(KINDS), centered=st.booleans(), k=st.integers(1, 24))
def test_property_loss_values_match_float64_reference(seed, V, noise, kind, centered, k):
    """Loss VALUES (not only gradients) of both forms equal the independent float64 formulation."""
    theta, logq, tokens, adv = fixture(seed, N=4, V=V, noise=noise)
    k = min(k, V)
    logp = torch.log_softmax(theta, -1)
    want_full = ref_loss64(logp.numpy(), logq.numpy(), tokens.numpy(), adv.numpy(), kind, centered)
    np.testing.assert_allclose(loss_full(logp, logq, tokens, adv, kind, centered).detach().numpy(), want_full,
                               rtol=1e-9, atol=1e-11)
    want_k = _topk_ref(logq, tokens, adv, kind, centered, k, logp)
    np.testing.assert_allclose(loss_topk(logp, logq, tokens, adv, kind, centered, k).detach().numpy(), want_k,
                               rtol=1e-9, atol=1e-11)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 24), noise=st.floats(0.0, 3.0),
       kind=st.sampled_from(KINDS), centered=st.booleans())
def test_property_topk_whole_vocab_equals_full_value_and_grad(seed, V, noise, kind, centered):
    """k = V: the top-k form IS the full form, loss value and gradient."""
    theta, logq, tokens, adv = fixture(seed, N=4, V=V, noise=noise)
    th_k = theta.clone().requires_grad_(True)
    th_f = theta.clone().requires_grad_(True)
    lk = loss_topk(torch.log_softmax(th_k, -1), logq, tokens, adv, kind, centered, V)
    lf = loss_full(torch.log_softmax(th_f, -1), logq, tokens, adv, kind, centered)
    torch.testing.assert_close(lk, lf, rtol=1e-9, atol=1e-10)
    lk.sum().backward()
    lf.sum().backward()
    torch.testing.assert_close(th_k.grad, th_f.grad, rtol=1e-7, atol=1e-10)


def test_topk_value_with_large_alpha_is_the_full_value():
    """A bf16-like sampler whose head holds (almost) all of q's mass makes rho, hence alpha, huge
    (~1e3 and more); the top-k loss value must not carry a spurious alpha * sum_H p log p."""
    theta, _, tokens, adv = fixture(11, N=6, V=12, noise=0.0)
    logp = torch.log_softmax(theta, -1)
    logq = torch.log_softmax(theta.to(torch.bfloat16).double() * 3.0, -1)  # peaked, head mass ~ 1
    k = 12
    for kind in ("pg", "mis"):
        lk = loss_topk(logp, logq, tokens, adv, kind, True, k)
        lf = loss_full(logp, logq, tokens, adv, kind, True)
        torch.testing.assert_close(lk, lf, rtol=1e-7, atol=1e-9)
    # and at k < V with a tiny q tail: value equals the float64 formulation
    for kind in KINDS:
        lk = loss_topk(logp, logq, tokens, adv, kind, True, 8)
        np.testing.assert_allclose(lk.numpy(), _topk_ref(logq, tokens, adv, kind, True, 8, logp), rtol=1e-9, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(3, 16), spread=st.floats(0.0, 200.0),
       kind=st.sampled_from(KINDS), centered=st.booleans(), k=st.integers(1, 16))
def test_property_extreme_ratios_stay_finite_float32(seed, V, spread, kind, centered, k):
    """float32, log p - log q anywhere in [-200, 200]: loss and gradient are finite (both forms), and
    the values match the float64 formulation on the same (float32) inputs."""
    g = torch.Generator().manual_seed(seed)
    theta = (torch.randn(4, V, generator=g) * 10).float()
    delta = (torch.rand(4, V, generator=g) * 2 - 1) * spread
    logq = torch.log_softmax(theta + delta, -1).float()
    tokens = torch.randint(0, V, (4,), generator=g)
    adv = torch.randn(4, generator=g).float()
    k = min(k, V)
    for form in ("full", "topk"):
        th = theta.clone().requires_grad_(True)
        logp = torch.log_softmax(th, -1)
        if form == "full":
            per = loss_full(logp, logq, tokens, adv, kind, centered)
            want = ref_loss64(logp.detach().double().numpy(), logq.double().numpy(), tokens.numpy(),
                              adv.double().numpy(), kind, centered)
        else:
            per = loss_topk(logp, logq, tokens, adv, kind, centered, k)
            want = _topk_ref(logq, tokens, adv, kind, centered, k, logp)
        assert per.dtype == torch.float32
        assert torch.isfinite(per).all(), (form, per)
        per.sum().backward()
        assert torch.isfinite(th.grad).all(), (form, th.grad)
        np.testing.assert_allclose(per.detach().double().numpy(), want, rtol=2e-4, atol=2e-4 * (1 + np.abs(want).max()))


@pytest.mark.parametrize("log_r", [28.9, 25.0, 20.5, -20.5, -25.0, -28.9])
@pytest.mark.parametrize("centered", [False, True])
def test_is_log_ratio_clipped_at_20(log_r, centered):
    """`is`: the sampled token's weight is exp(clip(log r, -20, 20)) as in the reference; at log r = 28.9
    the loss is ~ e^20 |A log p_y| (5e8 scale), not e^28.9 (4e12 scale)."""
    logp = torch.log_softmax(torch.tensor([[0.0, -1.0, -2.0]], dtype=torch.float64), -1)
    logq = logp.clone()
    logq[0, 0] = logp[0, 0] - log_r  # only the sampled token's q moves (q need not be normalised here)
    tokens, adv = torch.tensor([0]), torch.tensor([1.0], dtype=torch.float64)
    w = math.exp(max(min(log_r, 20.0), -20.0))
    got = loss_full(logp, logq, tokens, adv, "is", centered)
    want = ref_loss64(logp.numpy(), logq.numpy(), tokens.numpy(), adv.numpy(), "is", centered)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    if not centered:
        np.testing.assert_allclose(got.numpy(), [-w * float(logp[0, 0])], rtol=1e-12)
    logq_y = logq[:, 0]
    got_k = L.token_loss_topk(logp, logq_y, torch.tensor([[1]]), logq[:, 1:2], tokens, adv, "is", False)
    np.testing.assert_allclose(got_k.numpy(), [-w * float(logp[0, 0])], rtol=1e-12)
    assert float(L.importance_weight("is", torch.tensor([math.exp(log_r)], dtype=torch.float64))) == \
        pytest.approx(w, rel=1e-12)


def test_is_full_centring_no_nan_repro():
    """Issue 14 repro: log p - log q > 88 underflows q and overflows r in float32 (0 * inf = nan)."""
    z = torch.tensor([[-1e-3, -7.0, -95.0]], requires_grad=True)
    lq = torch.tensor([[-1e-3, -7.0, -190.0]])
    loss = L.token_loss_full(z.log_softmax(-1), lq, torch.tensor([0]), torch.tensor([1.0]), "is", True).sum()
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(z.grad).all()
    want = ref_loss64(z.detach().double().log_softmax(-1).numpy(), lq.double().numpy(), [0], [1.0], "is", True)
    np.testing.assert_allclose(float(loss.detach()), want[0], rtol=1e-5)
    # the w = r identity survives: centred and uncentred gradients agree
    z2 = z.detach().clone().requires_grad_(True)
    L.token_loss_full(z2.log_softmax(-1), lq, torch.tensor([0]), torch.tensor([1.0]), "is", False).sum().backward()
    torch.testing.assert_close(z.grad, z2.grad, rtol=1e-5, atol=1e-7)
    for kind in ("pg", "tis", "mis"):
        z3 = z.detach().clone().requires_grad_(True)
        l3 = L.token_loss_full(z3.log_softmax(-1), lq, torch.tensor([0]), torch.tensor([1.0]), kind, True).sum()
        l3.backward()
        assert torch.isfinite(l3) and torch.isfinite(z3.grad).all()
        assert torch.isfinite(L.centring_logit_l1(z.detach().log_softmax(-1), kind, sampler_logp=lq)).all()
