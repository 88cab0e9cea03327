"""Scan episodes of the TRL adapter and the datasets built on them (fast: no model is run).

* a scan episode plays scans 1..k-1 with the row's echo_history policy (accumulate: the echo carries every
  earlier peak; identical prefixes in the real and the scrambled arm) and gives the model scan k alone; the
  reward is scan k's env score, calls after it are refused, the memoryless reference is that policy's
  score on the same scan;
* memory pays in this shape with the real echo and not with the scrambled one (why the evidence run
  trains on it);
* an SFT conversation's prompt is byte for byte what GRPO renders (TRL passes the tool methods, SFT the
  JSON schemas), and its reports are the memoryless policy's.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.task.scan_format import parse_scan
from spectrum_rft.training.spectrum.trl_data import episode_for, grpo_rows, scan_of_row, sft_conversation, tool_schemas_of
from spectrum_rft.training.spectrum.trl_env import SpectrumToolEnv, memoryless_report, spectrum_reward


def _rows(n, mode="scaffold", salt="t"):
    return grpo_rows(n, prompt="weak", memory_mode=mode, salt=salt)


def test_rows_are_fresh_bands_with_a_stable_scan():
    rows = _rows(40)
    assert len({r["row_id"] for r in rows}) == 40
    assert all(1 <= r["scan"] <= 12 for r in rows) and len({r["scan"] for r in rows}) > 6
    assert [r["scan"] for r in rows] == [r["scan"] for r in _rows(40)]  # reproducible
    assert rows[0]["prompt"][1] == {"role": "user", "content": ""}  # TRL appends reset()'s text here
    assert len({scan_of_row(f"row-{i}", "", 12) for i in range(60)}) == 12  # every scan of the episode occurs
    assert all(r["scan"] == 0 for r in grpo_rows(3, prompt="explicit", memory_mode="icl"))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 12), st.sampled_from(["none", "scaffold", "scrambled"]))
def test_scan_episode_is_scan_k_of_the_row(i, k, mode):
    row = {**_rows(1, mode, salt=f"h{i}")[0], "scan": k}
    env = SpectrumToolEnv()
    obs = env.reset(**row)
    scan = parse_scan(obs)
    assert scan.scan == k
    assert (scan.echo is not None) == (mode != "none" and k > 1)
    assert not env.done
    text = env.submit_report(**memoryless_report(obs))
    assert text.startswith(f"Scan {k} recorded.") and f"Scan {k + 1}/" not in text  # no next scan
    assert env.done
    assert env.submit_report(center_freqs=[1.0]).startswith("Error: this rollout ended") or k == 12
    m = env.metrics()
    assert m["scan"] == k and m["scans_skipped"] == 0 and m["per_scan_reward"] == [m["score"]]
    assert m["gain_vs_memoryless"] == 0.0 and m["score"] == m["memoryless_reward"]  # it *is* the memoryless report
    assert (m["late_mean"] is not None) == (k > 6) and (m["early_mean"] is not None) == (k <= 6)


def test_a_scan_never_reported_is_skipped_and_bad_input_is_refused():
    env = SpectrumToolEnv()
    env.reset(**{**_rows(1)[0], "scan": 5})
    assert env.submit_report(center_freqs=["nan"]).startswith("Error")
    assert env.submit_report(center_freqs=float("nan")).startswith("Error")
    assert not env.done
    m = env.metrics()
    assert m["scans_skipped"] == 1 and m["score"] == 0.0 and m["gain_vs_memoryless"] == -m["memoryless_reward"]
    assert m["faults"]
    for _ in range(2):  # the call budget (4) closes the scan as skipped
        env.submit_report(center_freqs=[-5.0])
    assert env.done and env.metrics()["scans_skipped"] == 1


def test_refuses_scan_episodes_where_memory_is_not_in_the_scan_text():
    with pytest.raises(ValueError, match="scan episodes need"):
        SpectrumToolEnv().reset(**{**grpo_rows(1, prompt="explicit", memory_mode="icl")[0], "scan": 3})
    with pytest.raises(ValueError, match="leak"):
        episode_for("scaffold", "full")
    with pytest.raises(ValueError, match="one scan at a time"):
        episode_for("notepad", "scan")
    with pytest.raises(ValueError, match="scan must be"):
        SpectrumToolEnv().reset(**{**_rows(1)[0], "scan": 13})


def _carry_echo_gain(mode: str, n: int = 66) -> float:
    gains = []
    for row in _rows(n, mode, salt="carry"):
        row = {**row, "scan": 2 + len(gains) % 11}
        env = SpectrumToolEnv()
        obs = env.reset(**row)
        centres = sorted(set(memoryless_report(obs)["center_freqs"]) | set(parse_scan(obs).echo or []))[:16]
        env.submit_report(center_freqs=centres)
        gains.append(env.metrics()["gain_vs_memoryless"])
    return sum(gains) / len(gains)


def test_memory_pays_per_scan_with_the_real_echo_only():
    """Reporting the current peaks plus the echo beats memoryless by a lot with the real echo and not at all
    with the scrambled one (copying random centres costs under match_iou): the per-scan task has the
    contrast the evidence run tests."""
    real, scrambled = _carry_echo_gain("scaffold"), _carry_echo_gain("scrambled")
    assert real > 0.2 and scrambled < 0.01 and real > scrambled + 0.2, (real, scrambled)


def _prefix(row):
    env = SpectrumToolEnv()
    obs = env.reset(**row)
    return env, parse_scan(obs)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 12))
def test_the_echo_carries_every_earlier_peak_and_the_arms_share_the_prefix(i, k):
    """echo_history accumulate: scans 1..k-1 are played by the accumulate policy over the peaks alone, so the
    real arm's echo at scan k is the accumulated report, the control's echo has the same count, and both arms
    scored identical prefix reports; memoryless: the echo is the previous scan's peaks."""
    real, ctrl = (grpo_rows(1, prompt="weak", memory_mode=m, salt=f"e{i}")[0] for m in ("scaffold", "scrambled"))
    real, ctrl = {**real, "scan": k}, {**ctrl, "scan": k}
    assert real["echo_history"] == "accumulate"
    env_r, scan_r = _prefix(real)
    env_c, scan_c = _prefix(ctrl)
    from spectrum_rft.baselines.policies import make_policy  # noqa: PLC0415
    from spectrum_rft.task.environment import SpectrumEnv  # noqa: PLC0415

    acc = make_policy("accumulate")
    plain = SpectrumEnv(env_r._env.config)  # noqa: SLF001 (a scripted replay of the same band)
    obs, _ = plain.reset(env_r._env.metrics()["seed"])  # noqa: SLF001
    peaks_seen = []
    for _ in range(k - 1):
        sc = parse_scan(obs["prompt"])
        peaks_seen += [p[0] for p in sc.peaks]
        acc.observe(dataclasses.replace(sc, echo=None))
        obs, *_ = plain.step({"center_freqs": acc.act()["center_freqs"]})
    assert scan_r.echo == [round(c, 1) for c in sorted(acc.act()["center_freqs"])]
    assert all(any(abs(p - e) <= 4.0 for e in scan_r.echo) for p in peaks_seen) or len(scan_r.echo) == 16
    assert len(scan_c.echo) == len(scan_r.echo)
    sizes = [[r["report_size"] for r in e._env.scan_records()] for e in (env_r, env_c)]  # noqa: SLF001
    assert sizes[0] == sizes[1]
    old = {**real, "echo_history": "memoryless"}
    _, scan_m = _prefix(old)
    prev = parse_scan(SpectrumEnv(env_r._env.config).reset(env_r._env.metrics()["seed"])[0]["prompt"])  # noqa: SLF001
    if k == 2:
        assert scan_m.echo == [round(p[0], 1) for p in sorted(prev.peaks)]
    legacy = {key: v for key, v in real.items() if key != "echo_history"}  # rows made before the column
    assert _prefix(legacy)[1].echo == scan_m.echo


def test_beyond_current_is_what_a_report_earns_beyond_the_current_peaks():
    """The memoryless report earns nothing beyond its own peaks; a report that adds a transmitter the scan does
    not show earns exactly that centre's part; a guess on nothing costs."""
    row = {**_rows(1, salt="beyond")[0], "scan": 7}
    env, scan = _prefix(row)
    truth = env._env.truth()  # noqa: SLF001 (the test picks a transmitter the scan does not show)
    ml = memoryless_report(env._env.observation()["prompt"])["center_freqs"]  # noqa: SLF001
    hidden = next(c for c, w in truth if all(abs(c - p[0]) > 4.0 + w / 2 for p in scan.peaks))
    nothing = next(x for x in (719.5, 0.5, 360.5) if all(abs(x - c) > w / 2 + 4.0 for c, w in truth))
    for extra, sign in (([], 0), ([hidden], 1), ([nothing], -1)):
        judge = _prefix(row)[0]
        judge.submit_report(center_freqs=ml + extra)
        m = judge.metrics()
        only = _prefix(row)[0]
        only.submit_report(center_freqs=ml)
        assert m["beyond_current"] == pytest.approx(m["score"] - only.metrics()["score"])
        assert (m["beyond_current"] > 0) == (sign > 0) and (m["beyond_current"] < 0) == (sign < 0)


def test_reward_function_logs_the_batch_memory_gain():
    rows = _rows(12)
    envs, logged = [], {}
    for r in rows:
        env = SpectrumToolEnv()
        obs = env.reset(**r)
        env.submit_report(**memoryless_report(obs))
        envs.append(env)
    rewards = spectrum_reward(envs, log_metric=lambda k, v: logged.__setitem__(k, v))
    assert rewards == [e.metrics()["score"] for e in envs]
    late = [e.metrics()["score"] for e in envs if e.metrics()["scan"] > 6]
    early = [e.metrics()["score"] for e in envs if e.metrics()["scan"] <= 6]
    assert logged["spectrum/memory_gain_batch"] == pytest.approx(sum(late) / len(late) - sum(early) / len(early))
    assert "spectrum/memory_gain" not in logged  # the episode estimator: no scan episode has one
    assert logged["spectrum/gain_vs_memoryless"] == 0.0 and logged["spectrum/scans_skipped"] == 0.0


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from spectrum_rft.training.chat_template import with_tool_template
    from spectrum_rft.training.models import resolve_model_dir

    model_dir, _ = resolve_model_dir("smollm2", "~/.cache/spectrum-rft")
    return with_tool_template(AutoTokenizer.from_pretrained(model_dir))


@pytest.mark.parametrize("mode,prompt", [("none", "weak"), ("scaffold", "weak"), ("icl", "explicit")])
def test_sft_conversation_is_what_grpo_renders(tokenizer, mode, prompt):
    row = grpo_rows(1, prompt=prompt, memory_mode=mode, salt="sft")[0]
    conv = sft_conversation(row)
    msgs = conv["messages"]
    # GRPO: TRL appends reset()'s text to the last prompt message and passes the env's tool methods
    env = SpectrumToolEnv()
    obs = env.reset(**row)
    grpo_prompt = row["prompt"][:-1] + [{**row["prompt"][-1], "content": row["prompt"][-1]["content"] + obs}]
    methods = [getattr(env, n) for n in sorted(["submit_report"])]
    grpo_text = tokenizer.apply_chat_template(grpo_prompt, tools=methods, tokenize=False, add_generation_prompt=True)
    sft_text = tokenizer.apply_chat_template(msgs[:2], tools=json.loads(conv["tools"]), tokenize=False,
                                             add_generation_prompt=True)
    assert sft_text == grpo_text
    assert json.loads(conv["tools"]) == tool_schemas_of(env)
    calls = [m for m in msgs if m["role"] == "assistant" and m.get("tool_calls")]
    tools = [m for m in msgs if m["role"] == "tool"]
    assert len(calls) == len(tools) == (12 if mode == "icl" else 1)
    assert calls[0]["tool_calls"][0]["function"]["arguments"] == memoryless_report(obs)
    assert msgs[-1] == {"role": "assistant", "content": "Done."}
    full = tokenizer.apply_chat_template(msgs, tools=json.loads(conv["tools"]), tokenize=False)
    assert '<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": [' in full
    assert 0.0 < conv["score"] < 0.5


def test_an_exploring_sft_target_keeps_one_echoed_non_peak_centre_as_often_as_asked():
    """``sft --target-policy explore-P`` (issue 40's exploration gate): the target is the memoryless report plus,
    in P % of the scans that offer one, one echoed centre off every current peak; the env counts it as kept from
    memory alone (``echo_kept_beyond``). explore-0 writes the memoryless targets; a row's target is the same
    each time it is built (seeded by the row), and rows differ."""
    from spectrum_rft.training.spectrum.trl_env import judge

    rows = grpo_rows(40, prompt="weak", memory_mode="scaffold", salt="explore", echo_history="accumulate-12")

    def report(conv):
        call = next(m for m in conv["messages"] if m["role"] == "assistant" and m.get("tool_calls"))
        return call["tool_calls"][0]["function"]["arguments"]

    def kept_beyond(row, conv):
        message = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "submit_report", "arguments": report(conv)}}]}
        return judge(row, message).metrics()["echo_kept_beyond"]

    plain = [sft_conversation(r) for r in rows]
    assert [report(c) for c in plain] == [report(sft_conversation(r, "explore-0")) for r in rows]
    always = [sft_conversation(r, "explore-100") for r in rows]
    offered = [i for i, (c, a) in enumerate(zip(plain, always)) if report(a) != report(c)]
    assert len(offered) >= 30  # most accumulate-12 echoes hold a centre off the scan's peaks
    for i in offered:
        a, c = report(always[i])["center_freqs"], report(plain[i])["center_freqs"]
        assert len(a) == len(c) + 1 and set(c) <= set(a)
        assert kept_beyond(rows[i], always[i]) == 1  # the env agrees: one echoed centre off every current peak
    assert all(kept_beyond(r, c) == 0 for r, c in zip(rows, plain))
    some = [report(sft_conversation(r, "explore-50")) for r in rows]
    assert some == [report(sft_conversation(r, "explore-50")) for r in rows]  # reproducible per row
    n = sum(some[i] != report(plain[i]) for i in offered)
    assert 0.2 * len(offered) < n < 0.8 * len(offered)
    with pytest.raises(ValueError, match="percentage"):
        sft_conversation(rows[0], "explore-101")


def test_channel_value_measures_perfect_use_of_the_echo(capsys):
    """``spectrum-rft channel``: on the same bands and scans, perfect use of the real echo pays a lot, of the
    scrambled one nothing; the accumulated echo is worth more than the previous scan's peaks alone."""
    from spectrum_rft.training.spectrum.channel import channel_value, main

    acc = channel_value(40, salt="chan", echo_history="accumulate")
    prev = channel_value(40, salt="chan", echo_history="memoryless")
    assert acc["memoryless"]["mean"] == prev["memoryless"]["mean"]  # the same scans, the same memoryless report
    real, ctrl = acc["weak-scaffold"]["gain"]["mean"], acc["weak-scrambled"]["gain"]["mean"]
    assert real > 0.2 and ctrl < 0.02 and acc["real_minus_control"]["mean"] == pytest.approx(real - ctrl)
    assert prev["weak-scaffold"]["gain"]["mean"] < real
    assert acc["weak-scaffold"]["beyond_current"]["mean"] > 0.2
    assert main(["--rows", "5", "--salt", "chan"]) == 0 and "real - control (paired)" in capsys.readouterr().out
    assert main(["--rows", "5", "--arm", "memoryless"]) == 2 and "shows no echo" in capsys.readouterr().err


def test_a_completion_record_says_what_it_kept_of_the_echo_and_what_it_added():
    """Per completion (issue 40 item 3): echo_kept counts the echoed centres the report reproduces; peaks_added
    the report's centres on a current peak the echo did not hold; refusals the reports the env refused first."""
    row = {**_rows(1, salt="added")[0], "scan": 6}
    env, scan = _prefix(row)
    tol = env._env.config.carry_tolerance  # noqa: SLF001
    new = [p[0] for p in scan.peaks if all(abs(p[0] - e) > tol for e in scan.echo)]
    assert scan.echo and new, "the fixture's scan must show a peak the echo lacks"
    env.submit_report(center_freqs=["nope"])  # refused: the scan stays open
    env.submit_report(center_freqs=list(scan.echo) + new)
    m = env.metrics()
    assert m["echo_kept"] == len(scan.echo) and m["peaks_added"] == len(new) and m["refusals"] == 1
    copy = _prefix(row)[0]
    copy.submit_report(center_freqs=list(scan.echo))
    assert copy.metrics()["peaks_added"] == 0 and copy.metrics()["refusals"] == 0


def test_echo_kept_beyond_counts_echoed_centres_kept_off_every_current_peak():
    """Issue 40 item 1's exploration figure: an echoed centre the report keeps counts only when no current peak
    lies within half a width of it; the memoryless report keeps none, the whole echo keeps every off-peak one;
    scan-eval's share counts an invalid completion (it keeps nothing) among the scans shown an echo."""
    from spectrum_rft.training.spectrum.scan_eval import echo_shown, keeps_echo_beyond

    row = {**_rows(1, salt="added")[0], "scan": 6}
    env, scan = _prefix(row)
    preset = env._env.preset  # noqa: SLF001
    half = 0.5 * (preset.report_width or preset.default_width)
    off = [e for e in scan.echo if all(abs(e - p[0]) > half for p in scan.peaks)]
    assert off and len(off) < len(scan.echo), "the fixture's echo must hold centres on and off the current peaks"
    env.submit_report(center_freqs=list(scan.echo))
    assert env.metrics()["echo_kept_beyond"] == len(off)
    memoryless = _prefix(row)[0]
    memoryless.submit_report(**memoryless_report(scan_text(row)))
    assert memoryless.metrics()["echo_kept_beyond"] == 0
    assert echo_shown({"prompt": [{"role": "user", "content": scan_text(row)}]})
    assert not echo_shown({"prompt": [{"role": "user", "content": scan_text({**row, "scan": 1})}]})
    records = [{"echo_shown": True, "echo_kept_beyond": 2}, {"echo_shown": True, "echo_kept_beyond": 0},
               {"echo_shown": False, "echo_kept_beyond": 0}, {"echo_shown": True, "echo_kept_beyond": 0}]
    assert keeps_echo_beyond(records) == pytest.approx(1 / 3) and keeps_echo_beyond(records[2:3]) is None


def scan_text(row: dict) -> str:
    from spectrum_rft.training.spectrum.trl_env import scan_prompt

    return scan_prompt(row)[-1]["content"]


def test_a_channel_with_room_the_echo_of_accumulate_12_never_fills_the_report():
    """Issue 40 item 2: scans 1..k-1 played by ``accumulate`` leave the echo at the region cap in a large share
    of scan episodes (no room for "echo + the new peaks"); ``accumulate-12`` keeps the 12 most often seen, so
    no echo is at the cap, and what it keeps is at least as often a true transmitter."""
    from spectrum_rft.baselines.policies import make_policy

    def echoes(history):
        out = []
        for row in grpo_rows(80, prompt="weak", memory_mode="scaffold", salt="room", prefix="room", episode="scan",
                             echo_history=history):
            env, scan = _prefix(row)
            truth = env._env.truth()  # noqa: SLF001 (what share of the echo is real)
            out.append((scan.echo or [], truth))
        return out

    full, room = echoes("accumulate"), echoes("accumulate-12")
    at_cap = [sum(1 for e, _ in x if len(e) >= 16) / len(x) for x in (full, room)]
    assert at_cap[0] > 0.15 and at_cap[1] == 0.0
    assert max(len(e) for e, _ in room) == 12

    def on_truth(x):
        hits = [sum(1 for c in e if any(abs(c - t) <= w / 2 for t, w in truth)) / len(e) for e, truth in x if e]
        return sum(hits) / len(hits)

    assert on_truth(room) >= on_truth(full) - 0.01
    p = make_policy("accumulate-3")
    assert p.name == "accumulate-3"
    with pytest.raises(ValueError, match="K must be >= 1"):
        make_policy("accumulate-0")
