"""The TRL environment adapter (spectrum_rft/training/spectrum/trl_env.py): its tools are the env's tools, and a
policy driven through it scores exactly what the evaluator scores.

"Same schema" (what TRL shows the model, ``get_json_schema(method)``, against the env's ``tool_schemas``):
the same function name and description; the same parameter names, the same ``required`` set; per
parameter the same ``type``, ``items`` and description. Allowed differences, nothing else: the generated
schema may mark an optional (non-required) parameter ``nullable`` (the adapter drops a null optional, as the
MCP path does); the env's schema adds the keywords type hints cannot carry (``trl_env.UNSAID_KEYWORDS``:
``maxItems``, the region cap, and bounds on a list's numbers, the band), which the grammar and the env
enforce and whose values the description says in words.
"""

from __future__ import annotations

import math
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.utils import get_json_schema

from spectrum_rft.baselines.audit import run_episode
from spectrum_rft.baselines.policies import make_policy
from spectrum_rft.rollouts.dataset import make_rows
from spectrum_rft.task import scan_format
from spectrum_rft.task.environment import (
    MEMORY_MODES,
    PRESETS,
    EnvConfig,
    SpectrumEnv,
    env_for_row,
    get_preset,
    tool_schemas,
)
from spectrum_rft.task.memory import memory_mode
from spectrum_rft.task.scan_format import parse_scan
from spectrum_rft.training.spectrum.trl_env import (
    TOOL_ENV_CLASSES,
    SpectrumIclNotepadToolEnv,
    SpectrumNotepadToolEnv,
    SpectrumToolEnv,
    environment_factories,
    environment_name,
    spectrum_reward,
    UNSAID_KEYWORDS,
    tool_env_class,
    tool_names,
)

GENERATED_ONLY = {"nullable"}  # allowed only on optional parameters
ENV_ONLY = set(UNSAID_KEYWORDS)


def schema_differences(generated: dict, env_entry: dict) -> list[str]:
    """Every way ``generated`` (get_json_schema) differs from ``env_entry`` (tool_schemas) beyond the
    allowed differences of the module docstring; [] when they are the same."""
    g, e = generated["function"], env_entry["function"]
    out = []
    if g["name"] != e["name"]:
        out.append(f"name {g['name']!r} != {e['name']!r}")
    if g.get("description") != e.get("description"):
        out.append(f"{e['name']}: description {g.get('description')!r} != {e.get('description')!r}")
    gp, ep = g["parameters"], e["parameters"]
    if gp.get("type") != ep.get("type"):
        out.append(f"{e['name']}: parameters type {gp.get('type')!r} != {ep.get('type')!r}")
    g_req, e_req = set(gp.get("required", [])), set(ep.get("required", []))
    if g_req != e_req:
        out.append(f"{e['name']}: required {sorted(g_req)} != {sorted(e_req)}")
    gprops, eprops = gp.get("properties", {}), ep.get("properties", {})
    if set(gprops) != set(eprops):
        out.append(f"{e['name']}: parameters {sorted(gprops)} != {sorted(eprops)}")
    for name in set(gprops) & set(eprops):
        a, b = gprops[name], eprops[name]
        where = f"{e['name']}.{name}"
        if a.get("type") != b.get("type"):
            out.append(f"{where}: type {a.get('type')!r} != {b.get('type')!r}")
        env_items = {k: v for k, v in b.get("items", {}).items() if k not in ENV_ONLY} if "items" in b else None
        if a.get("items") != env_items:
            out.append(f"{where}: items {a.get('items')!r} != {env_items!r}")
        extra_g = set(a) - set(b) - {"description"}
        if extra_g - GENERATED_ONLY or ("nullable" in extra_g and (name in e_req or a["nullable"] is not True)):
            out.append(f"{where}: generated schema adds {sorted(extra_g)}")
        extra_e = set(b) - set(a) - {"description"}
        if extra_e - ENV_ONLY:
            out.append(f"{where}: env schema adds {sorted(extra_e)}")
        if a.get("description") != b.get("description") or not a.get("description"):
            out.append(f"{where}: description {a.get('description')!r} != {b.get('description')!r}")
        said = {float(x) for x in re.findall(r"\d+(?:\.\d+)?", str(a.get("description", "")))}
        for key, value in [*((k, b[k]) for k in ENV_ONLY & set(b)),
                           *((k, v) for k, v in b.get("items", {}).items() if k in ENV_ONLY)]:
            if float(value) not in said:
                out.append(f"{where}: {key} = {value} is not in the words the model reads")
    return out


@pytest.mark.parametrize("preset", [p for p in PRESETS if not PRESETS[p].seed_is_run_index])  # what TRL rows play
@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_tool_schemas_match_the_env(mode, preset):
    env = tool_env_class(mode, preset)()
    expected = {t["function"]["name"]: t for t in tool_schemas(mode, preset)}
    assert tool_names(env) == set(expected), f"{mode}: the adapter's tools are not the env's"
    for name, entry in expected.items():
        diffs = schema_differences(get_json_schema(getattr(env, name)), entry)
        assert diffs == [], f"{mode}/{preset}: {diffs}"


def test_schema_comparison_catches_differences():
    """The comparison is not vacuous: a wrong type, a lost default, an extra parameter all show."""

    class Wrong(SpectrumToolEnv):
        def submit_report(self, center_freqs: list[int], bandwidths: list[float], extra: str = "") -> str:
            """Report the occupied regions of the band for the current scan. Ends the scan.

            Args:
                center_freqs: Centre frequency in MHz of every occupied region
                bandwidths: Optional: bandwidth in MHz of each region, same length as center_freqs.
                extra: Something else.
            """
            return ""

    diffs = schema_differences(get_json_schema(Wrong().submit_report), tool_schemas("scaffold")[0])
    text = "\n".join(diffs)
    assert "center_freqs: items" in text and "required" in text and "parameters" in text, diffs
    assert "center_freqs: description" in text, diffs  # the band and the cap are not in its words
    # the default preset's declaration read against another preset's schema: its band and cap are not said
    text = "\n".join(schema_differences(get_json_schema(SpectrumToolEnv().submit_report),
                                        tool_schemas("scaffold", "default-v1")[0]))
    assert "maximum = 480" in text, text
    assert tool_names(SpectrumNotepadToolEnv()) != {t["function"]["name"] for t in tool_schemas("scaffold")}


def test_metrics_and_reset_are_not_tools_and_factories_cover_every_mode():
    for cls in TOOL_ENV_CLASSES:
        names = tool_names(cls())
        assert "metrics" not in names and "reset" not in names
    factories = environment_factories()
    for mode in MEMORY_MODES:
        assert factories[environment_name(mode)] is tool_env_class(mode)
        assert tool_env_class(mode).TOOL_SET == memory_mode(mode).tool_set
    assert tool_env_class("icl_notepad") is SpectrumIclNotepadToolEnv
    with pytest.raises(ValueError, match="memory_mode"):
        SpectrumToolEnv().reset(**make_rows(1, memory_mode="notepad")[0])
    with pytest.raises(ValueError, match="preset"):  # its tools declare another band
        SpectrumToolEnv().reset(**make_rows(1, memory_mode="scaffold", preset="default-v1")[0])
    v1 = tool_env_class("scaffold", "default-v1")
    assert v1 is tool_env_class("none", "default-v1") and v1 is not SpectrumToolEnv
    assert v1().reset(**make_rows(1, memory_mode="scaffold", preset="default-v1")[0]).startswith("Scan 1")
    assert tool_env_class("scaffold", "default") is SpectrumToolEnv  # an alias names the same preset


# ---- one schema: what the model reads (above), what the grammar enforces (tests/test_sampler.py) and what
# the env accepts ----------------------------------------------------------------------------------------

_numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**4, 10**4))


@st.composite
def _arguments(draw, preset):
    """Arguments near the edge of ``preset``'s report schema: in and out of the band, at and past the cap,
    lengths matching or not, wrong types, unknown fields."""
    lo, hi = get_preset(preset).band
    cap = get_preset(preset).max_regions
    near = st.one_of(st.floats(lo, hi), st.sampled_from([lo, hi, lo - 1e-6, hi + 1e-6, hi + 1]), _numbers)
    n = draw(st.integers(0, cap + 2))
    args: dict = {"center_freqs": draw(st.lists(near, min_size=n, max_size=n))}
    if draw(st.booleans()):
        m = n if draw(st.booleans()) else draw(st.integers(0, cap + 2))
        args["bandwidths"] = draw(st.lists(st.one_of(st.floats(-1, hi - lo + 1), _numbers), min_size=m, max_size=m))
    if draw(st.integers(0, 9)) == 0:
        args[draw(st.sampled_from(["extra", "widths"]))] = draw(_numbers)
    if draw(st.integers(0, 9)) == 0:
        args["center_freqs"] = draw(st.sampled_from(["100", None, True, [[1.0]], ["5"]]))
    return args


def _schema_allows(args: dict, preset: str) -> bool:
    """``tool_schemas``' report parameters (JSON Schema: a field they do not name is allowed, and ignored) and
    what the description says in words only (the bandwidths list as long as center_freqs)."""
    params = tool_schemas("scaffold", preset)[0]["function"]["parameters"]
    if not get_preset(preset).report_width and "bandwidths" in args:
        bw, cf = args["bandwidths"], args["center_freqs"]
        if isinstance(bw, list) and isinstance(cf, list) and len(bw) != len(cf):
            return False
    try:
        jsonschema.validate(args, params)
    except jsonschema.ValidationError:
        return False
    return all(math.isfinite(x) for v in args.values() if isinstance(v, list) for x in v
               if isinstance(x, (int, float)) and not isinstance(x, bool))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), preset=st.sampled_from(["default", "bench90"]))  # a fixed width, and bandwidths offered
def test_the_env_accepts_exactly_what_the_schema_allows(data, preset):
    args = data.draw(_arguments(preset))
    if get_preset(preset).report_width and "bandwidths" in args:
        # not in that preset's schema: ignored whatever it holds (a field the env throws away never refuses)
        del args["bandwidths"]
    env = SpectrumEnv(EnvConfig(memory_mode="scaffold", preset=preset))
    env.reset(1)  # bench90's seed is its run index
    res = env.call_tool("submit_report", args, first=True, last=True)
    assert res.advanced == res.ok == _schema_allows(args, preset), (args, res.content)


# ---- parity: the scripted accumulate policy through the adapter scores what the evaluator scores ------------


def _expected_texts(row: dict) -> list[str]:
    """What the in-process path shows with the same actions: the first scan, then per report the env's
    feedback and the next scan (the MCP path's tool-result shape the adapter uses)."""
    env, seed = env_for_row(row["id"], {"environment_context": row["environment_context"]})
    obs, _ = env.reset(seed)
    texts, history = [obs["prompt"]], [parse_scan(obs["prompt"])]
    while not obs["done"]:
        obs, _, done, _, info = env.step(make_policy("accumulate").act_on(history))
        assert info["advanced"]
        fb = scan_format.render_feedback(info["scan"], env.n_scans, done)
        texts.append(fb if done else f"{fb}\n\n{obs['prompt']}")
        history.append(parse_scan(obs["prompt"]) if not done else None)
    return texts


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_accumulate_through_the_adapter_scores_what_the_evaluator_scores(mode):
    for row in make_rows(3, memory_mode=mode, prefix=f"trl-{mode}"):
        adapter = tool_env_class(mode)()
        text = adapter.reset(**row)
        texts, history = [text], []
        while True:
            scan = parse_scan(text)
            if scan is None:
                break
            history.append(scan)
            text = adapter.submit_report(**make_policy("accumulate").act_on(history))  # stateless, as served
            texts.append(text)
        got = adapter.metrics()

        env, seed = env_for_row(row["id"], {"environment_context": row["environment_context"]})
        want = run_episode(env, "accumulate", seed, history=True)
        assert len(history) == want["n_scans"]
        assert got["per_scan_reward"] == want["per_scan_reward"]  # exact floats
        for key in ("score", "memory_gain", "dormant_recall", "carry_rate", "scans_skipped", "band_fingerprint"):
            assert got[key] == want[key], key
        assert got["faults"] == {} and got["row_id"] == row["id"]
        assert texts == _expected_texts(row)
        assert want["score"] > 0


def test_candidates_of_a_row_share_the_band_and_instances_reset_clean():
    row_a, row_b = make_rows(2, memory_mode="scaffold", prefix="trl-group")
    first, second = SpectrumToolEnv(), SpectrumToolEnv()
    assert first.reset(**row_a) == second.reset(**row_a)
    assert first.metrics()["band_fingerprint"] == second.metrics()["band_fingerprint"]
    first.submit_report(center_freqs=[100.0])
    reused = first.reset(**row_b)  # TRL reuses instances across batches
    fresh = SpectrumToolEnv()
    assert reused == fresh.reset(**row_b)
    assert first.metrics() == fresh.metrics()
    assert first.metrics()["band_fingerprint"] != second.metrics()["band_fingerprint"]
    # TRL's columns: the row id may come as row_id; a datasets struct fills absent keys with None
    ctx = {**row_a["environment_context"], "unknown": None}
    assert SpectrumToolEnv().reset(row_id=row_a["id"], environment_context=ctx, prompt=[]) == second.reset(**row_a)


# ---- bad model input never raises; the env refuses it ------------------------------------------------------


def test_bad_model_input_is_refused_by_the_env_not_raised():
    env = SpectrumNotepadToolEnv()
    env.reset(**make_rows(1, memory_mode="notepad", prefix="trl-bad")[0])
    bad = [(), ("x",), (None,), ([float("nan")],), ([1e9],), (list(range(100)),), ([10.0, "x"],), ([-5.0],),
           ({"a": 1},)]
    outs = [env.submit_report(*args) for args in bad]
    outs.append(env.submit_report(center_freqs="10", bogus=1, bandwidths=[-3.0]))
    outs.append(env.notepad_write(text=123))
    outs.append(env.notepad_write())
    outs.append(env.notepad_write(text="x" * 100_000))
    assert all(isinstance(o, str) and o.startswith("Error") for o in outs), outs
    assert sum(env.metrics()["faults"].values()) >= len(outs)
    assert env.metrics()["scans_skipped"] >= 1  # the call budget closed scans, as in the evaluator
    assert env.notepad_write(text="peaks near 100") .startswith("Notepad saved")
    assert env.notepad_read() == "peaks near 100"
    assert env.submit_report(center_freqs=[100.0], bandwidths=None).startswith("Scan ")  # null optional dropped
    # a field the preset ignores (bandwidths: not in the fixed-width preset's schema) never refuses a report
    assert env.submit_report(center_freqs=[100.0], bandwidths=[-3.0, 1e9]).startswith("Scan ")
    assert SpectrumToolEnv().submit_report(center_freqs=[1.0]).startswith("Error")  # before reset
    icl = SpectrumIclNotepadToolEnv()
    icl.reset(**make_rows(1, memory_mode="icl_notepad", prefix="trl-icl")[0])
    text = icl.submit_report(center_freqs=[50.0], notepad_update="seen 50")
    assert "seen 50" in text and parse_scan(text) is not None  # the next scan shows the notepad
    text = icl.submit_report(center_freqs=[50.0], bandwidths=None, notepad_update=None)  # nulls: not sent
    assert "notepad not updated" not in text and "seen 50" in text and icl.metrics()["faults"] == {}


def test_done_episode_and_reward_function():
    row = make_rows(1, memory_mode="scaffold", prefix="trl-reward")[0]
    envs = [SpectrumToolEnv(), SpectrumToolEnv()]
    for e in envs:
        e.reset(**row)
    envs[0].submit_report(center_freqs=[100.0])
    metrics, extra = {}, {}
    scores = spectrum_reward(envs, log_metric=metrics.__setitem__, log_extra=extra.__setitem__)
    assert scores == [e.metrics()["score"] for e in envs]
    assert {"spectrum/score", "spectrum/memory_gain", "spectrum/scans_skipped"} <= set(metrics)
    assert extra["band_fingerprint"][0] == extra["band_fingerprint"][1] and extra["row_id"] == [row["id"]] * 2
    while not envs[1]._started().done:
        last = envs[1].submit_report(center_freqs=[])
    assert "Monitoring complete" in last and parse_scan(last) is None
    assert envs[1].submit_report(center_freqs=[]).startswith("Error")
