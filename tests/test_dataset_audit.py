"""Dataset generator, dataset adapter, scripted policies, the reward audit and its CLI."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spectrum_rft.rollouts import dataset as mk
from spectrum_rft.task.environment import EnvConfig, SpectrumEnv, env_for_row, row_config
from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.baselines.audit import audit, audit_checks, default_policies, policy_kind, run_episode
from spectrum_rft.baselines import policies
from spectrum_rft.baselines.policies import is_memory_free, make_policy
from spectrum_rft.task.seeding import seed_for_row
from spectrum_rft.task.scan_format import parse_scan

ROOT = Path(__file__).resolve().parent.parent


def test_rows_carry_the_env_config_and_unique_ids(tmp_path):
    out = tmp_path / "d.jsonl"
    assert mk.main(["--n", "5", "--epochs", "3", "--prompt", "weak", "--preset", "seed", "--out", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 15 and len({r["id"] for r in rows}) == 15
    ctx = rows[0]["environment_context"]
    assert ctx["preset"] == "seed" and ctx["memory_mode"] == "scaffold" and ctx["prompt"] == "weak"
    assert row_config(ctx) == EnvConfig(preset="seed", memory_mode="scaffold", prompt="weak")
    # K epochs of never-repeating bands
    fps = {}
    for r in rows:
        env, seed = env_for_row(r["id"], {"environment_context": r["environment_context"]})
        assert seed == r["environment_context"]["seed"]
        env.reset(seed)
        fps.setdefault(env.metrics()["band_fingerprint"], []).append(r["id"])
    assert len(fps) == 15
    # reproducible
    out2 = tmp_path / "d2.jsonl"
    mk.main(["--n", "5", "--epochs", "3", "--prompt", "weak", "--preset", "seed", "--out", str(out2)])
    assert out.read_text() == out2.read_text()


def test_salt_changes_every_band_and_process_salt_is_recorded():
    a = mk.make_rows(3, salt="")
    b = mk.make_rows(3, salt="epoch-2")
    assert [r["environment_context"]["seed"] for r in a] != [r["environment_context"]["seed"] for r in b]
    p = mk.make_rows(2, salt="process")
    assert "seed" not in p[0]["environment_context"]
    env, seed = env_for_row(p[0]["id"], {"environment_context": p[0]["environment_context"]})
    env.reset(seed)
    salt = env.metrics()["salt"]
    assert salt.startswith("p") and salt != "process"


def test_dataset_adapter_accepts_raw_and_evaluation_rows_alike(monkeypatch):
    def no_env(*a, **k):
        raise AssertionError("the dataset adapter must not build or reset an env")

    monkeypatch.setattr(SpectrumEnv, "reset", no_env)
    monkeypatch.setattr(mk, "env_for_row", no_env, raising=False)
    raw = mk.make_rows(2, prompt="notepad-explicit")
    evr = [mk.to_evaluation_row_dict(r) for r in raw]
    a, b = mk.dataset_adapter(raw), mk.dataset_adapter(evr)
    assert [r.input_metadata.row_id for r in a] == [r.input_metadata.row_id for r in b]
    assert a[0].messages[0].role == "system" and "notepad" in a[0].messages[0].content
    assert a[0].input_metadata.dataset_info == b[0].input_metadata.dataset_info
    assert a[0].input_metadata.dataset_info["environment_context"]["memory_mode"] == "notepad"
    with pytest.raises(ValueError, match="neither"):
        mk.dataset_adapter([{"foo": 1}])
    # no process-wide truth registry: the oracle rebuilds its row from the call's metadata
    assert not any(hasattr(policies, n) for n in ("register_truth", "lookup_truth", "scan_key", "_TRUTH"))


def test_generator_rejects_bad_options(capsys):
    with pytest.raises(SystemExit):
        mk.main(["--n", "0", "--out", "x.jsonl"])
    with pytest.raises(SystemExit):
        mk.main(["--n", "2", "--preset", "nope", "--out", "x.jsonl"])
    assert "unknown preset" in capsys.readouterr().err


def test_policies_read_only_the_text():
    env = SpectrumEnv(EnvConfig(preset="seed", memory_mode="scaffold"))
    obs, _ = env.reset(21)
    sc = parse_scan(obs["prompt"])
    assert sc.scan == 1 and sc.n_scans == 12 and sc.band == (0.0, 180.0) and sc.max_regions == 16
    assert len(sc.peaks) == len(env._s.episode.scans[0].peaks)  # noqa: SLF001 (test peeks at the truth)
    mem = make_policy("memoryless")
    mem.observe(sc)
    assert mem.act()["center_freqs"] == [p[0] for p in sc.peaks]
    obs, *_ = env.step({"center_freqs": [33.3]})
    acc = make_policy("accumulate")
    acc.observe(parse_scan(obs["prompt"]))  # a fresh accumulator still sees the scaffold echo
    assert 33.3 in acc.act()["center_freqs"]
    assert parse_scan("hello") is None
    with pytest.raises(ValueError):
        make_policy("carpet-0")


def test_ladder_orders_policies_and_memory_metrics_move():
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="none"))
    res = {n: [run_episode(env, n, s) for s in range(40)] for n in ("empty", "memoryless", "accumulate", "oracle")}
    mean = {n: sum(m["score"] for m in ms) / len(ms) for n, ms in res.items()}
    assert mean["empty"] == 0.0 < mean["memoryless"] < mean["accumulate"] < mean["oracle"] == 1.0
    recall = {n: sum(m["dormant_recall"] for m in ms) / len(ms) for n, ms in res.items() if n != "empty"}
    assert recall["memoryless"] < 0.1 < 0.7 < recall["accumulate"]
    gain = {n: sum(m["memory_gain"] for m in ms) / len(ms) for n, ms in res.items()}
    assert gain["accumulate"] > 0.1 and abs(gain["oracle"]) < 1e-12


def test_reward_audit_default_passes_at_500_episodes_against_every_memory_free_policy():
    """The acceptance test of the default reward: the ladder, the best blind tilings and every padded
    composite (memoryless + random / carpet / shifted / duplicated copies; accumulate + padding)."""
    pols = [p for p in default_policies("default") if not p.startswith(("carpet-", "random-"))]
    pols += ["carpet-16", "carpet-14", "random-16"]
    r = audit("default", "default", 500, pols)
    assert (r["preset"], r["reward"]) == ("default-v2", "match_iou")  # the versions it certifies, recorded
    checks = audit_checks(r)
    assert all(ok for _, ok in checks), checks
    assert len(checks) == 6 and r["best_memory_free"] in pols
    ml = r["policies"]["memoryless"]["score"]
    assert max(v["score"] for k, v in r["policies"].items() if is_memory_free(k)) <= 1.05 * ml  # the aim
    assert set(r["padding"]) == {p for p in pols if "+" in p}


def test_the_audit_catches_padding_on_the_earlier_default():
    """The checks fail where they should: on ``default-v1`` (480 MHz, occ_iou) a memoryless report padded
    with random regions to the cap beats memoryless by > 1.25x, and the padding check names it."""
    r = audit("default-v1", "default-v1", 150, ["memoryless", "accumulate", "oracle", "memoryless+random",
                                                "memoryless+shift-4.5", "accumulate+random"])
    assert (r["preset"], r["reward"]) == ("default-v1", "occ_iou")
    checks = dict(audit_checks(r))
    free = next(k for k in checks if k.startswith("every memory-free"))
    pad = next(k for k in checks if k.startswith("padding never raises"))
    assert not checks[free] and "memoryless+random " in free
    assert not checks[pad] and r["padding"]["memoryless+random"]["diff"] > 5 * r["padding"]["memoryless+random"]["se"]
    assert r["padding"]["accumulate+random"]["diff"] < 0  # accumulation is past the density: padding costs it


def test_composite_policies_pad_the_base_report_to_the_cap():
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="none"))
    obs, _ = env.reset(5)
    sc = parse_scan(obs["prompt"])
    base = make_policy("memoryless")
    base.observe(sc)
    cs = base.act()["center_freqs"]
    for name, size in (("memoryless+random", 16), ("memoryless+random-2", len(cs) + 2), ("memoryless+carpet", 16),
                       ("memoryless+dup", 16), ("memoryless+shift-4.5", min(16, 3 * len(cs)))):
        pol = make_policy(name, seed=7)
        pol.observe(sc)
        rep = pol.act()["center_freqs"]
        assert rep[: len(cs)] == cs and len(rep) == size, name  # the base report first, then the padding
        assert all(0.0 <= c <= 720.0 for c in rep)
        pol2 = make_policy(name, seed=7)
        pol2.observe(sc)
        assert pol2.act()["center_freqs"] == rep  # seeded: the same padding on the same band
    shifted = make_policy("memoryless+shift-4.5")
    shifted.observe(sc)
    assert shifted.act()["center_freqs"][len(cs):len(cs) + 2] == [cs[0] + 4.5, cs[0] - 4.5]
    assert [policy_kind(n) for n in ("memoryless", "memoryless+dup", "carpet-4", "accumulate+random", "oracle")] == \
        ["baseline", "padded", "blind", "memory", "privileged"]
    assert is_memory_free("memoryless+random-3") and not is_memory_free("accumulate+carpet")
    for bad in ("memoryless+random-0", "memoryless+shift-0", "oracle+random", "memoryless+wizard", "accumulate+"):
        with pytest.raises(ValueError):
            make_policy(bad)


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1, max_size=12), st.integers(0, 11))
def test_over_random_bands_a_region_on_no_transmitter_lowers_the_default_reward(row, k):
    """The padding rule through the env, over random bands (rows) and scans: the memoryless report plus one
    centre that lies on no transmitter scores strictly less than the memoryless report alone, and a second
    centre on a transmitter it already found scores less too."""
    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="none"))
    seed = seed_for_row(row)
    scores = []
    for pad in ("none", "miss", "dup"):
        obs, _ = env.reset(seed)
        for _ in range(k):
            obs, *_ = env.step({"center_freqs": []})
        pol = make_policy("memoryless")
        pol.observe(parse_scan(obs["prompt"]))
        cs = pol.act()["center_freqs"]
        truth = env.truth()
        if pad == "miss":
            cs = cs + [next(x for x in (1.0, 2.0, 3.0, 719.0) if all(abs(x - c) > w / 2 for c, w in truth))]
        elif pad == "dup":
            found = [c for c, w in truth if any(abs(x - c) <= w / 2 for x in cs)]
            if not found:
                return
            cs = cs + [found[0] + 1.0]
        _, r, *_ = env.step({"center_freqs": cs})
        scores.append(r)
    none, miss, dup = scores
    assert miss < none and dup < none


def test_reward_audit_seed_preset_reproduces_the_original_and_shows_the_carpet_exploit():
    r = audit("seed", "occ_iou", 500, ["memoryless", "accumulate", "carpet-16"])
    p = r["policies"]
    assert p["memoryless"]["score"] == pytest.approx(0.16, abs=0.03)
    assert 0.45 <= p["accumulate"]["score"] <= 0.52
    assert p["carpet-16"]["score"] > 2 * p["memoryless"]["score"]  # the exploit the default preset removes


def test_audit_cli_json_shape():
    r = subprocess.run([sys.executable, "-m", "spectrum_rft", "audit", "--preset", "seed", "--reward", "occ_iou",
                        "--episodes", "5", "--policies", "memoryless,accumulate,oracle,carpet-8", "--json"],
                       cwd=ROOT, capture_output=True, text=True, check=True)
    out = json.loads(r.stdout)
    assert set(out) == {"preset", "reward", "episodes", "policies", "padding"}
    assert set(out["policies"]["accumulate"]) == {"score", "memory_gain", "dormant_recall"}
    assert out["policies"]["oracle"]["score"] == 1.0
    bad = subprocess.run([sys.executable, "-m", "spectrum_rft", "audit", "--policies", "wizard"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown policy" in bad.stderr
    b90 = subprocess.run([sys.executable, "-m", "spectrum_rft", "audit", "--preset", "bench90"], cwd=ROOT,
                         capture_output=True, text=True)
    assert b90.returncode == 2 and "spectrum-rft bench90" in b90.stderr.splitlines()[-1]


def test_padding_a_good_report_with_blind_tiles_lowers_the_default_reward():
    """The default preset's exploit check: filling the unused slots of the accumulate report with evenly
    spaced tiles must not pay."""
    from spectrum_rft.baselines.policies import Accumulate

    env = SpectrumEnv(EnvConfig(preset="default", memory_mode="none"))
    plain, padded = [], []
    for pad in (False, True):
        for s in range(150):
            obs, _ = env.reset(s)
            acc = Accumulate()
            while not obs["done"]:
                acc.observe(parse_scan(obs["prompt"]))
                rep = acc.act()["center_freqs"]
                if pad:
                    free = 16 - len(rep)
                    rep = rep + [720.0 * (i + 0.5) / free for i in range(free)] if free else rep
                obs, *_ = env.step({"center_freqs": rep})
            (padded if pad else plain).append(env.metrics()["score"])
    assert sum(padded) < sum(plain)


def test_env_for_row_honours_an_explicit_seed_zero_included():
    env, seed = env_for_row("anything", {"environment_context": {"preset": "seed", "seed": 0}})
    assert seed == 0
    env, seed = env_for_row("r1", {"environment_context": {"preset": "seed"}})
    from spectrum_rft.task.environment import seed_for_row

    assert seed == seed_for_row("r1")
    with pytest.raises(ValueError, match="run index"):
        env_for_row("b", {"environment_context": {"preset": "bench90", "memory_mode": "none"}})


def test_make_rows_refuses_a_run_index_preset_naming_spectrum_rft_bench90():
    """A bench90 row must pin its run index; the generic row writer would hash the row id instead."""
    with pytest.raises(ValueError, match="spectrum-rft bench90"):
        mk.make_rows(1, preset="bench90")
    with pytest.raises(SystemExit) as e:
        mk.main(["--n", "1", "--preset", "bench90", "--out", "unused.jsonl"])
    assert e.value.code == 2
