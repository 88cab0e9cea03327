"""``spectrum-rft report`` on a Fireworks RFT job's rows: the training rows and, beside them, the held-out evaluation
rows `spectrum-rft launch` uploads as the job's ``evaluationDataset`` (issue 42).

The fixture (``tests/fixtures/heldout_weak.jsonl``, ``heldout_ctrl.jsonl``: a treatment arm and its scrambled
control) is made by :func:`job_rows` below from real local episodes (``SpectrumEnv`` played by the scripted
policies), with launch's own row generators: 3 training rows x 3 fresh epochs x 2 rollouts, and 3 held-out bands
scored once per evaluation pass, a pass before training and one during each epoch (``created_at`` says when). In
the treatment arm, more held-out bands are played by the memory-using policy at each pass; the control is
memoryless throughout. A test regenerates the rows and compares them with the fixture (all but the scores).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from spectrum_rft.tools.report import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ARMS = {"weak": ("weak", "scaffold", True), "ctrl": ("weak", "scrambled", False)}  # prompt, memory mode, learns
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
N_ROWS, N_EPOCHS, N_ROLLOUTS, N_HELDOUT = 3, 3, 2, 3


def _scored(row: dict, policy: str, rollout_id: str, at: datetime) -> dict:
    """``row`` (EvaluationRow JSON) after one episode of ``policy``, as the evaluator leaves it (messages left out:
    the report does not read them)."""
    from spectrum_rft.baselines.audit import run_episode
    from spectrum_rft.task.environment import env_for_row

    meta = row["input_metadata"]
    env, seed = env_for_row(meta["row_id"], meta["dataset_info"])
    m = run_episode(env, policy, seed, history=True)
    return {"input_metadata": meta, "created_at": at.isoformat().replace("+00:00", "Z"),
            "evaluation_result": {"score": m["score"], "is_score_valid": True},
            "execution_metadata": {"rollout_id": rollout_id, "extra": {"spectrum": m}},
            "rollout_status": {"code": 0}}


def job_rows(arm: str) -> list[dict]:
    """The rows a job of ``arm`` leaves: its training rollouts and its held-out evaluations (module docstring)."""
    from spectrum_rft.rollouts.dataset import make_rows, to_evaluation_row_dict
    from spectrum_rft.tools.launch.heldout import default_eval_salt, heldout_rows

    prompt, mode, learns = ARMS[arm]
    out = []
    for raw in make_rows(N_ROWS, prompt=prompt, memory_mode=mode, epochs=N_EPOCHS):
        e, i = raw["environment_context"]["epoch"], int(raw["id"][-4:])
        for j in range(N_ROLLOUTS):
            policy = "accumulate" if learns and (i + j) % N_EPOCHS < e else "memoryless"
            at = T0 + timedelta(seconds=1000 * e + 10 * i + j)
            out.append(_scored(to_evaluation_row_dict(raw), policy, f"{arm}-{raw['id']}-{j}", at))
    held = heldout_rows(N_HELDOUT, prompt=prompt, memory_mode=mode, preset="default", reward="default", think=False,
                        salt=default_eval_salt(""), prefix="spectrum")
    for p in range(-1, N_EPOCHS):  # the pass before training, then one during each epoch
        for i, row in enumerate(held):
            policy = "accumulate" if learns and i <= p else "memoryless"
            at = T0 + timedelta(seconds=1000 * p + 500 + i)
            out.append(_scored(row, policy, f"{arm}-{row['input_metadata']['row_id']}-pass{p + 1}", at))
    return out


def _write(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return path


def test_the_fixture_is_what_the_generator_makes(tmp_path):
    """Row by row the same rows (ids, contexts, rollout ids, timestamps, statuses), and the held-out bands disjoint
    from the training bands; the scores are left out (they follow the env's scoring, which may change: rerun
    :func:`job_rows` into the fixture then)."""
    def shape(r: dict) -> tuple:
        return (json.dumps(r["input_metadata"], sort_keys=True), r["created_at"],
                r["execution_metadata"]["rollout_id"], r["rollout_status"]["code"])

    for arm in ARMS:
        made = job_rows(arm)
        kept = [json.loads(x) for x in (FIXTURES / f"heldout_{arm}.jsonl").read_text().splitlines()]
        assert [shape(r) for r in made] == [shape(r) for r in kept]
        fps = {split: {r["execution_metadata"]["extra"]["spectrum"]["band_fingerprint"] for r in made
                       if r["input_metadata"]["dataset_info"]["environment_context"].get("split", "train") == split}
               for split in ("train", "heldout")}
        assert len(fps["train"]) == N_ROWS * N_EPOCHS and len(fps["heldout"]) == N_HELDOUT
        assert not fps["train"] & fps["heldout"]


def _report(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_report_shows_held_out_figures_per_epoch_per_arm_with_the_control(capsys):
    rc, out, err = _report(capsys, f"weak={FIXTURES / 'heldout_weak.jsonl'}", f"ctrl={FIXTURES / 'heldout_ctrl.jsonl'}",
                           "--png", "", "--fail-on-check")
    assert rc == 0, out + err
    # the training analysis is of the training rows alone (the held-out rows repeat bands across passes by design)
    assert "run weak: 18 rollouts of 9 rows in 3 epochs (prompt=weak, memory_mode=scaffold)" in out
    assert "freshness (no band repeats across epochs): PASS (9 bands, each in one of 3 epochs)" in out
    head = "held-out bands of run weak (scored during the job, never trained on): 12 rollouts of 3 bands"
    assert head in out
    block = out.split(head, 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in block[2:6]] == ["before", "0", "1", "2"]
    assert all(line.split()[1:3] == ["3", "3"] for line in block[2:6])  # 3 rollouts of 3 bands per pass
    assert "held-out bands never trained on: PASS (3 held-out bands, none among 9 training bands)" in out
    assert "held-out control comparison: weak (treatment) vs ctrl (control)" in out
    assert "paired (at epoch 2, the last evaluation group both runs reached) over 3 held-out bands both runs saw: " \
        in out


def test_the_curves_show_the_held_out_bands(tmp_path, capsys):
    from spectrum_rft.tools.report.render import figure

    png = tmp_path / "curves.png"
    rc, out, _ = _report(capsys, f"weak={FIXTURES / 'heldout_weak.jsonl'}", f"ctrl={FIXTURES / 'heldout_ctrl.jsonl'}",
                         "--png", str(png), "--json")
    assert rc == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = figure(json.loads(out))
    score, memory_gain = fig.axes[0], fig.axes[1]
    held = {line.get_label(): list(line.get_xdata()) for line in memory_gain.get_lines()
            if "held-out" in line.get_label()}
    assert held == {"weak held-out": [-1, 0, 1, 2], "ctrl held-out": [-1, 0, 1, 2]}
    assert list(score.get_xticks()) == [-1, 0, 1, 2]


def test_held_out_json_matches_the_rows(capsys):
    rc, out, _ = _report(capsys, f"weak={FIXTURES / 'heldout_weak.jsonl'}", f"ctrl={FIXTURES / 'heldout_ctrl.jsonl'}",
                         "--png", "", "--json")
    assert rc == 0
    rep = json.loads(out)
    runs = {r["run"]: r for r in rep["heldout"]["runs"]}
    rows = [json.loads(x) for x in (FIXTURES / "heldout_weak.jsonl").read_text().splitlines()]
    held = [r for r in rows if r["input_metadata"]["dataset_info"]["environment_context"].get("split") == "heldout"]
    for p in runs["weak"]["per_epoch"]:
        mine = [r for r in held if r["execution_metadata"]["rollout_id"].endswith(f"-pass{p['x'] + 1}")]
        spectrum = [r["execution_metadata"]["extra"]["spectrum"] for r in mine]
        for m in ("memory_gain", "dormant_recall", "beyond_current"):
            vals = [s[m] for s in spectrum if s[m] is not None]
            assert p[m] == pytest.approx(sum(vals) / len(vals))
    w, c = runs["weak"], runs["ctrl"]
    assert [p["x"] for p in w["per_epoch"]] == [-1, 0, 1, 2]
    # the treatment learns on bands it never saw, the control does not
    assert w["trend"]["dormant_recall"]["slope"] > 0.05 > abs(c["trend"]["dormant_recall"]["slope"])
    (cmp,) = rep["heldout"]["comparisons"]
    assert (cmp["treatment"], cmp["control"]) == ("weak", "ctrl")
    d = cmp["slopes"]["dormant_recall"]
    assert d["difference"] == pytest.approx(d["treatment"] - d["control"])
    assert cmp["paired"]["memory_gain"]["bands"] == 3
    assert rep["table"][0]["rows"] == 9  # the model table is of the training rows
    assert rep["checks_ok"] is True


def test_a_held_out_band_that_was_trained_on_fails_the_check(tmp_path, capsys):
    rows = [json.loads(x) for x in (FIXTURES / "heldout_weak.jsonl").read_text().splitlines()]
    train = next(r for r in rows if "split" not in r["input_metadata"]["dataset_info"]["environment_context"])
    for r in rows:
        if r["input_metadata"]["row_id"] == "spectrum-heldout-r0001":
            r["execution_metadata"]["extra"]["spectrum"]["band_fingerprint"] = \
                train["execution_metadata"]["extra"]["spectrum"]["band_fingerprint"]
    rc, out, _ = _report(capsys, str(_write(rows, tmp_path / "leak.jsonl")), "--png", "", "--fail-on-check")
    assert rc == 1
    assert "held-out bands never trained on: FAIL (1 of 3 held-out bands are training bands" in out


def test_held_out_rows_without_timestamps_are_one_group(tmp_path, capsys):
    rows = [json.loads(x) for x in (FIXTURES / "heldout_weak.jsonl").read_text().splitlines()]
    for r in rows:
        if r["input_metadata"]["dataset_info"]["environment_context"].get("split") == "heldout":
            r.pop("created_at")
    rc, out, _ = _report(capsys, str(_write(rows, tmp_path / "nots.jsonl")), "--png", "", "--json")
    rep = json.loads(out)
    (run,) = rep["heldout"]["runs"]
    assert rc == 0 and [p["x"] for p in run["per_epoch"]] == [None] and run["per_epoch"][0]["rollouts"] == 12
    assert any("held-out rows without created_at" in n for n in rep["notes"])


def test_held_out_rows_alone_are_read_as_any_rows(tmp_path, capsys):
    """No training rows beside them: nothing to place them against, so they are a run's rows as any others
    (no epoch: the per-epoch analysis asks for another --group-by)."""
    rows = [json.loads(x) for x in (FIXTURES / "heldout_weak.jsonl").read_text().splitlines()]
    held = [r for r in rows if r["input_metadata"]["dataset_info"]["environment_context"].get("split") == "heldout"]
    rc, out, err = _report(capsys, str(_write(held, tmp_path / "h.jsonl")), "--png", "", "--group-by", "order:4")
    assert rc == 0, err
    assert "held-out bands of run" not in out and "run h: 12 rollouts of 3 rows in 4 buckets" in out


def _heldout_row(r: dict) -> bool:
    return r["input_metadata"]["dataset_info"]["environment_context"].get("split") == "heldout"


def test_the_paired_difference_is_taken_at_the_last_group_both_runs_reached(tmp_path, capsys):
    """A control job stopped during epoch 0 (its later training rows and evaluation passes never happened):
    the paired difference is the treatment's epoch-0 pass against the control's, not every pass of the
    treatment pooled against the control's two."""
    rows = [json.loads(x) for x in (FIXTURES / "heldout_ctrl.jsonl").read_text().splitlines()]
    early = [r for r in rows if (r["execution_metadata"]["rollout_id"].endswith(("-pass0", "-pass1")) if _heldout_row(r)
                                 else r["input_metadata"]["dataset_info"]["environment_context"]["epoch"] == 0)]
    ctrl = _write(early, tmp_path / "ctrl.jsonl")
    rc, out, err = _report(capsys, f"weak={FIXTURES / 'heldout_weak.jsonl'}", f"ctrl={ctrl}", "--control", "ctrl",
                           "--group-by", "epoch", "--png", "", "--json")
    assert rc == 0, err
    (cmp,) = json.loads(out)["heldout"]["comparisons"]
    assert cmp["paired_at"] == 0
    at0 = next(p for p in cmp["per_epoch"] if p["x"] == 0)
    for m in ("memory_gain", "dormant_recall"):  # every band in both runs at epoch 0: the paired mean is the gap
        assert cmp["paired"][m]["bands"] == 3
        assert cmp["paired"][m]["mean_difference"] == pytest.approx(at0[m]["difference"])
    rc, out, _ = _report(capsys, f"weak={FIXTURES / 'heldout_weak.jsonl'}", f"ctrl={ctrl}", "--control", "ctrl",
                         "--png", "")
    assert "paired (at epoch 0, the last evaluation group both runs reached) over 3 held-out bands" in out


def test_a_held_out_curve_has_its_own_runs_colour(tmp_path, capsys):
    """A run without held-out rows listed first: each held-out curve keeps the colour of its run's training
    curve, not the colour of the run at its position among the held-out runs."""
    from spectrum_rft.tools.report.render import figure

    rows = [json.loads(x) for x in (FIXTURES / "heldout_weak.jsonl").read_text().splitlines()]
    plain = _write([r for r in rows if not _heldout_row(r)], tmp_path / "plain.jsonl")
    rc, out, err = _report(capsys, f"a={plain}", f"weak={FIXTURES / 'heldout_weak.jsonl'}",
                           f"ctrl={FIXTURES / 'heldout_ctrl.jsonl'}", "--png", "", "--json")
    assert rc == 0, err
    memory_gain = figure(json.loads(out)).axes[1]
    colour = {line.get_label(): line.get_color() for line in memory_gain.get_lines()
              if not line.get_label().startswith("_")}
    assert set(colour) == {"a", "weak", "ctrl", "weak held-out", "ctrl held-out"}
    assert colour["weak held-out"] == colour["weak"] != colour["a"]
    assert colour["ctrl held-out"] == colour["ctrl"]


def test_loading_report_does_not_load_launch():
    """The held-out split marker is a row's (``rollouts.dataset``): reading rows needs none of the launch CLI."""
    import subprocess
    import sys

    code = ("import sys, spectrum_rft.tools.report, spectrum_rft.tools.report.validate as v; "
            "print(sorted(m for m in sys.modules if m.startswith('spectrum_rft.tools.launch')), "
            "v.is_heldout({'split': 'heldout'}), v.is_heldout({}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "True", "False"]
