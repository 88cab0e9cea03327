"""bench90: the CLBench-style 90-scan schedule (spectrum_bench90), its scoring, the acceptance numbers
and the CLI (``spectrum-rft bench90``, ``eval_bench90.sh``)."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
import sys
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.task import bench90 as sched
from spectrum_rft.tools import bench90 as b9
from spectrum_rft.task.environment import EnvConfig, SpectrumEnv, get_preset, tool_schemas

ROOT = Path(__file__).resolve().parents[1]
RUNS = range(sched.N_RUNS)
WIDE = tuple(range(1, 8))
NARROW = tuple(range(8, 14))


def canonical() -> list:
    return [sc for s in range(len(sched.STAGES)) for sc in sched.stage_scans(s)]


def digest(run: int) -> str:
    ep = sched.BENCH90.episode(run)
    text = json.dumps([[sc.note, list(sc.active), list(sc.detected), [list(p) for p in sc.peaks]] for sc in ep.scans])
    return hashlib.sha256(text.encode()).hexdigest()


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = b9.main(list(args))
    return rc, out.getvalue()


# ---- the band ------------------------------------------------------------------------------------


def test_thirteen_channels_widths_and_centres():
    ch = {c.number: c for c in sched.CHANNELS}
    assert len(sched.CHANNELS) == 13 and sorted(ch) == list(range(1, 14))
    assert [ch[n].centre for n in WIDE] == [7.5 + 24 * k for k in range(7)]
    assert [ch[n].centre for n in NARROW] == [19.5 + 24 * k for k in range(6)]
    assert {ch[n].width for n in WIDE} == {15.0} and {ch[n].width for n in NARROW} == {5.0}
    # sorted by centre (the env's truth order), disjoint, inside the band
    iv = [(c.centre - c.width / 2, c.centre + c.width / 2) for c in sched.CHANNELS]
    assert iv == sorted(iv) and all(a[1] < b[0] for a, b in zip(iv, iv[1:]))
    assert sched.BAND == (0.0, 168.0) and iv[0][0] >= 0 and iv[-1][1] <= 168
    assert sum(c.width for c in sched.CHANNELS) == 135.0  # 33 MHz of the band is free


def test_preset_wiring():
    assert get_preset("bench90") is sched.BENCH90
    p = sched.BENCH90
    assert (p.name, p.band, p.n_scans, p.report_width) == ("bench90", (0.0, 168.0), 90, None)
    env = SpectrumEnv(EnvConfig(preset="bench90", memory_mode="none", reward="avail_iou"))
    obs, info = env.reset(seed=0)
    assert info["n_scans"] == 90 and obs["prompt"].startswith("Scan 1/90 | band 0.0-168.0 MHz | noise floor -60.0 dBm")
    assert obs["prompt"].splitlines()[0].endswith("| five_ch_wide")
    props = tool_schemas("icl_notepad", "bench90")[0]["function"]["parameters"]["properties"]
    assert "Ignored" not in props["bandwidths"]["description"] and "notepad_update" in props


@pytest.mark.parametrize("run", RUNS)
def test_truth_is_the_13_channels_in_every_run(run):
    ep = sched.BENCH90.episode(run)
    assert ep.truth == [(c.centre, c.width) for c in sched.CHANNELS]
    assert ep.band == (0.0, 168.0) and ep.noise_floor == -60.0 and len(ep.scans) == 90


# ---- the stages ----------------------------------------------------------------------------------


def channels(scan) -> set[int]:
    return {sched.CHANNELS[t].number for t in scan.active}


@pytest.mark.parametrize("s", range(3))
def test_stage_activity_sets_and_round_robin(s):
    stage = sched.STAGES[s]
    scans = sched.stage_scans(s)
    assert len(scans) == 30 and {sc.note for sc in scans} == {stage.name}
    rr_counts: Counter = Counter()
    background = 0
    for i, sc in enumerate(scans):
        on = channels(sc)
        rr = set(sched.round_robin(stage, i))
        assert len(rr) == stage.n_active and rr <= on  # n_active distinct round-robin channels each scan
        assert on - rr <= set(stage.background)  # anything else is a background channel
        rr_counts.update(rr)
        background += len(on - rr)
    # round-robin: every channel of the cycle takes its turn equally often (within one)
    assert set(rr_counts) == set(stage.round_robin)
    assert max(rr_counts.values()) - min(rr_counts.values()) <= 1
    n_bg = 30 * len(stage.background)
    if n_bg:  # p = 0.1 per channel and scan: 24 (stage 1) / 12 (stage 2) expected
        assert 0.03 * n_bg <= background <= 0.2 * n_bg
    else:
        assert background == 0


def test_stage_facts():
    names = [st.name for st in sched.STAGES]
    assert names == ["five_ch_wide", "five_plus_four_mixed", "full_grid_active"]
    assert [st.seed for st in sched.STAGES] == [42, 43, 44]
    assert [st.n_active for st in sched.STAGES] == [2, 3, 4]
    assert [set(st.round_robin) for st in sched.STAGES] == [{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 8, 9, 10, 11},
                                                          set(range(1, 14))]
    assert [set(st.background) for st in sched.STAGES] == [set(range(6, 14)), {6, 7, 12, 13}, set()]
    assert all(st.p_background == 0.1 for st in sched.STAGES[:2])
    # the round-robin cycles in order: stage 1 scans 0, 1, 2 -> (1, 2), (3, 4), (5, 1)
    assert [sched.round_robin(sched.STAGES[0], i) for i in range(3)] == [(1, 2), (3, 4), (5, 1)]
    assert [len(channels(sc)) for sc in sched.stage_scans(2)] == [4] * 30


def test_peaks_follow_the_detector_model():
    scans = canonical()
    n_active = n_detected = 0
    for sc in scans:
        freqs = [p.freq for p in sc.peaks]
        assert freqs == sorted(freqs)
        assert set(sc.detected) <= set(sc.active) and len(sc.peaks) >= len(sc.detected)
        assert len({p.id for p in sc.peaks}) == len(sc.peaks)
        for p in sc.peaks:
            assert all(isinstance(v, float) and round(v, 1) == v for v in (p.freq, p.power, p.width))
            assert 0.0 <= p.freq <= 168.0 and p.width >= 0.5
        for t in sc.detected:  # each detected channel has a peak near it (jitter 0.5 + 5 sigma)
            c = sched.CHANNELS[t]
            assert any(abs(p.freq - c.centre) <= 5.6 and p.width >= 1.0 for p in sc.peaks)
        n_active += len(sc.active)
        n_detected += len(sc.detected)
    assert 0.78 <= n_detected / n_active <= 0.92  # p_detect = 0.85
    extra = sum(len(sc.peaks) - len(sc.detected) for sc in scans)
    assert 15 <= extra <= 70  # spikes (p 0.2, 1-3) + false alarms (p 0.2): ~54 expected over 90 scans


# ---- runs ----------------------------------------------------------------------------------------


def test_run0_is_canonical_and_runs_shuffle_within_stages():
    canon = canonical()
    assert sched.run_order(0) == tuple(range(90))
    orders = [sched.run_order(r) for r in RUNS]
    assert len(set(orders)) == 5  # every run differs
    for r in RUNS:
        ep = sched.BENCH90.episode(r)
        order = orders[r]
        for s in range(3):  # a permutation of each stage's own scans: boundaries at 30 and 60
            assert sorted(order[30 * s:30 * (s + 1)]) == list(range(30 * s, 30 * (s + 1)))
        for pos, sc in enumerate(ep.scans):
            src = canon[order[pos]]
            assert (sc.peaks, sc.active, sc.detected, sc.note) == (src.peaks, src.active, src.detected, src.note)
            assert sc.note == sched.STAGES[sched.stage_of(pos)].name
        if r:
            assert all(order[30 * s:30 * (s + 1)] != tuple(range(30 * s, 30 * (s + 1))) for s in range(3))


@pytest.mark.parametrize("bad", [-1, 5, 2**40, True, 1.0, "0"])
def test_seed_outside_the_runs_is_refused(bad):
    with pytest.raises(ValueError, match="run index"):
        sched.BENCH90.episode(bad)


def test_episodes_are_fresh_objects():
    a, b = sched.BENCH90.episode(0), sched.BENCH90.episode(0)
    a.scans[0].peaks.clear()
    assert b.scans[0].peaks and sched.BENCH90.episode(0).scans[0].peaks


def test_deterministic_across_processes():
    code = ("import hashlib, json\nfrom spectrum_rft.task import bench90 as sched\n"
            "for r in range(5):\n"
            "    ep = sched.BENCH90.episode(r)\n"
            "    t = json.dumps([[sc.note, list(sc.active), list(sc.detected), [list(p) for p in sc.peaks]]"
            " for sc in ep.scans])\n"
            "    print(hashlib.sha256(t.encode()).hexdigest())\n")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [digest(r) for r in RUNS]


@settings(max_examples=40, deadline=None)
@given(run=st.integers(0, 4), pos=st.integers(0, 89))
def test_any_position_plays_a_scan_of_its_own_stage(run, pos):
    sc = sched.BENCH90.episode(run).scans[pos]
    src = sched.run_order(run)[pos]
    assert sched.stage_of(src) == sched.stage_of(pos) and sc.note == sched.STAGES[pos // 30].name


# ---- scoring -------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(subset=st.sets(st.integers(0, 12)), run=st.integers(0, 4))
def test_avail_iou_of_an_exact_channel_subset(subset, run):
    """Reporting exactly some channels (with their bandwidths): the free spectrum claimed is the band
    minus those channels, so available-IoU = 33 / (168 - their width) and occupied-IoU = width / 135."""
    env = SpectrumEnv(b9.env_config("stateless"))
    env.reset(seed=run)
    chosen = [sched.CHANNELS[i] for i in sorted(subset)]
    _, reward, _, _, info = env.step({"center_freqs": [c.centre for c in chosen],
                                      "bandwidths": [c.width for c in chosen]})
    w = sum(c.width for c in chosen)
    assert reward == info["avail"] == pytest.approx(33.0 / (168.0 - w))
    assert info["occ"] == pytest.approx(w / 135.0)


@settings(max_examples=30, deadline=None)
@given(avail=st.lists(st.floats(0, 1), min_size=90, max_size=90))
def test_summary_of_a_run(avail):
    recs = [{"avail": a, "occ": 1 - a, "skipped": False} for a in avail]
    s = b9.summarize_run(3, recs)
    assert s["run"] == 3 and s["mean_avail"] == pytest.approx(sum(avail) / 90)
    assert sum(s["stage_means"]) / 3 == pytest.approx(s["mean_avail"])  # equal stages
    assert s["first10"] == pytest.approx(sum(avail[:10]) / 10) and s["last10"] == pytest.approx(sum(avail[-10:]) / 10)


def test_summary_mean_is_the_common_one():
    """``common.stats.mean`` (None skipped); an empty slice is NaN, explicitly, so tables still print."""
    recs = [{"avail": a, "occ": 0.5} for a in (0.1, 0.2, 0.3)]
    s = b9.summarize_run(0, recs)
    assert s["mean_avail"] == pytest.approx(0.2) and s["first10"] == pytest.approx(0.2)
    assert all(math.isnan(v) for v in s["stage_means"][1:])  # 3 records: stages 2 and 3 are empty
    assert math.isnan(b9.summarize_run(0, [])["mean_avail"])
    assert math.isnan(b9.summarize("m", "stateless", [], "direct")["mean_avail"])


def test_bench90_sets_no_environment_variable():
    """No process-wide side effect (reading a variable is fine): offline users set LITELLM_LOCAL_MODEL_COST_MAP
    themselves (scripts/test.sh)."""
    import ast  # noqa: PLC0415

    tree = ast.parse(Path(b9.__file__).read_text())
    reads = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "get"}  # os.environ.get
    touched = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
               and ((n.attr == "environ" and id(n) not in reads) or n.attr == "putenv" or ast.unparse(n) == "sys.modules")]
    assert touched == []


# ---- acceptance ----------------------------------------------------------------------------------


def test_acceptance_memoryless_stateless_is_clbench_baseline():
    r = b9.evaluate("spectrum/memoryless", "stateless", 5)
    assert abs(r["mean_avail"] - 0.22) <= 0.03  # CLBench's published stateless baseline: 0.2196
    assert r["runs"] == 5 and len(r["per_run"]) == 5 and r["via"] == "direct"


@pytest.mark.parametrize("system", ["stateless", "icl", "scaffold"])
def test_acceptance_oracle_scores_one(system):
    r = b9.evaluate("spectrum/oracle", system, 5)
    assert r["mean_avail"] == 1.0 and r["mean_occ"] == 1.0 and r["stage_means"] == [1.0, 1.0, 1.0]


def test_acceptance_accumulate_icl_clearly_above_stateless():
    icl = b9.evaluate("spectrum/accumulate", "icl", 5)
    stateless = b9.evaluate("spectrum/accumulate", "stateless", 5)
    b9.add_gain(icl, stateless)
    assert icl["gain_over_stateless"] >= 0.15
    assert all(r["gain_over_stateless"] >= 0.1 for r in icl["per_run"])
    assert icl["last10"] > icl["first10"]  # memory pays more as the episode goes on


def test_icl_notepad_system_runs_through_the_notepad_field():
    r = b9.evaluate("spectrum/oracle", "icl_notepad", 1)
    assert r["mean_avail"] == 1.0
    m = b9.evaluate("spectrum/memoryless", "icl_notepad", 1)
    assert m["mean_avail"] == pytest.approx(b9.evaluate("spectrum/memoryless", "stateless", 1)["mean_avail"])


# ---- CLI -----------------------------------------------------------------------------------------

KEYS = {"model", "system", "runs", "mean_avail", "mean_occ", "stage_means", "first10", "last10"}


def test_cli_json_shape(tmp_path):
    rc, out = cli("--model", "spectrum/memoryless", "--system", "stateless", "--runs", "2", "--json")
    assert rc == 0
    res = json.loads(out)
    assert KEYS <= res.keys()
    assert (res["model"], res["system"], res["runs"]) == ("spectrum/memoryless", "stateless", 2)
    assert len(res["stage_means"]) == 3 and [r["run"] for r in res["per_run"]] == [0, 1]
    assert res["gain_over_stateless"] == 0.0
    for r in res["per_run"]:
        assert {"run", "mean_avail", "mean_occ", "stage_means", "first10", "last10", "gain_over_stateless"} <= r.keys()
    # the gain of another system, with the stateless baseline taken from that earlier output
    base = tmp_path / "stateless.json"
    base.write_text(out)
    rc, out2 = cli("--model", "spectrum/memoryless", "--system", "icl", "--runs", "2", "--json",
                   "--stateless-from", str(base))
    res2 = json.loads(out2)
    assert rc == 0 and res2["gain_over_stateless"] == pytest.approx(res2["mean_avail"] - res["mean_avail"])
    rc, table = cli("--model", "spectrum/oracle", "--runs", "1")
    assert rc == 0 and "mean available-IoU 1.0000" in table


def test_cli_refuses_bad_input(capsys):
    with pytest.raises(SystemExit):
        b9.main(["--model", "spectrum/oracle", "--runs", "6"])
    with pytest.raises(SystemExit):
        b9.main(["--model", "spectrum/oracle", "--system", "notepad"])
    assert b9.main(["--model", "spectrum/nosuch", "--runs", "1"]) == 2
    assert b9.main(["--model", "gpt-x", "--via", "direct", "--runs", "1"]) == 2
    assert "spectrum-rft bench90:" in capsys.readouterr().err


def test_dispatcher_and_wrapper():
    env = dict(os.environ)  # offline settings: conftest
    p = subprocess.run([sys.executable, "-m", "spectrum_rft", "bench90", "--model", "spectrum/oracle", "--runs", "1",
                        "--json"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["mean_avail"] == 1.0
    w = subprocess.run(["bash", str(ROOT / "eval_bench90.sh"), "spectrum/memoryless", "icl", "1", "--json"],
                       cwd="/", env=env, capture_output=True, text=True)
    assert w.returncode == 0, w.stderr
    res = json.loads(w.stdout)
    assert (res["model"], res["system"], res["runs"]) == ("spectrum/memoryless", "icl", 1)
    assert res["gain_over_stateless"] == pytest.approx(0.0)
    usage = subprocess.run(["bash", str(ROOT / "eval_bench90.sh")], env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


# ---- the model path: rows through spectrum_turn_processor ----------------------------------------


def test_bench_rows_pin_the_run(monkeypatch):
    from spectrum_rft.task.environment import env_for_row

    def no_reset(*a, **k):
        raise AssertionError("bench_rows must not reset an env (no truth is registered anywhere)")

    with monkeypatch.context() as m:
        m.setattr(SpectrumEnv, "reset", no_reset)
        rows = b9.bench_rows("spectrum/oracle", "icl_notepad", 3)
    assert [r.input_metadata.row_id for r in rows] == [f"bench90-icl_notepad-run{i}" for i in range(3)]
    for i, r in enumerate(rows):
        ctx = r.input_metadata.dataset_info["environment_context"]
        assert (ctx["preset"], ctx["memory_mode"], ctx["reward"], ctx["seed"]) == ("bench90", "icl_notepad",
                                                                                   "avail_iou", i)
        assert env_for_row(r.input_metadata.row_id, r.input_metadata.dataset_info)[1] == i
    with pytest.raises(ValueError, match="seed"):  # a bench90 row without its run index is refused
        env_for_row("bench90-x", {"environment_context": {"preset": "bench90"}})


@pytest.mark.parametrize("model, system", [
    ("spectrum/memoryless", "stateless"), ("spectrum/accumulate", "icl"),
    ("spectrum/oracle", "icl_notepad"),  # privileged: its row travels in litellm metadata["spectrum_row"]
])
def test_processor_path_matches_the_direct_path(model, system):
    via = b9.evaluate(model, system, 2, via="processor", token_budget=None)
    direct = b9.evaluate(model, system, 2, via="direct")
    assert via["errors"] == [] and via["via"] == "processor"
    assert [r["mean_avail"] for r in via["per_run"]] == pytest.approx([r["mean_avail"] for r in direct["per_run"]])
    assert via["stage_means"] == pytest.approx(direct["stage_means"])


def test_a_model_over_http(monkeypatch, capsys):
    """A real chat-completions endpoint (127.0.0.1) through the CLI, keyless as docs/BENCH90.md writes it (no
    OPENAI_API_KEY: the placeholder key travels in the call, as eval gives its child one): scores match the
    scripted policy it plays, and a refused request (HTTP 401) makes the row an error: exit 1, named on stderr."""
    import loopback_llm as loopback

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with loopback.LoopbackLLM(responder=loopback.policy_responder("accumulate")) as server:
        params = json.dumps({"api_base": server.base_url})
        rc, out = cli("--model", "openai/loopback", "--system", "icl", "--runs", "1", "--no-gain", "--json",
                      "--token-budget", "0", "--completion-params", params)
        assert rc == 0, capsys.readouterr().err
        res = json.loads(out)
        assert res["via"] == "processor" and res["errors"] == []
        assert res["mean_avail"] == pytest.approx(b9.evaluate("spectrum/accumulate", "icl", 1)["mean_avail"])
        server.responder = lambda request: (401, {"error": {"message": "bad key"}}, 0.0)
        rc, out = cli("--model", "openai/loopback", "--system", "stateless", "--runs", "1", "--json",
                      "--llm-tries", "1", "--completion-params", params)
        res = json.loads(out)
        assert rc == 1 and len(res["errors"]) == 1 and "401" in res["errors"][0]
        assert res["per_run"][0]["scans_skipped"] == 90  # every scan still scored (as an empty report)
        assert "row error" in capsys.readouterr().err


# ---- a local server: --api-base, working defaults, --out, --resume, the plot, time left (issue 44) ----------


def test_a_local_server_gets_working_defaults_and_a_time_estimate(monkeypatch, capsys):
    """``--api-base`` alone is enough: every request carries a reply cap, temperature 0 and tool_choice auto
    (what serve-local's start-up text once had to be read for); one run by default, said up front, then one
    estimate line after the first scan and progress lines with the time left. ``--tool-choice none`` sends none."""
    import loopback_llm as loopback

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with loopback.LoopbackLLM(responder=loopback.policy_responder("memoryless")) as server:
        rc, out = cli("--model", "openai/loopback", "--api-base", server.base_url, "--json")
        err = capsys.readouterr().err
        assert rc == 0, err
        res = json.loads(out)
        assert res["runs"] == 1 and res["system"] == "stateless" and res["via"] == "processor"
        assert res["mean_avail"] == pytest.approx(b9.evaluate("spectrum/memoryless", "stateless", 1)["mean_avail"])
        sent = {(r.get("tool_choice"), r.get("max_tokens"), r.get("temperature")) for r in server.requests}
        assert sent == {("auto", 320, 0.0)}
        lines = err.splitlines()
        up_front = [i for i, x in enumerate(lines) if x.startswith("spectrum-rft bench90: openai/loopback under")]
        estimate = [i for i, x in enumerate(lines) if x.startswith("spectrum-rft bench90: estimate: 1 run (90 scans)")]
        assert up_front == [0] and len(estimate) == 1, err
        assert any(" | runs 0/1 done | about " in x and x.endswith(" left") for x in lines[estimate[0]:]), err
        n = len(server.requests)
        rc, _ = cli("--model", "openai/loopback", "--api-base", server.base_url, "--tool-choice", "none", "--quiet",
                    "--max-tokens", "0", "--temperature", "0.5")
        assert rc == 0
        assert {(("tool_choice" in r), r.get("max_tokens"), r.get("temperature")) for r in server.requests[n:]} \
            == {(False, None, 0.5)}


def test_clock_estimates_once_every_run_under_way_has_a_scan():
    t = [100.0]
    stream = io.StringIO()
    clock = b9.Clock(4, stream, now=lambda: t[0])
    clock.expect(2)
    t[0] = 110.0
    clock.scans("a", 0)  # the clock starts with the first run (set-up time before it is not counted)
    clock.scans("b", 0)
    t[0] = 120.0
    clock.scans("a", 1)
    assert stream.getvalue() == ""  # run b has not done a scan yet
    clock.scans("b", 1)  # 2 scans in 10 s, 360 in all
    assert stream.getvalue() == ("spectrum-rft bench90: estimate: 4 runs (360 scans) take about 30 min 0 s in all "
                                 "(5.0 s a scan so far, 2 runs at a time)\n")
    clock.scans("a", 2)
    clock.finished("a")
    assert clock.scans_done == 91 and clock.status().startswith("runs 1/4 done | about ")
    assert stream.getvalue().count("estimate") == 1
    assert [b9.duration(s) for s in (5, 125, 3725)] == ["5 s", "2 min 5 s", "1 h 02 min"]


def _kept_runs(path: Path) -> list[tuple[str, int]]:
    keep = []
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        keep.append((d["system"], d["run"]))
    return keep


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_stopped_run_keeps_its_finished_runs_and_resume_plays_the_rest(how, tmp_path, monkeypatch, capsys):
    """A run stopped (SIGTERM, or kill -9) once its first run is on disk keeps that run; --resume plays only the
    other one, and the result is the uninterrupted one's (the scripted policy the server plays)."""
    import signal as sig
    import time

    import loopback_llm as loopback

    out = tmp_path / "b90"
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    play = loopback.policy_responder("accumulate")
    answered = []

    def first_run_then_hang(request):  # the second run's first request waits until the stop: no race with it
        if len(answered) >= 90:
            return 200, loopback.chat_response("too late"), 3600.0
        answered.append(1)
        return play(request)

    with loopback.LoopbackLLM(responder=first_run_then_hang) as server:
        args = ["--model", "openai/loopback", "--system", "icl", "--runs", "2", "--no-gain", "--token-budget", "0",
                "--concurrency", "1", "--api-base", server.base_url, "--out", str(out)]
        p = subprocess.Popen([sys.executable, "-m", "spectrum_rft", "bench90", *args, "--quiet"], cwd=ROOT,
                             env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runs = out / b9.RUNS_FILE
        deadline = time.monotonic() + 600  # a bound for a wedged run, not a speed claim: the wait ends on the event
        while not (runs.exists() and runs.read_text().count("\n") >= 1) and p.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.poll() is None and runs.read_text().count("\n") == 1, "the first run never reached the disk"
        p.send_signal(getattr(sig, how))
        _, err = p.communicate(timeout=30)
        assert p.returncode == (143 if how == "SIGTERM" else -9), err
        if how == "SIGTERM":
            assert err.strip().splitlines()[-1].startswith("spectrum-rft bench90: stopped by SIGTERM; 1 finished runs "
                                                           "are kept in "), err
            assert "Traceback" not in err
        assert _kept_runs(runs) == [("icl", 0)]
        server.responder = play
        n = len(server.requests)
        rc, res = cli(*args, "--resume", "--json")
        assert rc == 0, capsys.readouterr().err
        assert "resume: 1 finished runs kept" in capsys.readouterr().err
    played = server.requests[n:]
    assert 90 <= len(played) < 100  # run 1 only
    res = json.loads(res)
    direct = b9.evaluate("spectrum/accumulate", "icl", 2)
    assert [r["mean_avail"] for r in res["per_run"]] == pytest.approx([r["mean_avail"] for r in direct["per_run"]])
    assert res["mean_avail"] == pytest.approx(direct["mean_avail"])
    assert _kept_runs(runs) == [("icl", 0), ("icl", 1)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["per_run"] == res["per_run"] and len(summary["per_scan_avail"]) == 90
    assert (out / b9.PLOT_FILE).read_bytes()[:4] == b"\x89PNG"


def test_a_stop_between_a_runs_append_and_its_bookkeeping_counts_what_is_on_disk(tmp_path, monkeypatch, capsys):
    """The stop line counts the runs --resume will keep, also when the signal lands after a run's line reached the
    disk and before the command noted it (CI once saw "0 finished runs" beside a runs.jsonl holding one)."""
    real_add = b9.RunStore.add

    def add_then_stopped(self, system, run, played):
        real_add(self, system, run, played)
        del self.runs[(system, run)]  # the window: the run's line on disk, the command's note of it not yet made
        raise KeyboardInterrupt

    monkeypatch.setattr(b9.RunStore, "add", add_then_stopped)
    out = tmp_path / "b90"
    assert b9.main(["--model", "spectrum/accumulate", "--runs", "2", "--no-gain", "--out", str(out), "--quiet"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        f"spectrum-rft bench90: interrupted; 1 finished runs are kept in {out / b9.RUNS_FILE}")
    assert [run for _, run in _kept_runs(out / b9.RUNS_FILE)] == [0]


def test_out_folder_rules(tmp_path, capsys):
    """--out: each run (both systems) written, a summary and a plot; a folder holding runs is never replaced
    silently; --resume with other settings is refused in one line; a resume with nothing left plays nothing and
    prints the same result."""
    out = tmp_path / "o"
    base = ["--model", "spectrum/accumulate", "--system", "icl", "--runs", "2", "--json", "--out", str(out)]
    rc, first = cli(*base)
    assert rc == 0 and _kept_runs(out / b9.RUNS_FILE) == [("icl", 0), ("icl", 1), ("stateless", 0), ("stateless", 1)]
    assert (out / b9.PLOT_FILE).exists() and json.loads((out / "summary.json").read_text())["plot"]
    capsys.readouterr()
    assert cli(*base)[0] == 2
    assert capsys.readouterr().err.startswith(f"spectrum-rft bench90: --out {out} already holds a run")
    rc, again = cli(*base, "--resume")
    assert rc == 0 and json.loads(again) == json.loads(first)
    assert "0 to play" in capsys.readouterr().err
    assert cli(*base, "--resume", "--prompt", "explicit")[0] == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "other settings: prompt 'weak' (now 'explicit')" in err
    assert cli(*base, "--overwrite", "--runs", "1")[0] == 0
    assert _kept_runs(out / b9.RUNS_FILE) == [("icl", 0), ("stateless", 0)]
    with pytest.raises(SystemExit):
        b9.main(["--model", "spectrum/accumulate", "--resume"])  # --resume without --out
    assert "give --out" in capsys.readouterr().err
