"""The whole-episode rule of evidence v4 (``memory-report --whole-*``, ``episode_verdict``): eval folders whose
numbers are known, the bootstrap SE's properties, and the checks that refuse a verdict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectrum_rft.training.spectrum import episode_verdict as V
from spectrum_rft.training.spectrum import memory_report as M


def eval_dir(path: Path, values: list[float], skipped: int = 0, mode: str = "scaffold", prefix: str = "held") -> str:
    """A ``spectrum-rft eval`` folder of one model: band i has beyond_current ``values[i]``; the first
    ``skipped`` bands skipped 3 of their 12 scans."""
    path.mkdir(parents=True)
    rows = [{"input_metadata": {"row_id": f"{prefix}-r{i:04d}"},
             "execution_metadata": {"extra": {"spectrum": {
                 "band_fingerprint": f"fp-{prefix}-{i}", "beyond_current": v, "dormant_recall": 0.2, "memory_gain": 0.01,
                 "n_scans": 12, "scans_skipped": 3 if i < skipped else 0, "per_scan_reward": [0.1] * 12}}}}
            for i, v in enumerate(values)]
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "summary.json").write_text(json.dumps({"memory_mode": mode, "models": {"openai/ckpt": {}}}))
    return str(path)


def arms(tmp_path: Path, warm: np.ndarray, real: list[np.ndarray], control: list[np.ndarray], **kw) -> dict:
    w = eval_dir(tmp_path / "warm", list(warm))
    r = [f"{s}={eval_dir(tmp_path / f'real{s}', list(v), **kw)}" for s, v in enumerate(real)]
    c = [f"{s}={eval_dir(tmp_path / f'ctrl{s}', list(v))}" for s, v in enumerate(control)]
    return V.judge(w, r, c)


rng = np.random.default_rng(7)
WARM = rng.normal(0.05, 0.05, 24)


def test_a_real_gain_over_warm_start_and_control_is_learned(tmp_path):
    v = arms(tmp_path, WARM, [WARM + 0.06 + rng.normal(0, 0.01, 24) for _ in range(3)], [WARM] * 3)
    assert v["verdict"] == "learned", v["why"]
    assert v["u"] == pytest.approx(0.06, abs=0.01) and v["u"] > 2 * v["se_u"] and v["d"] > 2 * v["se_d"]


def test_no_gain_over_the_warm_start_is_not_learned_even_when_the_control_falls(tmp_path):
    """Section 11's lesson: a control that unlearns makes d large; u alone says whether the real arm gained."""
    v = arms(tmp_path, WARM, [WARM + rng.normal(0, 0.01, 24) for _ in range(3)], [WARM - 0.1] * 3)
    assert v["d"] > 2 * v["se_d"] and v["verdict"] == "not learned", v["why"]


def test_seeds_that_share_their_bands_noise_are_not_three_samples(tmp_path):
    """The three seeds move together band by band (one shared effect per band, mean +0.03, sd 0.2): the bootstrap
    over bands keeps them together and finds no effect; the seeds' own spread (0) would have called it one."""
    shared = rng.normal(0, 0.2, 24)
    shared += 0.03 - shared.mean()
    v = arms(tmp_path, WARM, [WARM + shared] * 3, [WARM - 0.2] * 3)
    assert v["u"] == pytest.approx(0.03) and v["u"] <= 2 * v["se_u"] and v["verdict"] == "not learned"


def test_a_real_checkpoint_that_reports_too_few_scans_cannot_be_learned(tmp_path):
    v = arms(tmp_path, WARM, [WARM + 0.06] * 3, [WARM] * 3, skipped=3)  # 9 of 288 scans skipped: 96.9 % ok
    assert v["verdict"] == "learned"
    v = arms(tmp_path / "b", WARM, [WARM + 0.06] * 3, [WARM] * 3, skipped=5)  # 15/288 skipped: 94.8 %
    assert v["reported"]["real s0"] == pytest.approx(1 - 15 / 288) and v["verdict"] == "inconclusive"
    v = arms(tmp_path / "c", WARM, [WARM] * 3, [WARM] * 3, skipped=5)  # no gain, but a checkpoint under 95 %
    assert v["verdict"] == "inconclusive"


def test_too_few_bands_or_seeds_is_inconclusive(tmp_path):
    assert arms(tmp_path, WARM[:23], [WARM[:23] + 0.1] * 3, [WARM[:23]] * 3)["verdict"] == "inconclusive"
    v = arms(tmp_path / "b", WARM, [WARM + 0.1] * 2, [WARM] * 3)
    assert v["verdict"] == "inconclusive" and "2 real" in v["why"] and "u" not in v
    # the numbers so far are shown, labelled provisional, never as the rule's
    assert v["provisional"]["u"] == pytest.approx(0.1) and v["provisional"]["d"] == pytest.approx(0.1)
    assert v["provisional"]["se_u"] == pytest.approx(0, abs=1e-9)
    line = [x for x in V.format_verdict(v) if "provisional" in x]
    assert len(line) == 1 and "u = +0.1000" in line[0] and "d = +0.1000" in line[0]
    assert "provisional" not in arms(tmp_path / "c", WARM, [WARM + 0.1] * 3, [WARM] * 3)


def test_folders_the_rule_cannot_judge_are_refused_in_one_line(tmp_path):
    w = eval_dir(tmp_path / "warm", list(WARM))
    other = eval_dir(tmp_path / "other", list(WARM), prefix="elsewhere")
    with pytest.raises(V.VerdictInputError, match="its bands differ"):
        V.judge(w, [f"0={other}"], [f"0={w}"])
    grammarless = eval_dir(tmp_path / "none", list(WARM), mode="none")
    with pytest.raises(V.VerdictInputError, match="memory mode 'none'"):
        V.judge(w, [f"0={grammarless}"], [])
    with pytest.raises(V.VerdictInputError, match="expects SEED=PATH"):
        V.judge(w, [w], [])
    # a held-out band a training run played: refused
    run = tmp_path / "run"
    run.mkdir()
    (run / "rollouts.jsonl").write_text(json.dumps({"band_fingerprint": "fp-held-5", "step": 1}) + "\n")
    with pytest.raises(V.VerdictInputError, match="1 held-out band\\(s\\) were played in training or SFT"):
        V.judge(w, [f"0={w}"], [f"0={w}"], exclude=[str(run)])


def test_dataset_files_are_fingerprinted_by_their_rows_seed_rule(tmp_path):
    from spectrum_rft.rollouts.dataset import make_rows, write_jsonl
    from spectrum_rft.task.environment import env_for_row

    rows = make_rows(3, prefix="sft")
    path = write_jsonl(rows, tmp_path / "sft.jsonl")
    env, seed = env_for_row(rows[1]["id"], {"environment_context": rows[1]["environment_context"]})
    env.reset(seed)
    assert env.metrics()["band_fingerprint"] in V.seen_fingerprints([path])
    assert len(V.seen_fingerprints([path])) == 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.floats(-1, 1), min_size=2, max_size=40), st.floats(0.1, 10))
def test_bootstrap_se_scales_with_the_values_and_ignores_a_shift(values, k):
    x = np.asarray(values)
    se = V.bootstrap_se(x)
    assert se == pytest.approx(V.bootstrap_se(x + 3.0), abs=1e-9)  # a shift of every band changes nothing
    assert V.bootstrap_se(k * x) == pytest.approx(k * se, rel=1e-9, abs=1e-12)
    assert V.bootstrap_se(np.full(len(values), 0.7)) == pytest.approx(0.0, abs=1e-12)


def test_bootstrap_se_is_the_standard_error_for_many_bands():
    x = np.random.default_rng(3).normal(0, 1, 400)
    assert V.bootstrap_se(x) == pytest.approx(x.std(ddof=1) / np.sqrt(len(x)), rel=0.05)


def test_memory_report_prints_the_whole_episode_verdict(tmp_path, capsys):
    w = eval_dir(tmp_path / "warm", list(WARM))
    real = [f"{s}={eval_dir(tmp_path / f'r{s}', list(WARM + 0.06))}" for s in range(3)]
    ctrl = [f"{s}={eval_dir(tmp_path / f'c{s}', list(WARM))}" for s in range(3)]
    argv = ["--whole-warm", w, *sum((["--whole-real", x] for x in real), []),
            *sum((["--whole-control", x] for x in ctrl), [])]
    assert M.main(argv) == 0
    out = capsys.readouterr().out
    assert "whole-episode rule (pre-registered, issue 40)" in out and "verdict: LEARNED" in out
    assert "u = +0.0600 (SE 0.0000)" in out and "24 held-out bands" in out
    assert M.main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["whole"]["verdict"] == "learned"
    assert M.main(["--whole-warm", str(tmp_path / "missing")]) == 2
    assert "not a finished spectrum-rft eval folder" in capsys.readouterr().err


def test_the_power_check_says_what_the_rule_can_detect_before_any_run(tmp_path, capsys):
    """``memory-report --whole-warm W --whole-perfect P`` (issue 40 item 5): a checkpoint that realises a share f
    of perfect use is found (u > 2 SE with 80 % power) from the f where f x allowed = 2.84 SE(u), SE(u)^2 =
    (f^2 sd(p - w)^2 + 2 sd(w)^2) / bands; a constant shift of the warm start moves nothing but what is allowed;
    more bands find a smaller share."""
    gain = 0.3 + rng.normal(0, 0.1, 24)
    w = eval_dir(tmp_path / "warm", list(WARM))
    p = eval_dir(tmp_path / "perfect", list(WARM + gain))
    pc = V.power_check(V.load_episodes(w), V.load_episodes(p))
    sd_w, sd_pw = float(np.std(WARM, ddof=1)), float(np.std(gain, ddof=1))
    assert pc["bands"] == 24 and pc["warm_sd"] == pytest.approx(sd_w) and pc["perfect_sd"] == pytest.approx(sd_pw)
    f, allowed = pc["detectable_share"], pc["allowed"]
    assert allowed == pytest.approx(gain.mean())
    se = np.sqrt(f ** 2 * sd_pw ** 2 + 2 * sd_w ** 2) / np.sqrt(24)
    assert f * allowed == pytest.approx(2.84 * se) and pc["se_u_at_share"] == pytest.approx(se)
    need = pc["bands_for_a_tenth"]  # the bands at which f = 0.1 is just found
    assert 0.1 * allowed >= 2.84 * np.sqrt((0.01 * sd_pw ** 2 + 2 * sd_w ** 2) / need)
    assert 0.1 * allowed < 2.84 * np.sqrt((0.01 * sd_pw ** 2 + 2 * sd_w ** 2) / (need - 1))
    shifted = V.power_check(V.load_episodes(eval_dir(tmp_path / "warm2", list(WARM + 0.1))), V.load_episodes(p))
    assert shifted["warm_sd"] == pytest.approx(sd_w) and shifted["allowed"] == pytest.approx(allowed - 0.1)
    more = V.power_check(V.load_episodes(eval_dir(tmp_path / "w96", list(np.tile(WARM, 4)), prefix="m")),
                         V.load_episodes(eval_dir(tmp_path / "p96", list(np.tile(WARM + gain, 4)), prefix="m")))
    assert more["detectable_share"] < f
    assert M.main(["--whole-warm", w, "--whole-perfect", p]) == 0
    out = capsys.readouterr().out
    assert "power check (before any run): 24 bands" in out and "is found (u > 2 SE, 80 % power) from f =" in out
    noise = V.power_check(V.load_episodes(w), V.load_episodes(eval_dir(tmp_path / "noise", list(WARM + rng.normal(0, 1, 24)))))
    assert noise["detectable_share"] is None or noise["detectable_share"] > f
    other = eval_dir(tmp_path / "elsewhere", list(WARM[:20]), prefix="other")
    assert M.main(["--whole-warm", w, "--whole-perfect", other]) == 2
    assert "bands differ" in capsys.readouterr().err
