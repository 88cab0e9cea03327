"""train-report on synthetic run directories: per-seed and per-arm numbers, the card's verdict, and the
refusal to compare runs scored by different evaluators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spectrum_rft.training.gsm8k import report as R


def make_run(root: Path, name: str, arm: str, seed: int, scores: list[float], evaluator: str = "e" * 64,
             manifest: str = "m" * 64) -> Path:
    d = root / name
    (d / "eval").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"arm": arm, "seed": seed}))
    (d / "code_revision.json").write_text("{}")
    (d / "evaluator.json").write_text(json.dumps({"evaluator_id": evaluator}))
    (d / "items.json").write_text(json.dumps({"eval_manifest_sha256": manifest}))
    evals, metrics = [], []
    for i, s in enumerate(scores):
        step = 10 * i
        (d / "eval" / f"step_{step:04d}.jsonl").write_text("{}\n")
        evals.append({"step": step, "metric": "accuracy", "score": s, "evaluator_id": evaluator,
                      "predictions": f"eval/step_{step:04d}.jsonl"})
        if step:
            metrics.append({"step": step, "reward": s, "loss": 0.1, "grad_norm": 0.02, "logprob_gap": 0.01,
                            "entropy": 1.0, "centring_l1": 0.05, "step_time": 1.5})
    (d / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return d


def test_validated_over_two_seeds(tmp_path, capsys):
    runs = [
        make_run(tmp_path, "b0", "pg", 0, [0.60, 0.70, 0.64]),  # drop 6
        make_run(tmp_path, "b1", "pg", 1, [0.60, 0.68, 0.62]),  # drop 6
        make_run(tmp_path, "t0", "pg+sc", 0, [0.60, 0.66, 0.65]),  # drop 1
        make_run(tmp_path, "t1", "pg+sc", 1, [0.60, 0.64, 0.63]),  # drop 1
    ]
    assert R.main([str(r) for r in runs] + ["--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "verdict pg+sc vs pg: VALIDATED" in out
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    arms = rep["summary"]["arms"]
    assert arms["pg"]["drop"] == pytest.approx(6.0) and arms["pg+sc"]["drop"] == pytest.approx(1.0)
    assert arms["pg"]["final"] == pytest.approx(63.0) and arms["pg+sc"]["seeds"] == [0, 1]
    assert (tmp_path / "rep" / "eval_score.png").is_file()


def test_failed_when_drops_are_close_and_single_seed_noted(tmp_path, capsys):
    runs = [make_run(tmp_path, "b", "tis-top32", 0, [0.5, 0.52, 0.50]),
            make_run(tmp_path, "t", "tis+sc-top32", 0, [0.5, 0.53, 0.52])]
    assert R.main([str(r) for r in runs] + ["--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "verdict tis+sc-top32 vs tis-top32: FAILED" in out
    assert "1 seed(s) per arm" in out


def test_different_evaluators_are_not_compared(tmp_path, capsys):
    runs = [make_run(tmp_path, "b", "pg", 0, [0.6, 0.7, 0.6]),
            make_run(tmp_path, "t", "pg+sc", 0, [0.6, 0.7, 0.7], evaluator="f" * 64)]
    assert R.main([str(r) for r in runs] + ["--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "NOT COMPARABLE" in out and "different evaluator identities" in out


def test_missing_predictions_are_flagged(tmp_path, capsys):
    d = make_run(tmp_path, "b", "pg", 0, [0.6, 0.7])
    (d / "eval" / "step_0010.jsonl").unlink()
    assert R.main([str(d), "--no-plots"]) == 0
    assert "predictions file missing" in capsys.readouterr().out


def test_not_a_run_dir(tmp_path, capsys):
    assert R.main([str(tmp_path), "--no-plots"]) == 2


def test_no_learning_signal_is_inconclusive(tmp_path, capsys):
    runs = [make_run(tmp_path, "b", "pg", 0, [0.0, 0.0]), make_run(tmp_path, "t", "pg+sc", 0, [0.0, 0.0])]
    for r in runs:
        lines = [dict(json.loads(x), n_trained_tokens=0, grad_norm=0.0)
                 for x in (r / "metrics.jsonl").read_text().splitlines()]
        (r / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    assert R.main([str(r) for r in runs] + ["--no-plots"]) == 0
    assert "INCONCLUSIVE (no learning signal" in capsys.readouterr().out
