"""The learner's shared prefix (spectrum_rft.training.sc_grpo.completion_logits, ``train --shared-prefix``):
running each distinct prompt once and sharing its KV cache with the group's completions gives the full
forward's logits, and through the trainer the same loss and gradient as TRL's own GRPO loss, LoRA
included, with fewer tokens run."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from hypothesis import given, settings, strategies as st  # noqa: E402

from spectrum_rft.training.sc_grpo import completion_logits, loss_and_gradient, probe_trainer  # noqa: E402

V = 40


def tiny_llama(layers: int = 2, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                        num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=1,
                                        bos_token_id=1)).float()


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(["<pad>", "<eos>", *"abcdefghijklmnopqrstuvwxyz0123456789 ."])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")


def grpo_batch(prompt_lens: list[int], group: int, T: int, seed: int, ends: list[int] | None = None,
               shuffle: bool = True) -> dict:
    """TRL's layout: one prompt per group (repeated), prompts left-padded to the widest, completions
    right-padded (``ends``: each completion's length), rows shuffled as TRL shuffles a generation batch."""
    g = torch.Generator().manual_seed(seed)
    P = max(prompt_lens)
    rows, pmask = [], []
    for n in prompt_lens:
        p = torch.randint(2, V, (n,), generator=g)
        for _ in range(group):
            rows.append(torch.cat([torch.zeros(P - n, dtype=torch.long), p]))
            pmask.append(torch.cat([torch.zeros(P - n, dtype=torch.long), torch.ones(n, dtype=torch.long)]))
    B = len(rows)
    comp = torch.randint(2, V, (B, T), generator=g)
    cmask = torch.ones(B, T, dtype=torch.long)
    for i, e in enumerate(ends or []):
        cmask[i, e:] = 0
        comp[i, e:] = 0  # pad token
    order = torch.randperm(B, generator=g) if shuffle else torch.arange(B)
    adv = torch.randn(B, generator=g)
    return {"prompt_ids": torch.stack(rows)[order], "prompt_mask": torch.stack(pmask)[order],
            "completion_ids": comp[order], "completion_mask": cmask[order], "advantages": adv[order],
            "num_items_in_batch": cmask.sum()}


def _logits(model, b, shared):
    with torch.no_grad():
        return completion_logits(model, b["prompt_ids"], b["prompt_mask"], b["completion_ids"], b["completion_mask"],
                                 shared_prefix=shared)


def test_shared_prefix_gives_the_full_forwards_logits_with_fewer_tokens():
    model = tiny_llama().eval()
    b = grpo_batch([7, 4, 9], group=3, T=5, seed=1, ends=[5, 2, 5, 1, 5, 3, 5, 5, 4])
    full, ran_full = _logits(model, b, False)
    shared, ran_shared = _logits(model, b, True)
    m = b["completion_mask"].bool()
    assert full.shape == shared.shape == (9, 5, V)
    torch.testing.assert_close(shared[m], full[m], atol=2e-5, rtol=1e-5)
    # each prompt once (20 tokens) + every completion token but its last (the last predicts nothing)
    assert ran_shared == 7 + 4 + 9 + int((b["completion_mask"][:, :-1]).sum())
    assert ran_full == int(b["prompt_mask"].sum() + b["completion_mask"].sum()) > ran_shared


def test_a_one_token_completion_and_a_single_row_group():
    model = tiny_llama().eval()
    b = grpo_batch([3, 6], group=1, T=1, seed=2)
    full, _ = _logits(model, b, False)
    shared, _ = _logits(model, b, True)
    torch.testing.assert_close(shared, full, atol=2e-5, rtol=1e-5)


def test_an_empty_prompt_is_refused_with_the_reason():
    model = tiny_llama().eval()
    b = grpo_batch([3], group=2, T=2, seed=3)
    b["prompt_mask"][:] = 0
    with pytest.raises(ValueError, match="empty prompt"):
        _logits(model, b, True)


@settings(max_examples=25, deadline=None)
@given(prompt_lens=st.lists(st.integers(1, 12), min_size=1, max_size=3), group=st.integers(1, 4),
       T=st.integers(1, 6), seed=st.integers(0, 10_000), data=st.data())
def test_property_shared_equals_full_at_every_real_token(prompt_lens, group, T, seed, data):
    model = _MODEL
    B = len(prompt_lens) * group
    ends = data.draw(st.lists(st.integers(1, T), min_size=B, max_size=B))
    b = grpo_batch(prompt_lens, group, T, seed, ends=ends)
    m = b["completion_mask"].bool()
    full, _ = _logits(model, b, False)
    shared, _ = _logits(model, b, True)
    torch.testing.assert_close(shared[m], full[m], atol=3e-5, rtol=1e-5)


_MODEL = tiny_llama(layers=1, seed=5).eval()


@pytest.mark.parametrize("lora", [False, True])
def test_loss_and_gradient_equal_trls_own_grpo_loss(tmp_path, tok, lora):
    """The trainer with --shared-prefix follows exactly the gradient of TRL's GRPOTrainer (dapo, on-policy). The
    loss values differ by design: TRL's is -A * ratio (= -A on-policy), ours -A * log p(y), same gradient."""
    model = tiny_llama(seed=7)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False,
                                                 target_modules=["q_proj", "v_proj", "up_proj"], layers_to_transform=[1]))
    b = grpo_batch([6, 10], group=4, T=5, seed=4, ends=[5, 3, 5, 5, 1, 4, 5, 2])
    trl_trainer = probe_trainer(model, tok, str(tmp_path / "trl"), temperature=0.7, trl_loss=True)
    ours = probe_trainer(model, tok, str(tmp_path / "ours"), temperature=0.7, loss_kind="pg", shared_prefix=True)
    loss_trl, g_trl = loss_and_gradient(trl_trainer, model, b)
    loss_ours, g_ours = loss_and_gradient(ours, model, b)
    assert g_trl.abs().sum() > 0
    m = b["completion_mask"].bool()
    assert abs(loss_trl - float(-(b["advantages"].unsqueeze(1).expand_as(m)[m]).sum() / m.sum())) < 1e-5
    assert loss_ours != pytest.approx(loss_trl)
    torch.testing.assert_close(g_ours, g_trl, atol=1e-5, rtol=1e-4)
    if lora:  # only the adapter trains, and the prompt's activations carry gradient into it
        assert all(("lora_" in n) == p.requires_grad for n, p in model.named_parameters())
    assert ours.loss_stats["learner_tokens"] == 6 + 10 + int(b["completion_mask"][:, :-1].sum())
