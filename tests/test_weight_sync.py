"""What colocated vLLM is handed at each weight sync on a CPU (``trl_common.merged_weights``): the LoRA-merged
weights under the base model's checkpoint names, the training model left as it was. (The sync itself, vLLM's
in-place reload, runs in tests_vllm/, where vLLM is installed.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).float().eval()


@pytest.mark.parametrize("top_layers", [0, 1])
def test_merged_weights_are_the_merged_model_under_checkpoint_names(top_layers):
    from spectrum_rft.training.trl_common import lora_config, merged_weights

    base = _tiny_llama()
    names = [n for n, _ in base.named_parameters()]
    model = peft.get_peft_model(base, lora_config(4, 8, top_layers=top_layers, n_layers=2))
    with torch.no_grad():  # a trained adapter: B is zero at init, which would make any merge look right
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        logits = model(ids).logits

    got = merged_weights(model)

    assert [n for n, _ in got] == names  # what vLLM's load_weights reads: the base checkpoint's names, in order
    # left unmerged as it was (to float32 round-off: peft adds the LoRA product in and subtracts it, as TRL's sync does)
    assert all(torch.allclose(p, before[n], atol=1e-6) for n, p in model.named_parameters())
    plain = _tiny_llama()
    plain.load_state_dict(dict(got), strict=False)
    plain.tie_weights()
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, logits, atol=1e-5)  # the merged weights are the trained policy
        assert not torch.allclose(_tiny_llama()(ids).logits, logits, atol=1e-3)  # and not the base model's


def test_merged_weights_of_a_plain_model_are_its_parameters():
    from spectrum_rft.training.trl_common import merged_weights

    model = _tiny_llama()
    got = merged_weights(model)
    assert [(n, p.data_ptr()) for n, p in got] == [(n, p.data_ptr()) for n, p in model.named_parameters()]
