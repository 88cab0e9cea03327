"""`spectrum-rft memory-report`: the verdict rule on run directories whose numbers are known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spectrum_rft.training import memory_report as M


def run_dir(path: Path, mode: str, seed: int, carry: list[float], gain: list[float]) -> Path:
    path.mkdir(parents=True)
    arm = {"scaffold": "weak-scaffold", "scrambled": "weak-scrambled"}[mode]
    (path / "config.json").write_text(json.dumps({"arm": arm, "memory_mode": mode, "seed": seed}))
    lines, metrics = [], []
    for step, (c, g) in enumerate(zip(carry, gain)):
        for k in range(4):
            lines.append({"step": step, "row_id": f"r{step}", "scan": 3 + k, "reward": 0.15 + g,
                          "gain_vs_memoryless": g, "carry_rate": c, "scans_skipped": 0,
                          "late_mean": None if k < 2 else 0.15 + g})
        metrics.append({"step": step + 1, "reward": 0.15 + g, "frac_reward_zero_std": 0.5, "tools/call_frequency": 1.0})
    (path / "rollouts.jsonl").write_text("\n".join(map(json.dumps, lines)))
    (path / "metrics.jsonl").write_text("\n".join(map(json.dumps, metrics)))
    return path


def ramp(a: float, b: float, n: int = 9) -> list[float]:
    return [a + (b - a) * i / (n - 1) for i in range(n)]


@pytest.mark.parametrize("real_end,expected", [(0.6, "learned"), (0.02, "not learned")])
def test_verdict(tmp_path, capsys, real_end, expected):
    runs = [run_dir(tmp_path / f"sc{s}", "scaffold", s, ramp(0.1, real_end + 0.02 * s), ramp(0.0, real_end / 4))
            for s in (0, 1)]
    runs += [run_dir(tmp_path / f"scr{s}", "scrambled", s, ramp(0.1, 0.1 + 0.03 * s), ramp(0.0, 0.01 * s))
             for s in (0, 1)]
    assert M.main([*map(str, runs), "--png", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert f"verdict: {expected.upper()}" in out
    assert (tmp_path / "c.png").stat().st_size > 10_000
    run = M.load_run(runs[0])
    assert run.steps == list(range(9)) and run.zero_std == [0.5] * 9
    carry = run.curves["carry_rate"]
    assert M.change(run, "carry_rate") == pytest.approx(sum(carry[-3:]) / 3 - sum(carry[:3]) / 3)
    assert run.curves["late_score"][0] == pytest.approx(0.15)


def test_one_arm_only_is_inconclusive(tmp_path, capsys):
    r = run_dir(tmp_path / "a", "scaffold", 0, ramp(0.1, 0.5), ramp(0.0, 0.1))
    assert M.main([str(r), "--png", "", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["verdict"] == "inconclusive"
    assert M.main([str(tmp_path / "missing")]) == 2


def test_one_seed_per_arm_is_inconclusive_however_large_the_difference(tmp_path, capsys):
    real = run_dir(tmp_path / "a", "scaffold", 0, ramp(0.1, 0.9), ramp(0.0, 0.3))
    ctrl = run_dir(tmp_path / "b", "scrambled", 0, ramp(0.1, 0.1), ramp(0.0, 0.0))
    assert M.main([str(real), str(ctrl), "--png", "", "--json"]) == 0
    v = json.loads(capsys.readouterr().out)["verdict"]
    assert v["verdict"] == "inconclusive" and "needs >= 2 seeds" in v["metrics"]["carry_rate"]["why"]


def test_heldout_table_names_each_model(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"rows": 2, "models": {"openai/spectrum-hf": {"score": 0.14, "scans_skipped_total": 1,
                                                                          "scans_total": 24}}}))
    two = tmp_path / "two.json"
    two.write_text(json.dumps({"rows": 2, "models": {"spectrum/memoryless": {"score": 0.15},
                                                     "spectrum/accumulate": {"score": 0.53}}}))
    rows = M.heldout_table([f"sft={one}", f"base={two}"])
    assert [(r["name"], r["score"], r["rows"]) for r in rows] == [
        ("sft", 0.14, 2), ("base:memoryless", 0.15, 2), ("base:accumulate", 0.53, 2)]
    assert rows[0]["scans_skipped_total"] == 1
