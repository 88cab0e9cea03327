"""``spectrum-rft report`` on rows from real local runs of the environment.

Rows are produced by playing :class:`spectrum_adapter.SpectrumEnv` with the scripted policies of
``spectrum_policies`` over a ``--epochs`` dataset (several rollouts per row, as GRPO candidates), wrapped in
EvaluationRow objects the way the evaluation entries do (metrics on ``evaluation_result``, the env's
metrics dict in ``execution_metadata.extra["spectrum"]``). When ``test_spectrum_turn.py`` is in the
checkout, one test also runs that entry through pytest on a small ``--epochs`` dataset and reports on its
experiment JSONL.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectrum_rft.tools.report import main
from spectrum_rft.common.stats import linear_fit
from spectrum_rft.tools.report.validate import RowError, parse_row

ROOT = Path(__file__).resolve().parent.parent
N_ROWS, N_EPOCHS, N_ROLLOUTS = 3, 4, 2


def _metric_results(m: dict) -> dict:
    from eval_protocol.models import MetricResult

    out = {}
    for name, v in m.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out[name] = MetricResult(score=float(v), reason=f"{name}={v}")
        elif v is None:
            out[name] = MetricResult(score=0.0, is_score_valid=False, reason=f"{name} undefined")
        elif isinstance(v, str):
            out[name] = MetricResult(score=0.0, is_score_valid=False, reason=f"{name}={v}", data={"value": v})
    return out


def local_rows(memory_mode: str, *, learn: bool, n: int = N_ROWS, epochs: int = N_EPOCHS,
               k: int = N_ROLLOUTS, experiment_id: str | None = None, spectrum_extra: bool = True) -> list[dict]:
    """EvaluationRow JSON from real episodes. With ``learn`` the share of rollouts played by the
    memory-using policy grows with the epoch (a training curve); otherwise every rollout is memoryless."""
    from eval_protocol.models import EvaluateResult, EvaluationRow, Status

    from spectrum_rft.rollouts.dataset import make_rows, to_evaluation_row_dict
    from spectrum_rft.task.environment import env_for_row
    from spectrum_rft.baselines.audit import run_episode

    out = []
    for raw in make_rows(n, prompt="explicit", memory_mode=memory_mode, epochs=epochs):
        base = to_evaluation_row_dict(raw)
        e, i = raw["environment_context"]["epoch"], int(raw["id"][-4:])
        for j in range(k):
            env, seed = env_for_row(raw["id"], base["input_metadata"]["dataset_info"])
            policy = "accumulate" if learn and (i * k + j) % epochs < e else "memoryless"
            m = run_episode(env, policy, seed, history=True)
            row = EvaluationRow.model_validate(base)
            row.execution_metadata.extra = {"spectrum": m} if spectrum_extra else None
            if experiment_id:
                row.execution_metadata.experiment_id = experiment_id
            row.evaluation_result = EvaluateResult(score=m["score"], metrics=_metric_results(m))
            row.rollout_status = Status.rollout_finished()
            out.append(row.model_dump(mode="json", exclude_none=True))
    return out


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("rows")
    return {"weak": write_jsonl(d / "weak.jsonl", local_rows("scaffold", learn=True)),
            "ctrl": write_jsonl(d / "ctrl.jsonl", local_rows("scrambled", learn=False))}


def _report(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# --------------------------------------------------------------------------------------------------
# On real local rows
# --------------------------------------------------------------------------------------------------


def test_report_on_local_rows(runs, tmp_path, capsys):
    png = tmp_path / "curves.png"
    rc, out, err = _report(capsys, f"weak={runs['weak']}", f"ctrl={runs['ctrl']}", "--png", str(png))
    assert rc == 0, err
    assert "run weak: 24 rollouts of 12 rows in 4 epochs (prompt=explicit, memory_mode=scaffold)" in out
    assert "group integrity (rollouts of a row share one band): PASS (12 rows, 2 rollout(s) each)" in out
    assert "group integrity (rows differ): PASS (12 distinct bands for 12 rows)" in out
    assert "freshness (no band repeats across epochs): PASS (12 bands, each in one of 4 epochs)" in out
    assert "early half (epochs 0-1) vs late half (epochs 2-3):" in out
    assert "control comparison: weak (treatment) vs ctrl (control)" in out
    assert "paired over 12 bands both runs saw" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_numbers_match_the_rows(runs, tmp_path, capsys):
    rc, out, _ = _report(capsys, str(runs["weak"]), "--json", "--png", "")
    assert rc == 0
    rep = json.loads(out)
    run = rep["runs"][0]
    rows = [json.loads(x) for x in runs["weak"].read_text().splitlines()]
    for p in run["per_epoch"]:
        mine = [r for r in rows if r["input_metadata"]["dataset_info"]["environment_context"]["epoch"] == p["epoch"]]
        assert p["rollouts"] == len(mine) == N_ROWS * N_ROLLOUTS
        assert p["score"] == pytest.approx(np.mean([r["evaluation_result"]["score"] for r in mine]))
        for m in ("memory_gain", "dormant_recall", "carry_rate"):
            vals = [r["execution_metadata"]["extra"]["spectrum"][m] for r in mine]
            vals = [v for v in vals if v is not None]
            assert p[m] == pytest.approx(np.mean(vals)) if vals else p[m] is None
    xs = [p["epoch"] for p in run["per_epoch"]]
    ys = [p["score"] for p in run["per_epoch"]]
    slope, intercept = np.polyfit(xs, ys, 1)
    assert run["trend"]["score"]["slope"] == pytest.approx(slope)
    assert run["trend"]["score"]["slope"] > 0  # the scripted "learning" curve rises
    assert run["halves"]["early"] == [0, 1] and run["halves"]["late"] == [2, 3]
    assert rep["checks_ok"] is True and rep["comparisons"] == []


def test_metrics_without_the_extra_dict(tmp_path, capsys):
    """Rows that carry only evaluation_result.metrics (no extra["spectrum"]) report the same numbers."""
    a = write_jsonl(tmp_path / "a.jsonl", local_rows("scaffold", learn=True, n=2, epochs=2, k=1))
    b = write_jsonl(tmp_path / "b.jsonl", local_rows("scaffold", learn=True, n=2, epochs=2, k=1,
                                                      spectrum_extra=False))
    ra = json.loads(_report(capsys, str(a), "--json", "--png", "")[1])["runs"][0]
    rb = json.loads(_report(capsys, str(b), "--json", "--png", "")[1])["runs"][0]
    assert ra["per_epoch"] == rb["per_epoch"]
    assert [c["ok"] for c in rb["checks"]] == [True, True, True]


def test_control_is_the_scrambled_run_whatever_the_order(runs, capsys):
    rc, out, _ = _report(capsys, f"c={runs['ctrl']}", f"w={runs['weak']}", "--json", "--png", "")
    (cmp,) = json.loads(out)["comparisons"]
    assert (cmp["treatment"], cmp["control"]) == ("w", "c")
    d = cmp["metrics"]["score"]
    assert d["slope_difference"] == pytest.approx(d["treatment_slope"] - d["control_slope"])
    assert cmp["paired"]["shared_bands"] == N_ROWS * N_EPOCHS  # same salt and prefix: same bands


def test_freshness_fails_when_bands_repeat(runs, tmp_path, capsys):
    rows = [json.loads(x) for x in runs["weak"].read_text().splitlines()]
    for r in rows:  # replay epoch 0's rows as epoch 1 (the 'repeat' schedule)
        ctx = r["input_metadata"]["dataset_info"]["environment_context"]
        if ctx["epoch"] == 0:
            ctx["epoch"] = 1
            r["execution_metadata"]["rollout_id"] += "-again"
    rows += [json.loads(x) for x in runs["weak"].read_text().splitlines() if '"epoch":0' in x.replace(" ", "")]
    p = write_jsonl(tmp_path / "rep.jsonl", rows)
    rc, out, _ = _report(capsys, str(p), "--png", "", "--fail-on-check")
    assert rc == 1
    assert "freshness (no band repeats across epochs): FAIL (3 of 12 bands repeat across epochs" in out


def test_integrity_fails_when_a_rows_rollouts_see_different_bands(runs, tmp_path, capsys):
    rows = [json.loads(x) for x in runs["weak"].read_text().splitlines()]
    rows[1]["execution_metadata"]["extra"]["spectrum"]["band_fingerprint"] = "deadbeef0000"  # rollout 2 of row 0
    rows[5]["execution_metadata"]["extra"]["spectrum"]["band_fingerprint"] = \
        rows[2]["execution_metadata"]["extra"]["spectrum"]["band_fingerprint"]  # row 2 shares row 1's band
    rc, out, _ = _report(capsys, str(write_jsonl(tmp_path / "x.jsonl", rows)), "--png", "")
    assert rc == 0
    assert "group integrity (rollouts of a row share one band): FAIL (2 rows saw several bands" in out
    assert "group integrity (rows differ): FAIL (" in out


def test_missing_fingerprints_cannot_pass(runs, tmp_path, capsys):
    rows = [json.loads(x) for x in runs["weak"].read_text().splitlines()]
    for r in rows:
        r["execution_metadata"]["extra"]["spectrum"].pop("band_fingerprint")
        r["evaluation_result"]["metrics"].pop("band_fingerprint")
    rc, out, _ = _report(capsys, str(write_jsonl(tmp_path / "nofp.jsonl", rows)), "--png", "")
    assert rc == 0
    assert out.count(": FAIL (") == 3 and "cannot verify" in out


def test_group_by_input_run_id_and_order(runs, tmp_path, capsys):
    rows = [json.loads(x) for x in runs["weak"].read_text().splitlines()]
    a = write_jsonl(tmp_path / "ck1.jsonl", rows[:8])
    b = write_jsonl(tmp_path / "ck2.jsonl", rows[8:])
    rep = json.loads(_report(capsys, f"ck={a}", f"ck={b}", "--group-by", "input", "--json", "--png", "")[1])
    assert [(p["input"], p["rollouts"]) for p in rep["runs"][0]["per_epoch"]] == [(0, 8), (1, 16)]
    rep = json.loads(_report(capsys, str(runs["weak"]), "--group-by", "order:3", "--json", "--png", "")[1])
    assert [p["rollouts"] for p in rep["runs"][0]["per_epoch"]] == [8, 8, 8]
    for i, r in enumerate(rows):
        r["execution_metadata"]["run_id"] = f"run-{i % 2}"
    rep = json.loads(_report(capsys, str(write_jsonl(tmp_path / "r.jsonl", rows)), "--group-by", "run-id",
                             "--json", "--png", "")[1])
    assert [p["rollouts"] for p in rep["runs"][0]["per_epoch"]] == [12, 12]


def test_eval_protocol_experiment_jsonl(runs, tmp_path, capsys, monkeypatch):
    """The file eval-protocol writes with --ep-output-dir (its own writer, EP_NO_UPLOAD=1: no network)."""
    from eval_protocol.models import EvaluationRow
    from eval_protocol.pytest.handle_persist_flow import handle_persist_flow

    monkeypatch.setenv("EP_OUTPUT_DIR", str(tmp_path))  # offline settings: conftest
    rows = [EvaluationRow.model_validate(json.loads(x)) for x in runs["weak"].read_text().splitlines()]
    for r in rows:
        r.execution_metadata.experiment_id = "exp-a"
    handle_persist_flow([rows], "test_spectrum_turn")
    exp = tmp_path / "experiment_results"
    assert (exp / "exp-a.jsonl").is_file()
    rc, out, err = _report(capsys, f"ep={exp}", "--json", "--png", "")
    assert rc == 0, err
    assert json.loads(out)["runs"][0]["rollouts"] == N_ROWS * N_EPOCHS * N_ROLLOUTS


def test_logs_db(tmp_path, capsys):
    """eval-protocol's sqlite store (written by its own store class): latest experiment by default,
    --experiment to choose, unscored rows (rollouts in progress) skipped and counted."""
    from eval_protocol.dataset_logger.sqlite_evaluation_row_store import SqliteEvaluationRowStore

    db = tmp_path / "logs.db"
    store = SqliteEvaluationRowStore(str(db))
    old = local_rows("scaffold", learn=False, n=2, epochs=2, k=1, experiment_id="exp-old")
    new = local_rows("scaffold", learn=True, n=2, epochs=3, k=2, experiment_id="exp-new")
    for r in old:
        r["created_at"] = "2020-01-01T00:00:00Z"
    running = json.loads(json.dumps(new[0]))
    running["execution_metadata"]["rollout_id"] = "still-running"
    running.pop("evaluation_result")
    for r in old + new + [running]:
        store.upsert_row(r)
    rc, out, err = _report(capsys, "--logs-db", str(db), "--json", "--png", "")
    assert rc == 0, err
    rep = json.loads(out)
    assert [r["run"] for r in rep["runs"]] == ["exp-new"]
    assert rep["runs"][0]["rollouts"] == 12 and rep["skipped"]["incomplete"] == 1
    assert any("2 experiments; reporting the latest, exp-new" in n for n in rep["notes"])
    rep = json.loads(_report(capsys, "--logs-db", str(db), "--experiment", "exp-new", "--experiment", "exp-old",
                             "--json", "--png", "")[1])
    assert [r["run"] for r in rep["runs"]] == ["exp-new", "exp-old"] and len(rep["comparisons"]) == 1
    rc, _, err = _report(capsys, "--logs-db", str(db), "--experiment", "nope", "--png", "")
    assert rc == 2 and "no scored rows for experiment(s) nope" in err


def test_spectrum_eval_out_folder(tmp_path, capsys):
    """The layout of ``spectrum-rft eval --out DIR``: dataset.jsonl (inputs), rows.jsonl (every model's
    scored rows), summary.json. One run per model; the input rows are not results."""
    from spectrum_rft.rollouts.dataset import make_rows, write_jsonl as write_raw

    d = tmp_path / "eval"
    d.mkdir()
    write_raw(make_rows(3, prompt="explicit"), d / "dataset.jsonl")
    rows = []
    for model, learn in (("spectrum/memoryless", False), ("spectrum/accumulate", True)):
        for r in local_rows("scaffold", learn=learn, n=3, epochs=1, k=1):
            r["input_metadata"]["completion_params"] = {"model": model}
            rows.append(r)
    write_jsonl(d / "rows.jsonl", rows)
    (d / "summary.json").write_text("{}")
    rc, out, err = _report(capsys, str(d), "--control", "eval:spectrum/memoryless", "--json", "--png", "")
    assert rc == 0, err
    rep = json.loads(out)
    assert [r["run"] for r in rep["runs"]] == ["eval:spectrum/accumulate", "eval:spectrum/memoryless"]
    assert rep["skipped"]["incomplete"] == 0  # dataset.jsonl was not read
    (cmp,) = rep["comparisons"]
    assert cmp["treatment"] == "eval:spectrum/accumulate"
    assert cmp["paired"]["shared_bands"] == 3
    # A raw dataset file given directly is input, not results: counted as unscored, no error.
    rc, _, err = _report(capsys, str(d / "dataset.jsonl"), "--png", "")
    assert rc == 2 and "no scored rows (unscored: 3, malformed: 0)" in err


def test_duplicates_merge(runs, tmp_path, capsys):
    rep = json.loads(_report(capsys, f"w={runs['weak']}", f"w={runs['weak']}", "--json", "--png", "")[1])
    assert rep["runs"][0]["rollouts"] == N_ROWS * N_EPOCHS * N_ROLLOUTS
    assert rep["skipped"]["duplicates"] == N_ROWS * N_EPOCHS * N_ROLLOUTS


# --------------------------------------------------------------------------------------------------
# Malformed input: clear errors, nothing crashes
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line,needle", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected an EvaluationRow object, got list"),
    ('{"foo": 1}', "not an EvaluationRow"),
    ('{"input_metadata": {"row_id": "r"}, "evaluation_result": {"score": "high"}}',
     "evaluation_result.score must be a finite number, got 'high'"),
    ('{"input_metadata": {"row_id": "r"}, "evaluation_result": {"score": NaN}}',
     "evaluation_result.score must be a finite number, got nan"),
    ('{"input_metadata": {"row_id": "r"}, "evaluation_result": {"score": 1, "metrics": []}}',
     "evaluation_result.metrics must be an object, got list"),
    ('{"input_metadata": {"row_id": "r"}, "evaluation_result": {"score": 1e300}}',
     "evaluation_result.score must be a finite number, got 1e+300"),
    ('{"input_metadata": {"row_id": 7}, "evaluation_result": {"score": 1}}',
     "input_metadata.row_id must be a non-empty string, got 7"),
    ('{"input_metadata": {"row_id": "r", "dataset_info": {"environment_context": {"epoch": -1}}}, '
     '"evaluation_result": {"score": 1}}', "environment_context.epoch must be a non-negative integer, got -1"),
    ('{"input_metadata": {"row_id": "r"}, "evaluation_result": {"score": 1}, '
     '"execution_metadata": {"extra": {"spectrum": {"carry_rate": "x"}}}}',
     "execution_metadata.extra.spectrum.carry_rate must be a finite number or null, got 'x'"),
])
def test_malformed_rows_are_named(tmp_path, capsys, line, needle):
    p = tmp_path / "bad.jsonl"
    p.write_text(line + "\n")
    rc, out, err = _report(capsys, str(p), "--png", "")
    assert rc == 2 and out == ""
    assert f"{p}:1: {needle}" in err
    assert "Traceback" not in err


def test_skip_bad_reports_the_rest(runs, tmp_path, capsys):
    p = tmp_path / "mixed.jsonl"
    p.write_text(runs["weak"].read_text() + "{garbage\n" + '{"foo": 1}\n')
    rc, _, err = _report(capsys, str(p), "--png", "")
    assert rc == 2 and "2 malformed row(s)" in err and f"{p}:{N_ROWS * N_EPOCHS * N_ROLLOUTS + 1}:" in err
    rc, out, _ = _report(capsys, str(p), "--png", "", "--skip-bad")
    assert rc == 0 and "2 malformed rows skipped" in out


@pytest.mark.parametrize("setup,needle", [
    (lambda d: d / "missing.jsonl", "no such file or directory"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "no *.jsonl files"),
    (lambda d: (d / "e.jsonl").write_text("") or d / "e.jsonl", "no scored rows"),
    (lambda d: (d / "b.jsonl").write_bytes(b"\xff\xfe{}\n") and d / "b.jsonl", "not UTF-8 text"),
    (lambda d: (d / "x.db").write_bytes(b"not a database at all" * 10) and d / "x.db", "cannot read as sqlite"),
])
def test_unusable_inputs(tmp_path, capsys, setup, needle):
    rc, _, err = _report(capsys, str(setup(tmp_path)), "--png", "")
    assert rc == 2 and needle in err


def test_epoch_grouping_needs_epochs(tmp_path, capsys):
    p = write_jsonl(tmp_path / "x.jsonl", [{"input_metadata": {"row_id": "r"}, "evaluation_result": {"score": 0.5}}])
    rc, _, err = _report(capsys, str(p), "--png", "")
    assert rc == 2 and "no environment_context.epoch" in err and "--group-by" in err
    rc, out, _ = _report(capsys, str(p), "--png", "", "--group-by", "input")
    assert rc == 0 and "0.500" in out and "n/a" not in out  # one input: the table, no empty trend lines


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=8)
PATHS = [("evaluation_result",), ("evaluation_result", "score"), ("evaluation_result", "metrics"),
         ("evaluation_result", "metrics", "carry_rate"), ("evaluation_result", "metrics", "band_fingerprint"),
         ("input_metadata",), ("input_metadata", "row_id"), ("input_metadata", "dataset_info"),
         ("input_metadata", "dataset_info", "environment_context"),
         ("input_metadata", "dataset_info", "environment_context", "epoch"), ("execution_metadata",),
         ("execution_metadata", "extra"), ("execution_metadata", "extra", "spectrum"),
         ("execution_metadata", "extra", "spectrum", "memory_gain"),
         ("execution_metadata", "extra", "spectrum", "band_fingerprint"), ("execution_metadata", "rollout_id"),
         ("rollout_status",), ("created_at",)]

_BASE = {"input_metadata": {"row_id": "r1", "dataset_info": {"environment_context": {"epoch": 1}}},
         "evaluation_result": {"score": 0.4, "metrics": {"carry_rate": {"score": 0.5, "reason": ""},
                                                         "band_fingerprint": {"score": 0, "reason": "",
                                                                              "data": {"value": "ab"}}}},
         "execution_metadata": {"rollout_id": "x", "extra": {"spectrum": {"memory_gain": 0.1,
                                                                          "band_fingerprint": "ab"}}},
         "rollout_status": {"code": 100}, "created_at": "2026-01-01T00:00:00Z"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=json_values)
def test_any_corruption_is_a_row_error_or_a_row(path, value):
    row = _corrupt(path, value)
    try:
        r = parse_row(row, "f.jsonl:1")
    except RowError as e:
        assert str(e).startswith("f.jsonl:1: ")
        return
    if r is not None:
        assert math.isfinite(r.score)
        assert all(v is None or math.isfinite(v) for v in r.values.values())
        assert r.epoch is None or (isinstance(r.epoch, int) and r.epoch >= 0)


def _corrupt(path, value):
    row = json.loads(json.dumps(_BASE))
    node = row
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return row


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(json_values.map(lambda v: json.dumps(v)) | st.text(max_size=20)
                      | st.tuples(st.sampled_from(PATHS), json_values).map(lambda pv: json.dumps(_corrupt(*pv))),
                      min_size=1, max_size=5))
def test_cli_never_crashes_on_garbage(tmp_path, lines):
    p = tmp_path / "g.jsonl"
    p.write_text("\n".join(x.replace("\n", " ") for x in lines) + "\n")
    for extra in ([], ["--skip-bad"]):
        rc = main([str(p), "--png", "", "--json", "--group-by", "input", *extra])
        assert rc in (0, 2)


# --------------------------------------------------------------------------------------------------
# Least squares: property tests
# --------------------------------------------------------------------------------------------------

coef = st.floats(-1e3, 1e3, allow_nan=False)
xs_st = st.lists(st.integers(0, 50), min_size=2, max_size=12, unique=True)


@given(xs=xs_st, a=coef, b=coef)
def test_exact_line_is_recovered(xs, a, b):
    fit = linear_fit(xs, [a + b * x for x in xs])
    assert fit is not None
    assert fit.slope == pytest.approx(b, rel=1e-6, abs=1e-6)
    assert fit.intercept == pytest.approx(a, rel=1e-6, abs=1e-4)
    if abs(b) > 1e-3:
        assert fit.r2 == pytest.approx(1.0, abs=1e-9)


@given(xs=xs_st, data=st.data())
def test_matches_numpy_and_r2_in_unit_interval(xs, data):
    ys = data.draw(st.lists(st.floats(-1.0, 1.0), min_size=len(xs), max_size=len(xs)))
    fit = linear_fit(xs, ys)
    assert fit is not None
    slope, intercept = np.polyfit(xs, ys, 1)
    assert fit.slope == pytest.approx(slope, abs=1e-7)
    assert fit.intercept == pytest.approx(intercept, abs=1e-6)
    if len(set(ys)) == 1:
        assert fit.r2 is None
    else:
        assert 0.0 <= fit.r2 <= 1.0
        r = np.corrcoef(xs, ys)[0, 1]
        if np.isfinite(r) and np.ptp(ys) > 1e-100:  # numpy's products underflow on subnormal spreads
            assert fit.r2 == pytest.approx(r * r, abs=1e-6)


@given(xs=xs_st, data=st.data(), scale=st.floats(0.01, 100.0), shift=coef, sign=st.sampled_from([-1, 1]))
def test_affine_and_permutation_invariance(xs, data, scale, shift, sign):
    ys = data.draw(st.lists(st.floats(-1.0, 1.0), min_size=len(xs), max_size=len(xs)))
    base = linear_fit(xs, ys)
    moved = linear_fit(xs, [sign * scale * y + shift for y in ys])
    assert moved.slope == pytest.approx(sign * scale * base.slope, rel=1e-6, abs=1e-6)
    # R^2 is invariant only while the shift's rounding (~1e-16 x |shift|) is negligible next to the spread
    if base.r2 is not None and moved.r2 is not None and scale * np.ptp(ys) > 1e-9 * (abs(shift) + 1):
        assert moved.r2 == pytest.approx(base.r2, abs=1e-6)
    perm = data.draw(st.permutations(list(range(len(xs)))))
    shuffled = linear_fit([xs[i] for i in perm], [ys[i] for i in perm])
    assert shuffled.slope == pytest.approx(base.slope, abs=1e-9)


@given(x=st.integers(0, 9), ys=st.lists(st.floats(-1, 1), max_size=5))
def test_degenerate_inputs(x, ys):
    assert linear_fit([x] * len(ys), ys) is None  # fewer than two distinct x
    with pytest.raises(ValueError):
        linear_fit([0, 1], [0.0, float("nan")])


# --------------------------------------------------------------------------------------------------
# The real evaluation entry, when it is in the checkout
# --------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not (ROOT / "test_spectrum_turn.py").is_file(), reason="test_spectrum_turn.py not in checkout")
def test_report_on_the_turn_entry(tmp_path, capsys):
    """Run ``test_spectrum_turn.py`` (default scripted model, no network) through pytest on a 2 rows x 3
    epochs dataset with ``--ep-jsonl-path``; report on the experiment JSONL it writes and on the sqlite
    store it fills (HOME is a temporary folder: the real ~/.eval_protocol is not touched)."""
    from spectrum_rft.rollouts.dataset import make_rows, to_evaluation_row_dict

    ds = tmp_path / "ds.jsonl"
    write_jsonl(ds, [to_evaluation_row_dict(r) for r in make_rows(2, prompt="explicit", memory_mode="scaffold",
                                                                    epochs=3)])
    out_dir = tmp_path / "ep"
    env = {**os.environ, "HOME": str(tmp_path / "home")}  # offline settings inherited (conftest)
    for k in ("FIREWORKS_API_KEY", "DISABLE_EP_SQLITE_LOG", "EP_OUTPUT_DIR", "EP_JSONL_PATH"):
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_spectrum_turn.py::test_spectrum_turn",
         "--ep-jsonl-path", str(ds), "--ep-output-dir", str(out_dir), "--ep-num-runs", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rc, out, err = _report(capsys, f"turn={out_dir / 'experiment_results'}", "--json", "--png", "")
    assert rc == 0, err
    run = json.loads(out)["runs"][0]
    assert [p["epoch"] for p in run["per_epoch"]] == [0, 1, 2]
    assert run["rows"] == 6 and run["rollouts"] == 12
    assert all(c["ok"] for c in run["checks"]), run["checks"]
    db = tmp_path / "home" / ".eval_protocol" / "logs.db"
    rc, out, err = _report(capsys, "--logs-db", str(db), "--json", "--png", "")
    assert rc == 0, err
    from_db = json.loads(out)["runs"][0]
    assert from_db["per_epoch"] == run["per_epoch"] and from_db["checks"] == run["checks"]


def test_r2_survives_a_subnormal_spread():
    fit = linear_fit([0, 1, 2], [0.0, 0.0, 8.321609680738611e-224])
    assert fit.r2 == pytest.approx(0.75)  # the same as for [0, 0, 1]


def test_report_mean_is_the_common_one():
    """One mean in the package: None-skipping, None when there is nothing to average."""
    from spectrum_rft.common.stats import mean
    from spectrum_rft.tools.report import analysis

    assert analysis.mean is mean
    assert mean([1.0, None, 2.0]) == 1.5 and mean([None]) is None and mean([]) is None


def _trl_run(path: Path, arm: str, mode: str, steps: int, carry: float, break_group: bool = False,
             repeat_band: bool = False) -> Path:
    """A `spectrum-rft train` (TRL) run directory: config.json + rollouts.jsonl (2 rows x 3 completions/step)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"arm": arm, "prompt": "weak", "memory_mode": mode,
                                                  "model": "smollm2"}))
    lines = []
    for step in range(steps):
        for r in range(2):
            row = f"grpo-s0-r{step * 2 + r:04d}"
            for c in range(3):
                fp = "band-0-0" if repeat_band and r == 0 else f"band-{step}-{r}"
                if break_group and step == 1 and r == 0 and c == 2:
                    fp = "other-band"
                reward = 0.1 + 0.01 * step + 0.001 * c
                lines.append({"step": step, "row_id": row, "scan": 5, "reward": reward, "score": reward,
                              "band_fingerprint": fp, "carry_rate": carry * step / steps, "dormant_recall": None,
                              "memory_gain": None, "gain_vs_memoryless": 0.0})
    (path / "rollouts.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_trl_run_directories(tmp_path, capsys):
    """`spectrum-rft report` reads TRL run directories: the training step is the epoch axis, the config
    gives prompt and memory mode, and integrity/freshness are checked on the logged band fingerprints."""
    real = _trl_run(tmp_path / "weak-scaffold-s0", "weak-scaffold", "scaffold", 4, 0.8)
    ctrl = _trl_run(tmp_path / "weak-scrambled-s0", "weak-scrambled", "scrambled", 4, 0.0)
    assert main([str(real), str(ctrl), "--png", "", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["checks_ok"] is True
    runs = {r["run"]: r for r in rep["runs"]}
    assert set(runs) == {"weak-scaffold-s0", "weak-scrambled-s0"}
    assert runs["weak-scaffold-s0"]["memory_mode"] == "scaffold" and runs["weak-scaffold-s0"]["prompt"] == "weak"
    assert len(runs["weak-scaffold-s0"]["per_epoch"]) == 4 and runs["weak-scaffold-s0"]["rollouts"] == 24
    assert rep["comparisons"], "the scrambled run is the control of the scaffold run"
    broken = _trl_run(tmp_path / "broken", "weak-scaffold", "scaffold", 3, 0.5, break_group=True)
    assert main([str(broken), "--png", "", "--fail-on-check"]) == 1
    assert "group integrity (rollouts of a row share one band): FAIL" in capsys.readouterr().out
    stale = _trl_run(tmp_path / "stale", "weak-scaffold", "scaffold", 3, 0.5, repeat_band=True)
    assert main([str(stale), "--png", "", "--fail-on-check"]) == 1
    assert "freshness (no band repeats across epochs): FAIL" in capsys.readouterr().out
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{}")
    (tmp_path / "bad" / "rollouts.jsonl").write_text('{"step": -1, "row_id": "r", "reward": 0.1}\n')
    assert main([str(tmp_path / "bad"), "--png", ""]) == 2
    assert "step must be a non-negative integer" in capsys.readouterr().err


def test_the_default_png_goes_to_the_run_not_the_working_folder(tmp_path):
    from spectrum_rft.tools.report.cli import default_png

    run = tmp_path / "run"
    run.mkdir()
    (run / "rows.jsonl").write_text("")
    assert default_png([str(run / "rows.jsonl")]) == run / "spectrum_report.png"
    assert default_png([f"weak={run / 'rows.jsonl'}", "x=y"]) == run / "spectrum_report.png"
    assert default_png([str(run)]) == run / "spectrum_report.png"
    assert default_png([]) == Path("spectrum_report.png")  # --logs-db only


@pytest.mark.parametrize("epochs", [[0], [0, 1, 2], list(range(30))])
def test_plot_ticks_are_the_groups(epochs):
    """One epoch gets one tick at 0 (it had ticks from -0.045 to 0.045); a few epochs get one each; many
    get integer ticks."""
    import matplotlib.pyplot as plt

    from spectrum_rft.tools.report.render import METRICS, figure

    per = [{"epoch": e, **{m: 0.1 + 0.01 * e for m in METRICS}} for e in epochs]
    fig = figure({"runs": [{"run": "r", "axis": "epoch", "per_epoch": per, "trend": {m: None for m in METRICS}}]})
    try:
        for ax in fig.axes:
            ticks = list(ax.get_xticks())
            lo, hi = ax.get_xlim()
            assert all(float(t).is_integer() for t in ticks)
            assert lo < epochs[0] and hi > epochs[-1]
            if len(epochs) <= 12:
                assert ticks == epochs
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------------
# Eval folders (``spectrum-rft eval --out DIR``, one epoch): the model table, paired differences, per-scan curves
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eval_dirs(offline_env, tmp_path_factory) -> dict[str, Path]:
    """Two eval folders of the same name in different places, scripted baselines: ``a/eval`` (memoryless,
    accumulate, oracle) and ``b/eval`` (memoryless, accumulate; another salt: other bands)."""
    import contextlib
    import io

    from spectrum_rft.tools import evaluation as se

    root = tmp_path_factory.mktemp("evals")
    runs = {"a": ["--model", "memoryless", "--model", "accumulate", "--model", "oracle"],
            "b": ["--model", "memoryless", "--model", "accumulate", "--salt", "other"]}
    for name, models in runs.items():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert se.main(["--rows", "3", *models, "--out", str(root / name / "eval"), "--no-progress"]) == 0
    return {name: root / name / "eval" for name in runs}


def _eval_rows(folder: Path) -> dict[str, dict[str, dict]]:
    """model -> row_id -> the row, from an eval folder's rows.jsonl."""
    out: dict[str, dict[str, dict]] = {}
    for line in (folder / "rows.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.setdefault(r["input_metadata"]["completion_params"]["model"], {})[r["input_metadata"]["row_id"]] = r
    return out


def test_an_eval_folder_gives_a_model_table_with_ses_and_paired_differences(eval_dirs, capsys):
    from spectrum_rft.common.stats import standard_error

    rc, out, err = _report(capsys, str(eval_dirs["a"]), "--png", "")
    assert rc == 0, err
    assert "n/a" not in out and "least-squares" not in out and "early vs late" not in out  # no epoch noise
    lines = out.splitlines()
    head = next(x for x in lines if x.startswith("model "))
    assert head.split() == ["model", "rows", "score", "mean_occ", "mean_avail", "memory_gain", "dormant_recall",
                            "beyond_current"]
    table = {x.split()[0]: x for x in lines if x.startswith("spectrum/") and " - " not in x}
    assert set(table) == {"spectrum/memoryless", "spectrum/accumulate", "spectrum/oracle"}
    assert all(table[m].count("±") == 6 for m in table)  # a mean and an SE in every column
    assert any(x.strip().startswith("spectrum/accumulate - spectrum/memoryless") and x.endswith("(3 bands)")
               for x in lines), out

    rep = json.loads(_report(capsys, str(eval_dirs["a"]), "--png", "", "--json")[1])
    assert rep["epoch_analysis"] is False
    summary = json.loads((eval_dirs["a"] / "summary.json").read_text())["models"]
    rows = _eval_rows(eval_dirs["a"])
    by_model = {t["name"]: t for t in rep["table"]}
    for model, t in by_model.items():
        scores = [r["evaluation_result"]["score"] for r in rows[model].values()]
        assert t["metrics"]["score"]["mean"] == pytest.approx(summary[model]["score"], abs=1e-6)  # eval's number
        assert t["metrics"]["score"]["se"] == pytest.approx(standard_error(scores))
        assert t["metrics"]["mean_avail"]["mean"] == pytest.approx(summary[model]["mean_avail"], abs=1e-6)
        assert t["per_scan_reward"] == pytest.approx(summary[model]["per_scan_reward"], abs=1e-6)
    names = {t["run"]: t["name"] for t in rep["table"]}
    (d,) = [d for d in rep["paired"] if (names[d["a"]], names[d["b"]]) == ("spectrum/accumulate", "spectrum/memoryless")]
    diffs = [rows["spectrum/accumulate"][k]["evaluation_result"]["score"]
             - rows["spectrum/memoryless"][k]["evaluation_result"]["score"] for k in rows["spectrum/memoryless"]]
    assert d["bands"] == 3 and d["mean_difference"] == pytest.approx(np.mean(diffs))
    assert d["se"] == pytest.approx(standard_error(diffs)) and d["mean_difference"] > 0
    assert len(rep["paired"]) == 3  # every pair of three models


def test_an_eval_folder_draws_per_scan_curves_not_epoch_dots(eval_dirs, tmp_path, capsys, monkeypatch):
    from spectrum_rft.tools.report import render

    drawn = {}
    real = render.plot_per_scan

    def spy(curves, path, title, bands=None):  # noqa: ANN001, ANN202
        drawn.update(curves)
        return real(curves, path, title, bands)

    monkeypatch.setattr(render, "plot_per_scan", spy)
    monkeypatch.setattr(render, "figure", lambda report: pytest.fail("per-epoch figure of one epoch"))
    png = tmp_path / "r.png"
    rc, out, err = _report(capsys, str(eval_dirs["a"]), "--png", str(png))
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"png: {png}" in out
    assert set(drawn) == {"spectrum/memoryless", "spectrum/accumulate", "spectrum/oracle"}
    assert all(len(ys) == 12 for ys in drawn.values())  # one point per scan
    assert drawn["spectrum/oracle"] == pytest.approx([1.0] * 12)


def test_several_eval_folders_in_one_table(eval_dirs, capsys):
    """Two folders both named ``eval``: two runs named by their folders, never merged; the paired differences
    pair only bands both saw (the folders' salts differ: none across them)."""
    rc, out, err = _report(capsys, str(eval_dirs["a"]), str(eval_dirs["b"]), "--png", "", "--json")
    assert rc == 0, err
    rep = json.loads(out)
    assert [t["name"] for t in rep["table"]] == ["a/eval:spectrum/accumulate", "a/eval:spectrum/memoryless",
                                                "a/eval:spectrum/oracle", "b/eval:spectrum/accumulate",
                                                "b/eval:spectrum/memoryless"]
    assert all(t["rows"] == 3 for t in rep["table"]) and rep["checks_ok"]
    assert {(d["a"].split(":")[0], d["b"].split(":")[0]) for d in rep["paired"]} == {("a/eval", "a/eval"),
                                                                                     ("b/eval", "b/eval")}
    assert len(rep["paired"]) == 4 and rep["epoch_analysis"] is False
    text = _report(capsys, str(eval_dirs["a"]), str(eval_dirs["b"]), "--png", "")[1]
    assert "b/eval:spectrum/accumulate - b/eval:spectrum/memoryless" in text


def test_a_failed_model_in_an_eval_folder_gets_no_figure(eval_dirs, tmp_path, capsys):
    """Every rollout of the oracle errored: named first, FAILED in the table, in no paired difference, no curve."""
    d = tmp_path / "eval"
    d.mkdir()
    lines = []
    for line in (eval_dirs["a"] / "rows.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["input_metadata"]["completion_params"]["model"] == "spectrum/oracle":
            r["rollout_status"] = {"code": 13, "message": "Connection refused"}
        lines.append(r)
    write_jsonl(d / "rows.jsonl", lines)
    (d / "summary.json").write_text("{}")
    rc, out, _ = _report(capsys, str(d), "--png", "")
    assert rc == 1
    assert out.splitlines()[0].startswith("FAILED: run eval:spectrum/oracle: every rollout errored (3/3)")
    (row,) = [x for x in out.splitlines() if x.startswith("spectrum/oracle ")]
    assert row.split()[2:] == ["FAILED", "-", "-", "-", "-", "-"]
    assert "oracle -" not in out and "- spectrum/oracle" not in out
    rep = json.loads(_report(capsys, str(d), "--png", "", "--json")[1])
    assert [d["bands"] for d in rep["paired"]] == [3]


def test_rows_over_epochs_keep_the_epoch_analysis_and_get_the_table(runs, capsys):
    rc, out, _ = _report(capsys, f"weak={runs['weak']}", f"ctrl={runs['ctrl']}", "--png", "")
    assert rc == 0
    assert "least-squares trend over per-epoch means" in out and "control comparison" in out
    assert out.splitlines()[0].split()[:3] == ["model", "rows", "score"]
    assert "weak - ctrl" in out or "ctrl - weak" in out
