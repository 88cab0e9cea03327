"""``spectrum-rft scan-eval --compare``: paired differences between checkpoints evaluated on the same scans."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.training.spectrum import scan_eval as S


def _result(scores, echo=None, arm="weak-scaffold", rows=None):
    echo = echo if echo is not None else [None] * len(scores)
    rows = rows or [f"r{i}" for i in range(len(scores))]
    records = [{"row_id": r, "scan": 3, "valid": e is not None, "score": s, "gain_vs_memoryless": s - 0.1,
                "gain_valid": s - 0.1 if e is not None else None, "echo_copy": e}
               for r, s, e in zip(rows, scores, echo)]
    return {"arm": arm, "scans": len(records), "records": records}


unit = st.floats(0, 1, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(unit, unit), min_size=2, max_size=40))
def test_paired_difference_is_the_mean_and_se_of_per_scan_differences(pairs):
    base, other = _result([p[0] for p in pairs]), _result([p[1] for p in pairs])
    d = S.paired_difference(base, other)["score"]
    diffs = [o - b for b, o in pairs]
    assert d["n"] == len(pairs)
    assert math.isclose(d["mean"], math.fsum(diffs) / len(diffs), abs_tol=1e-12)
    assert math.isclose(d["se"], statistics.stdev(diffs) / math.sqrt(len(diffs)), rel_tol=1e-9, abs_tol=1e-12)


def test_pairs_by_row_not_by_position_and_skips_missing_echo():
    base = _result([0.1, 0.5, 0.2], echo=[0.5, None, 1.0], rows=["a", "b", "c"])
    other = _result([0.9, 0.2, 0.2], echo=[1.0, 0.5, None], rows=["b", "a", "c"])  # b, a swapped
    d = S.paired_difference(base, other)
    assert d["score"]["mean"] == pytest.approx(((0.2 - 0.1) + (0.9 - 0.5) + 0.0) / 3)
    assert d["echo_copy"] == {"mean": 0.0, "se": None, "n": 1}  # only row a has an echo_copy in both: 0.5 vs 0.5


def test_other_scans_or_arm_are_refused():
    with pytest.raises(S.Unpaired, match="not the same scans: 2 unmatched"):
        S.paired_difference(_result([0.1, 0.2]), _result([0.1, 0.2], rows=["r0", "x"]))
    with pytest.raises(S.Unpaired, match="arms weak-scaffold / weak-scrambled"):
        S.paired_difference(_result([0.1]), _result([0.1], arm="weak-scrambled"))


def test_compare_command(tmp_path, capsys):
    paths = []
    for name, scores in [("base", [0.1, 0.2, 0.3]), ("a", [0.2, 0.4, 0.3]), ("other", [0.1, 0.2])]:
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps({"model": name, "results": [_result(scores)]}))
        paths.append(str(p))
    assert S.main(["--compare", paths[0], paths[1]]) == 0
    out = capsys.readouterr().out
    assert "3 scans, arm weak-scaffold" in out and "score +0.100 +- 0.058 (3)" in out
    assert S.main(["--compare", paths[0], paths[2]]) == 2
    assert "not the same scans" in capsys.readouterr().err
    assert S.main(["--compare", paths[0], str(tmp_path / "missing.json")]) == 2
    with pytest.raises(SystemExit) as e:
        S.main(["--compare", paths[0]])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        S.main([])
    assert e.value.code == 2


def test_other_echo_histories_are_refused_and_old_files_read_as_memoryless():
    new = {**_result([0.1, 0.2]), "echo_history": "accumulate"}
    old = _result([0.1, 0.2])  # made before the column: the memoryless prefix of RESULTS section 10
    with pytest.raises(S.Unpaired, match="echo histories accumulate / memoryless"):
        S.paired_difference(new, old)
    assert S.paired_difference({**old, "echo_history": "memoryless"}, old)["score"]["n"] == 2
    assert S.paired_difference(old, old)["beyond_current"] == {"mean": None, "se": None, "n": 0}  # no metric yet


# --- the held-out rule (memory-report --panel-*): synthetic panels of scan-eval results ---------------------

def _panel(beyond, temperature=0, constrained=True, n=64):
    records = [{"row_id": f"r{i}", "scan": 1 + i % 12, "valid": True, "score": 0.2 + b, "gain_vs_memoryless": b,
                "gain_valid": b, "echo_copy": 0.5, "beyond_current": b} for i, b in enumerate(beyond[:n])]
    return {"arm": "weak-scaffold", "scans": len(records), "temperature": temperature, "constrained": constrained,
            "echo_history": "accumulate", "records": records}


def _noise(seed, n=64, sd=0.02):
    import random

    rng = random.Random(seed)
    return [rng.gauss(0.0, sd) for _ in range(n)]


@pytest.mark.parametrize("warm_lift,real_lift,ctrl_lift,expected", [
    (0.0, [0.10, 0.12, 0.09], [0.01, 0.02, 0.0], "learned"),
    (0.0, [0.01, -0.01, 0.0], [0.0, 0.0, 0.01], "not learned"),
    (0.0, [0.10, 0.12, 0.09], [0.15, 0.16, 0.12], "not learned"),  # the control gained more
    (0.10, [0.12, 0.13, 0.05], [0.0, 0.0, 0.0], "inconclusive"),  # d clears 2 SE, but seed 2 is below the warm start
])
def test_panel_verdict_follows_the_rule(warm_lift, real_lift, ctrl_lift, expected):
    from spectrum_rft.training.spectrum.memory_report import panel_verdict

    warm = _panel([0.05 + warm_lift + x for x in _noise(99)])
    real = {s: _panel([0.05 + lift + x for x in _noise(s)]) for s, lift in enumerate(real_lift)}
    ctrl = {s: _panel([0.05 + lift + x for x in _noise(100 + s)]) for s, lift in enumerate(ctrl_lift)}
    v = panel_verdict(warm, real, ctrl)
    ds = [x["d"] for x in v["seeds"]]
    assert [x["seed"] for x in v["seeds"]] == [0, 1, 2] and all(x["scans"] == 64 for x in v["seeds"])
    assert v["d"] == pytest.approx(statistics.mean(ds)) and v["se"] == pytest.approx(statistics.stdev(ds) / math.sqrt(3))
    assert v["verdict"] == expected, v
    assert (v["d"] > v["threshold"]) == (expected != "not learned")


def test_panel_refuses_what_the_rule_does_not_allow(tmp_path, capsys):
    from spectrum_rft.training.spectrum import memory_report as M

    warm = _panel(_noise(1))
    with pytest.raises(S.Unpaired, match="greedy under the grammar"):
        M.panel_verdict(warm, {0: _panel(_noise(2), temperature=1.0)}, {0: _panel(_noise(3))})
    with pytest.raises(S.Unpaired, match="needs >= 64"):
        M.panel_verdict(warm, {0: _panel(_noise(2), n=10)}, {0: _panel(_noise(3))})
    assert M.panel_verdict(warm, {0: _panel(_noise(2))}, {0: _panel(_noise(3))})["verdict"] == "inconclusive"
    files = {}
    for name, res in [("warm", warm), ("r0", _panel(_noise(4))), ("r1", _panel(_noise(5))), ("c0", _panel(_noise(6))),
                      ("c1", _panel(_noise(7)))]:
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps({"model": name, "results": [res]}))
    argv = ["--panel-warm", str(files["warm"]), "--panel-real", f"0={files['r0']}", "--panel-real", f"1={files['r1']}",
            "--panel-control", f"0={files['c0']}", "--panel-control", f"1={files['c1']}"]
    assert M.main(argv) == 0
    out = capsys.readouterr().out
    assert "seed 0: d" in out and "seed 1: d" in out and "verdict (held-out, primary): NOT LEARNED" in out
    assert M.main(["--panel-warm", str(files["warm"]), "--panel-real", "zero=x.json"]) == 2
    assert "--panel-real expects SEED=PATH (e.g. 0=real-s0.json)" in capsys.readouterr().err


def test_scan_eval_device_cuda_without_a_gpu_is_one_line(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert S.torch_device("auto").type == "cpu"
    assert S.main(["--model", str(tmp_path), "--device", "cuda", "--scans", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["spectrum-rft scan-eval: --device cuda: torch sees no CUDA device here"]


def test_the_vllm_engine_without_vllm_is_one_line(tmp_path, capsys):
    """``--engine vllm`` where vLLM is not installed (the main venv): one line that says how to get it, exit 2,
    before any model is loaded; the same for serve-hf. (The engine itself: tests_vllm/, in the vLLM venv.)"""
    import importlib.util

    from spectrum_rft.training.spectrum import serve

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    (tmp_path / "config.json").write_text("{}")
    assert S.main(["--model", str(tmp_path), "--engine", "vllm", "--scans", "1"]) == 2
    assert serve.main(["--model", str(tmp_path), "--engine", "vllm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("--engine vllm: vLLM is not installed in this environment" in e for e in err), err
    assert err[0].startswith("spectrum-rft scan-eval:") and err[1].startswith("spectrum-rft serve-hf:")


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=12)))
@settings(max_examples=200, deadline=None)
def test_vllm_memory_is_a_share_or_a_clear_refusal(text):
    """``--vllm-memory`` (scan-eval, serve-hf): a share in (0, 1] is taken as it is; anything else (0, negative,
    above 1, NaN, inf, not a number) is refused by argparse with a message that names the text."""
    import argparse

    from spectrum_rft.training.spectrum.vllm_engine import memory_share

    try:
        value = float(text)
    except ValueError:
        value = None
    if value is not None and 0 < value <= 1:
        assert memory_share(text) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="share in \\(0, 1\\]"):
            memory_share(text)


def test_vllm_memory_reaches_vllm(tmp_path, capsys):
    """The share travels to TRL's vLLM setting in ``train`` (``vllm_gpu_memory_utilization``), and a bad one
    stops scan-eval and serve-hf at their flags, before vLLM or a model is looked at."""
    from spectrum_rft.training.spectrum import serve
    from spectrum_rft.training.spectrum.trl_run import GrpoConfig
    from spectrum_rft.training.trl_common import grpo_args

    cfg = GrpoConfig(vllm_memory=0.05, steps=1, group=2, prompts=1)
    args = grpo_args(cfg, tmp_path, micro_batch=2, accumulation=1, max_completion_length=8)
    assert args.vllm_gpu_memory_utilization == 0.05
    with pytest.raises(ValueError, match="vllm_memory must be in"):
        GrpoConfig(vllm_memory=0.0).check()
    (tmp_path / "config.json").write_text("{}")
    for main in (S.main, serve.main):
        with pytest.raises(SystemExit) as e:
            main(["--model", str(tmp_path), "--engine", "vllm", "--vllm-memory", "2"])
        assert e.value.code == 2
        assert "--vllm-memory: must be a share in (0, 1], got '2'" in capsys.readouterr().err
