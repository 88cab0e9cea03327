"""The environment: determinism, band constraints, scan statistics, memory modes, bad actions."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.task.environment import (
    EnvConfig,
    NUDGE,
    InvalidAction,
    SpectrumEnv,
    get_preset,
    parse_report,
    seed_for_row,
    tool_schemas,
)

ROOT = Path(__file__).resolve().parent.parent
seeds = st.integers(min_value=0, max_value=2**63 - 1)


def play(env, seed, reports):
    obs, _ = env.reset(seed)
    prompts = [obs["prompt"]]
    for r in reports:
        obs, *_ = env.step(r)
        prompts.append(obs["prompt"])
    return prompts


def test_seed_for_row_is_stable_and_salted():
    assert seed_for_row("row-1") == seed_for_row("row-1")
    assert seed_for_row("row-1") != seed_for_row("row-2")
    assert seed_for_row("row-1", "e1") != seed_for_row("row-1")
    assert 0 <= seed_for_row("x") < 2**63


def test_same_row_identical_across_processes_with_different_hashseeds():
    code = (
        "import json; from spectrum_adapter import *; from spectrum_rft.baselines.audit import run_episode\n"
        "env = SpectrumEnv(EnvConfig(memory_mode='scrambled'))\n"
        "obs, _ = env.reset(seed_for_row('row-7', 'salt'))\n"
        "ps = [obs['prompt']]\n"
        "while not env.done:\n"
        "    obs, *_ = env.step({'center_freqs': [100.0, 200.0]}); ps.append(obs['prompt'])\n"
        "print(json.dumps({'prompts': ps, 'truth': env.truth(), 'fp': env.metrics()['band_fingerprint']}))\n"
    )
    outs = []
    for hs in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hs}
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        outs.append(json.loads(r.stdout))
    assert outs[0] == outs[1]
    assert len(outs[0]["prompts"]) == 13


def test_different_rows_differ():
    env = SpectrumEnv(EnvConfig())
    fps, episodes = set(), set()
    for i in range(50):
        env.reset(seed_for_row(f"r{i}"))
        fps.add(env.metrics()["band_fingerprint"])
        episodes.add(tuple(env.render_scan(k) for k in range(env.n_scans)))
    assert len(fps) == 50 and len(episodes) == 50


@settings(max_examples=150, deadline=None)
@given(seeds, st.sampled_from(["seed", "default"]))
def test_band_constraints(seed, preset):
    p = get_preset(preset)
    ep = p.episode(seed)
    centres = [c for c, _ in ep.truth]
    assert 11 <= len(centres) <= 14
    assert all(w == 8.0 for _, w in ep.truth)
    assert all(p.band[0] + 8 <= c <= p.band[1] - 8 for c in centres)
    assert all(b - a >= 10.0 - 1e-9 for a, b in zip(centres, centres[1:]))
    assert len(ep.scans) == 12
    n = len(centres)
    order = [t for sc in ep.scans for t in sc.active]
    for sc in ep.scans:
        assert len(sc.active) == 3 and len(set(sc.active)) == 3
        assert set(sc.detected) <= set(sc.active)
        freqs = [pk.freq for pk in sc.peaks]
        assert freqs == sorted(freqs)
        assert len(sc.peaks) <= 3 + 3 + 1
        for pk in sc.peaks:
            for v in (pk.freq, pk.power, pk.width):
                assert round(v, 1) == v
            assert pk.width >= 0.5
    # round robin: the first cycle shows every transmitter exactly once
    assert sorted(order[:n]) == list(range(n))


def test_transmitter_count_is_uniform_and_always_achieved():
    p = get_preset("default")
    counts = [len(p.episode(s).truth) for s in range(2000)]
    for k in (11, 12, 13, 14):
        assert 0.2 < counts.count(k) / len(counts) < 0.3


def test_scan_statistics_match_the_seed_preset():
    """Detection rate ~0.85, peak offsets ~N(0, 3), false alarms / spikes at their rates."""
    p = get_preset("seed")
    det, act, offsets, extra_scans = 0, 0, [], 0
    for s in range(600):
        ep = p.episode(s)
        for sc in ep.scans:
            act += len(sc.active)
            det += len(sc.detected)
            if len(sc.peaks) > len(sc.detected):
                extra_scans += 1
            for t in sc.detected:
                c = ep.truth[t][0]
                offsets.append(min(abs(pk.freq - c) for pk in sc.peaks))
    assert det / act == pytest.approx(0.85, abs=0.02)
    rms = math.sqrt(sum(o * o for o in offsets) / len(offsets))
    assert 2.5 < rms < 3.2
    # P(spike or false alarm in a scan) = 1 - 0.9 * 0.8 = 0.28
    assert extra_scans / (600 * 12) == pytest.approx(0.28, abs=0.03)


def test_prompt_shows_scan_header_peaks_and_band_but_no_score():
    env = SpectrumEnv(EnvConfig(preset="seed", memory_mode="none"))
    obs, info = env.reset(3)
    assert obs["prompt"].startswith("Scan 1/12 | band 0.0-180.0 MHz")
    assert info["n_scans"] == 12
    obs, r, term, trunc, info = env.step({"center_freqs": [50.0]})
    assert "score" not in obs["prompt"].lower() and "iou" not in obs["prompt"].lower()
    assert obs["prompt"].startswith("Scan 2/12")
    res = env.call_tool("submit_report", {"center_freqs": [1.0]})
    assert res.content == "Scan 2 recorded." and res.advanced


def test_oracle_scores_one_and_empty_scores_zero():
    env = SpectrumEnv(EnvConfig(preset="default"))
    env.reset(11)
    truth = env.truth()
    while not env.done:
        _, r, *_ = env.step({"center_freqs": [c for c, _ in truth]})
        assert r == 1.0
    m = env.metrics()
    assert m["score"] == 1.0 and m["dormant_recall"] == 1.0 and m["scans_skipped"] == 0
    env.reset(11)
    while not env.done:
        env.step({"center_freqs": []})
    assert env.metrics()["score"] == 0.0


def test_skipped_and_unplayed_scans_count_in_the_mean():
    env = SpectrumEnv(EnvConfig(preset="default"))
    env.reset(5)
    truth = [c for c, _ in env.truth()]
    env.step({"center_freqs": truth})
    env.skip("test")
    m = env.metrics()  # 10 scans never played
    assert m["scans_completed"] == 1 and m["scans_skipped"] == 11
    assert m["score"] == pytest.approx(1 / 12)
    assert m["faults"] == {"skip_test": 1}
    env.finish("rollout_ended")
    assert env.done and env.metrics()["score"] == pytest.approx(1 / 12)


def test_call_budget_skips_the_scan():
    env = SpectrumEnv(EnvConfig(max_calls_per_scan=2))
    env.reset(1)
    assert env.no_tool_call() == NUDGE
    assert env.no_tool_call() is None  # second model call without a report: skipped
    assert env.scan_index == 1 and env.scan_records()[0]["skipped"]
    assert env.metrics()["faults"] == {"skip_call_budget": 1}


def test_scaffold_echoes_the_previous_report_and_scrambled_keeps_its_size():
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="scaffold"))
    env.reset(9)
    obs, *_ = env.step({"center_freqs": [12.34, 300.0]})
    assert "Your previous report (centres, MHz): 12.3, 300.0" in obs["prompt"]
    scr = SpectrumEnv(EnvConfig(preset="default", memory_mode="scrambled"))
    scr.reset(9)
    obs, *_ = scr.step({"center_freqs": [12.34, 300.0]})
    line = next(x for x in obs["prompt"].splitlines() if x.startswith("Your previous report"))
    vals = line.split(": ")[1].split(", ")
    assert len(vals) == 2 and vals != ["12.3", "300.0"]
    # the scan itself is the same as under scaffold (only the echo differs)
    assert obs["prompt"].split("Your previous")[0] == env.observation()["prompt"].split("Your previous")[0]
    again = SpectrumEnv(EnvConfig(preset="default", memory_mode="scrambled"))
    again.reset(9)
    assert again.step({"center_freqs": [12.34, 300.0]})[0]["prompt"] == obs["prompt"]


def test_none_and_icl_modes_have_no_echo_and_notepad_only_in_notepad_mode():
    for mode in ("none", "icl"):
        env = SpectrumEnv(EnvConfig(memory_mode=mode))
        env.reset(2)
        obs, *_ = env.step({"center_freqs": [100.0]})
        assert "previous report" not in obs["prompt"]
        assert [t["function"]["name"] for t in env.tools()] == ["submit_report"]
        res = env.call_tool("notepad_write", {"text": "x"})
        assert not res.ok and "not available" in res.content
    env = SpectrumEnv(EnvConfig(memory_mode="notepad"))
    env.reset(2)
    assert {t["function"]["name"] for t in env.tools()} == {"submit_report", "notepad_read", "notepad_write"}
    assert env.call_tool("notepad_write", '{"text": "tx at 100"}').ok
    assert env.call_tool("notepad_write", {"text": "tx at 120"}).ok  # overwrite semantics
    assert env.call_tool("notepad_read", {}).content == "tx at 120"
    big = env.call_tool("notepad_write", {"text": "y" * 10_000_000})
    assert not big.ok and "limit is 2000" in big.content and env.call_tool("notepad_read", {}).content == "tx at 120"
    assert env.metrics()["faults"] == {"notepad_too_long": 1}


def test_metrics_have_every_documented_key():
    env = SpectrumEnv(EnvConfig(preset="seed", memory_mode="scaffold", salt="s1"))
    env.reset(seed_for_row("r", "s1"))
    while not env.done:
        env.step({"center_freqs": [20.0, 90.0]})
    m = env.metrics()
    for k in ("score", "mean_occ", "mean_avail", "early_mean", "late_mean", "memory_gain", "scans_completed",
              "scans_skipped", "dormant_recall", "carry_rate", "echo_copy", "report_size", "band_fingerprint", "seed", "salt"):
        assert k in m
    assert m["carry_rate"] == 1.0 and m["report_size"] == 2 and m["salt"] == "s1"
    assert len(m["per_scan_reward"]) == 12


def test_echo_copy_means_the_same_in_both_arms():
    """echo_copy: the share of the echoed centres (shown with the scan) the report reproduces within the
    carry tolerance. Copying the echo gives 1 in the real arm and in the scrambled control alike; ignoring
    it gives ~0 in both; carry_rate, by contrast, compares with the true previous report."""
    from spectrum_rft.task.scan_format import parse_scan

    for mode in ("scaffold", "scrambled"):
        for copy_echo in (True, False):
            env = SpectrumEnv(EnvConfig(memory_mode=mode))
            obs, _ = env.reset(11)
            env.step({"center_freqs": [50.0, 150.0, 250.0]})
            echo = parse_scan(env.observation()["prompt"]).echo
            assert echo is not None and len(echo) == 3
            env.step({"center_freqs": echo if copy_echo else [470.0]})
            rec = env.scan_records()[1]
            assert rec["echo_shown"] == 3 and rec["echo_kept"] == (3 if copy_echo else sum(abs(e - 470) <= 4 for e in echo))
            m = env.metrics()
            assert m["echo_copy"] == rec["echo_kept"] / 3
            if mode == "scaffold" and copy_echo:
                assert rec["carry_kept"] == 3
    env = SpectrumEnv(EnvConfig(memory_mode="none"))
    env.reset(11)
    env.step({"center_freqs": [50.0]})
    env.step({"center_freqs": [50.0]})
    assert env.metrics()["echo_copy"] is None  # no echo shown: undefined, not 0


def test_reported_width_is_fixed_on_fixed_width_presets():
    env = SpectrumEnv(EnvConfig(preset="default"))
    env.reset(4)
    c = env.truth()[0][0]
    _, r1, *_ = env.step({"center_freqs": [c], "bandwidths": [50.0]})
    env.reset(4)
    _, r2, *_ = env.step({"center_freqs": [c]})
    assert r1 == r2


def test_tool_schemas_are_openai_function_format():
    for mode in ("none", "icl", "notepad", "scaffold", "scrambled", "icl_notepad"):
        for t in tool_schemas(mode):
            assert t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
    props = tool_schemas("icl_notepad")[0]["function"]["parameters"]["properties"]
    assert "notepad_update" in props


def test_config_validation_is_clear():
    with pytest.raises(ValueError, match="unknown memory_mode"):
        EnvConfig(memory_mode="ram")
    with pytest.raises(ValueError, match="unknown preset"):
        EnvConfig(preset="huge")
    with pytest.raises(ValueError, match="unknown reward"):
        EnvConfig(reward="f1")
    with pytest.raises(ValueError, match="seed"):
        SpectrumEnv().reset(-1)
    with pytest.raises(RuntimeError, match="reset"):
        SpectrumEnv().step({"center_freqs": []})


# --- bad actions -----------------------------------------------------------------------------------

BAD_ACTIONS = [
    {"center_freqs": [float("nan")]},
    {"center_freqs": [float("inf")]},
    {"center_freqs": [-float("inf"), 10.0]},
    {"center_freqs": ["100"]},
    {"center_freqs": "100, 200"},
    {"center_freqs": [[1, 2]]},
    {"center_freqs": [{"f": 1}]},
    {"center_freqs": [True]},
    {"center_freqs": [None]},
    {"center_freqs": list(range(10**5))},
    {"center_freqs": [-5.0]},
    {"center_freqs": [1e9]},
    {"centre_freqs": [100.0]},
    [100.0, 200.0],
    "not json",
    '{"center_freqs": [NaN]}',
    None,
    42,
]


@pytest.mark.parametrize("action", BAD_ACTIONS, ids=range(len(BAD_ACTIONS)))
def test_bad_actions_are_refused_clearly_and_nothing_advances(action):
    env = SpectrumEnv(EnvConfig(preset="default"))
    env.reset(1)
    obs, r, term, trunc, info = env.step(action)
    assert not info["advanced"] and r == 0.0 and not term
    assert isinstance(info["error"], str) and 5 < len(info["error"]) < 200
    assert obs["error"] == info["error"] and obs["scan"] == 1
    assert env.metrics()["faults"]["invalid_report"] == 1
    res = env.call_tool("submit_report", action)
    assert not res.ok and not res.advanced and res.content.startswith("Error:")


BAD_BANDWIDTHS = [[8.0, 8.0], [-1.0], "wide", [967.3], [float("nan")], [True]]


@pytest.mark.parametrize("bw", BAD_BANDWIDTHS, ids=range(len(BAD_BANDWIDTHS)))
def test_bandwidths_are_judged_only_where_the_preset_reads_them(bw):
    """One rule: a field the preset ignores is not in its tool schema and never refuses a report. On a
    fixed-width preset any ``bandwidths`` scores exactly as none; on bench90 (widths reported) a bad list is
    refused with a message naming it."""
    for preset in ("default", "default-v1", "seed"):
        env = SpectrumEnv(EnvConfig(preset=preset))
        assert "bandwidths" not in env.tools()[0]["function"]["parameters"]["properties"]
        env.reset(1)
        _, r_with, *_ = env.step({"center_freqs": [100.0], "bandwidths": bw})
        env.reset(1)
        _, r_without, *_ = env.step({"center_freqs": [100.0]})
        assert r_with == r_without and env.metrics()["faults"] == {}
    env = SpectrumEnv(EnvConfig(preset="bench90", memory_mode="none"))
    assert "bandwidths" in env.tools()[0]["function"]["parameters"]["properties"]
    env.reset(1)
    obs, r, *_, info = env.step({"center_freqs": [100.0], "bandwidths": bw})
    assert not info["advanced"] and "bandwidths" in info["error"] and r == 0.0


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(junk, st.sampled_from(["submit_report", "notepad_read", "notepad_write", "rm -rf", ""]))
def test_arbitrary_junk_never_crashes_the_env(args, tool):
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="notepad"))
    env.reset(3)
    res = env.call_tool(tool, args)
    assert isinstance(res.content, str) and res.content
    if res.advanced:
        assert 0.0 <= res.reward <= 1.0
    for junk_args in (json.dumps(args) if not isinstance(args, float) or math.isfinite(args) else "nan",):
        res2 = env.call_tool(tool, junk_args)
        assert isinstance(res2.content, str)
    m = env.metrics()
    assert 0.0 <= m["score"] <= 1.0


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20))
def test_parse_report_accepts_exactly_the_finite_in_band_lists(xs):
    p = get_preset("seed")
    ok = len(xs) <= 16 and all(math.isfinite(x) and 0.0 <= x <= 180.0 for x in xs)
    try:
        cs, ws = parse_report({"center_freqs": xs}, p)
    except InvalidAction:
        assert not ok
    else:
        assert ok and cs == xs and ws == [8.0] * len(xs)


def test_one_scored_report_per_model_turn_and_nothing_after_the_end():
    env = SpectrumEnv(EnvConfig(preset="seed"))
    env.reset(8)
    assert env.call_tool("submit_report", {"center_freqs": [10.0]}, first=True).advanced
    second = env.call_tool("submit_report", {"center_freqs": [20.0]}, last=True)
    assert not second.advanced and "already reported" in second.content and env.scan_index == 1
    assert not second.skipped  # the turn scored: no budget used
    # without announced turns (a plain loop over the env) every valid report advances
    assert env.call_tool("submit_report", {"center_freqs": [10.0]}).advanced
    assert env.call_tool("submit_report", {"center_freqs": [10.0]}).advanced
    env.finish()
    after = env.call_tool("submit_report", {"center_freqs": [10.0]})
    assert not after.ok and "all scans are recorded" in after.content
    assert env.metrics()["faults"]["extra_submit"] == 1 and env.metrics()["faults"]["call_after_end"] == 1
