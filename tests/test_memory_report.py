"""`spectrum-rft memory-report`: the verdict rule on run directories whose numbers are known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from spectrum_rft.training.spectrum import memory_report as M


def run_dir(path: Path, mode: str, seed: int, carry: list[float], gain: list[float],
            echo: list[float] | None = None) -> Path:
    path.mkdir(parents=True)
    arm = {"scaffold": "weak-scaffold", "scrambled": "weak-scrambled"}[mode]
    (path / "config.json").write_text(json.dumps({"arm": arm, "memory_mode": mode, "seed": seed}))
    echo = echo or carry
    lines, metrics = [], []
    for step, (c, g, e) in enumerate(zip(carry, gain, echo)):
        for k in range(4):
            lines.append({"step": step, "row_id": f"r{step}", "scan": 3 + k, "reward": 0.15 + g,
                          "gain_vs_memoryless": g, "carry_rate": c, "echo_copy": e, "scans_skipped": 0,
                          "late_mean": None if k < 2 else 0.15 + g})
        # a skipped report: in the format's curves, never in gain_valid / echo_copy
        lines.append({"step": step, "row_id": f"r{step}", "scan": 2, "reward": 0.0, "gain_vs_memoryless": -0.15,
                      "carry_rate": 0.0, "echo_copy": 0.0, "scans_skipped": 1, "late_mean": None})
        metrics.append({"step": step + 1, "reward": 0.15 + g, "frac_reward_zero_std": 0.5, "tools/call_frequency": 1.0})
    (path / "rollouts.jsonl").write_text("\n".join(map(json.dumps, lines)))
    (path / "metrics.jsonl").write_text("\n".join(map(json.dumps, metrics)))
    return path


def ramp(a: float, b: float, n: int = 9) -> list[float]:
    return [a + (b - a) * i / (n - 1) for i in range(n)]


def arms(tmp_path: Path, real_gain_end: list[float], real_echo_end: list[float], ctrl_gain_end: list[float]):
    runs = [run_dir(tmp_path / f"sc{s}", "scaffold", s, ramp(0.1, 0.1), ramp(0.0, g), ramp(0.2, e))
            for s, (g, e) in enumerate(zip(real_gain_end, real_echo_end))]
    runs += [run_dir(tmp_path / f"scr{s}", "scrambled", s, ramp(0.0, 0.0), ramp(0.0, g), ramp(0.2, 0.2))
             for s, g in enumerate(ctrl_gain_end)]
    return runs


def expected_delta(end: float, n: int = 9) -> float:
    xs = ramp(0.0, end, n)
    return sum(xs[-3:]) / 3 - sum(xs[:3]) / 3


@pytest.mark.parametrize("real_gain,real_echo,ctrl_gain,expected", [
    ([0.10, 0.12, 0.11], [0.5, 0.6, 0.4], [0.0, 0.01, -0.01], "learned"),
    ([0.10, 0.12, 0.11], [0.5, 0.1, 0.4], [0.0, 0.01, -0.01], "inconclusive"),  # echo_copy falls in seed 1
    ([0.02, -0.05, 0.08], [0.5, 0.6, 0.4], [0.0, 0.01, -0.01], "not learned"),  # within the seeds' noise
    ([-0.02, -0.01, -0.03], [0.5, 0.6, 0.4], [0.0, 0.01, 0.0], "not learned"),  # below the control
])
def test_pre_registered_verdict(tmp_path, capsys, real_gain, real_echo, ctrl_gain, expected):
    runs = arms(tmp_path, real_gain, real_echo, ctrl_gain)
    assert M.main([*map(str, runs), "--png", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert f"verdict: {expected.upper()} (" in out
    assert (tmp_path / "c.png").stat().st_size > 10_000
    v = M.verdict([M.load_run(r) for r in runs[:3]], [M.load_run(r) for r in runs[3:]])
    diffs = [expected_delta(g) - expected_delta(c) for g, c in zip(real_gain, ctrl_gain)]
    d = sum(diffs) / 3
    se = math.sqrt(sum((x - d) ** 2 for x in diffs) / 2) / math.sqrt(3)
    assert v["d"] == pytest.approx(d) and v["se"] == pytest.approx(se)
    assert v["verdict"] == expected
    assert f"d = {d:+.4f}" in out


def test_curves_exclude_skipped_reports_from_gain_and_echo(tmp_path):
    run = M.load_run(run_dir(tmp_path / "a", "scaffold", 0, ramp(0.1, 0.5), ramp(0.0, 0.1), ramp(0.3, 0.9)))
    assert run.steps == list(range(9)) and run.zero_std == [0.5] * 9
    assert run.curves["gain_valid"] == pytest.approx(ramp(0.0, 0.1))
    assert run.curves["echo_copy"] == pytest.approx(ramp(0.3, 0.9))
    assert run.curves["valid"] == pytest.approx([0.8] * 9)
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
    assert v["verdict"] == "inconclusive" and "needs >= 2 seeds" in v["why"]


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


def test_group_signal_measures_what_the_advantages_rewarded():
    """Within a group, reward = 0.1 + 0.5 * echo_copy among valid reports: the slope is 0.5 in every group;
    one invalid report per group scores 0, and its part of the within-group sum of squares is computed."""
    rollouts = []
    for step in range(3):
        for e in [0.0, 0.25, 0.5, 1.0]:
            rollouts.append({"step": step, "row_id": "r", "reward": 0.1 + 0.5 * e, "echo_copy": e, "scans_skipped": 0})
        rollouts.append({"step": step, "row_id": "r", "reward": 0.0, "echo_copy": None, "scans_skipped": 1})
    g = M.group_signal(rollouts)
    assert g["groups"] == 3 and g["echo_slope_groups"] == 3
    assert g["echo_slope"] == pytest.approx(0.5) and g["echo_slope_se"] == pytest.approx(0.0, abs=1e-12)
    rw = [0.1 + 0.5 * e for e in [0.0, 0.25, 0.5, 1.0]] + [0.0]
    m = sum(rw) / 5
    ss = sum((x - m) ** 2 for x in rw)
    ss_format = 4 * (sum(rw[:4]) / 4 - m) ** 2 + (0.0 - m) ** 2
    assert g["format_share"] == pytest.approx(ss_format / ss)
    assert g["reward_sd"] == pytest.approx(math.sqrt(ss / 5))
    # a group whose rewards are all equal carries no signal: no slope, share undefined
    flat = M.group_signal([{"step": 0, "row_id": "r", "reward": 0.2, "echo_copy": 0.5, "scans_skipped": 0}] * 4)
    assert flat["format_share"] is None and flat["echo_slope"] is None and flat["reward_sd"] == 0.0
