"""Honest numbers: a model that never answered (a dead endpoint: every request an HTTP 500, a real server on
127.0.0.1) is shown as FAILED in every table, eval's, bench90's and report's, with the reason before the table
and no score-like figure (an empty report's available-IoU is high: the dead model's table once read
``mean_avail 0.861``, above a real model's). So is a model whose scans were mostly skipped because its requests
failed. Both are defined once, :func:`spectrum_rft.rollouts.failures.no_result`."""

from __future__ import annotations

import json

import pytest

from loopback_llm import LoopbackLLM, dead_responder
from spectrum_rft.tools import bench90 as b9
from spectrum_rft.tools import evaluation as se
from spectrum_rft.tools.report import main as report_main

FIGURE = r"\d\.\d{3}"  # a score-like figure as the tables print them


@pytest.fixture(scope="module")
def dead_eval(offline_env, tmp_path_factory):
    """``spectrum-rft eval`` of a dead endpoint, 2 rows: (exit status, stdout, stderr, --out)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("dead") / "eval"
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, LoopbackLLM(dead_responder()) as server:
        mp.setenv("OPENAI_API_KEY", "dummy")
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = se.main(["--model", "openai/dead", "--api-base", server.base_url, "--rows", "2", "--out", str(out),
                          "--no-progress"])
    return rc, stdout.getvalue(), stderr.getvalue(), out


def test_eval_of_a_dead_endpoint_shows_failed_first_and_no_figure(dead_eval):
    import re

    rc, stdout, stderr, out = dead_eval
    assert rc == 1, stdout + stderr
    line = next(x for x in stdout.splitlines() if x.startswith("openai/dead "))
    assert "FAILED" in line and not re.search(FIGURE, line), line  # no score, no mean_avail
    assert line.split()[-4:] == ["2", "2", "http", "5xx"]  # rows, errors, cause
    assert "FAILED (no result, see above): openai/dead" in stdout
    assert "plot: none" in stdout and not (out / "per_scan_reward.png").exists()
    err = stderr.splitlines()
    assert err and err[0].startswith("spectrum-rft eval: openai/dead: every rollout errored (2/2), cause: http 5xx")
    m = json.loads((out / "summary.json").read_text())["models"]["openai/dead"]
    assert m["failed"] == "every rollout errored (2/2), cause: http 5xx"
    assert m["score"] is None and m["mean_avail"] is None and m["per_scan_reward"] == []
    assert m["scans_skipped_total"] == m["scans_total"] == 24  # the counts are kept


def test_report_of_a_dead_model_run_is_failed_first(dead_eval, tmp_path, capsys):
    import re

    out = dead_eval[3]
    rc = report_main([str(out), "--png", str(tmp_path / "r.png")])
    text = capsys.readouterr().out
    assert rc == 1, text
    first = text.splitlines()[0]
    assert first.startswith("FAILED: run eval: every rollout errored (2/2), cause: http 5xx"), text
    assert not re.search(FIGURE, text), text  # no per-epoch score, no trend
    assert not (tmp_path / "r.png").exists()  # no figure of a run with no result
    rc = report_main([str(out), "--png", "", "--json"])
    cap = capsys.readouterr()
    rep = json.loads(cap.out)
    assert rc == 1 and rep["failed"] == {"eval": "every rollout errored (2/2), cause: http 5xx"}
    assert rep["runs"][0]["per_epoch"] == [] and rep["runs"][0]["overall"]["score"] is None
    assert cap.err.startswith("spectrum-rft report: run eval: FAILED: every rollout errored")


def test_bench90_of_a_dead_endpoint(offline_env, monkeypatch, capsys):
    import re

    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    with LoopbackLLM(dead_responder()) as server:
        args = ["--model", "openai/dead", "--runs", "2", "--llm-tries", "1", "--quiet",
                "--completion-params", json.dumps({"api_base": server.base_url})]
        rc = b9.main(args)
        cap = capsys.readouterr()
        rc_json = b9.main([*args, "--json"])
        res = json.loads(capsys.readouterr().out)
    assert rc == 1 and rc_json == 1
    assert cap.err.splitlines()[0] == "spectrum-rft bench90: openai/dead: FAILED: every rollout errored (2/2), " \
                                      "cause: http 5xx: no result"
    assert "FAILED" in cap.out and not re.search(FIGURE, cap.out), cap.out  # avail-IoU 0.196 was printed here
    assert res["failed"] and res["mean_avail"] is None and res["gain_over_stateless"] is None
    assert [r["failed"] for r in res["per_run"]] == ["every rollout errored (1/1), cause: http 5xx"] * 2


def _row(n_scans: int, skipped: int, by_model: int, errored: bool = False) -> dict:
    faults = {"skip_llm_failure": by_model, "llm_5xx": 3 * by_model} if by_model else {}
    if skipped > by_model:
        faults["skip_call_budget"] = skipped - by_model
    return {"rollout_status": {"code": 13 if errored else 100, "message": "x"},
            "execution_metadata": {"extra": {"spectrum": {"n_scans": n_scans, "scans_skipped": skipped,
                                                          "faults": faults, "score": 0.1, "mean_avail": 0.8}}},
            "evaluation_result": {"score": 0.1, "is_score_valid": True, "metrics": {
                "mean_avail": {"score": 0.8, "is_score_valid": True}}},
            "input_metadata": {"row_id": "r", "completion_params": {"model": "m"}}}


def test_a_model_mostly_skipped_for_failed_requests_is_failed_in_the_table():
    """It answered now and then (no row errored), but 9 of 12 scans were skipped because its requests failed."""
    from spectrum_rft.rollouts.failures import MOSTLY_SKIPPED, no_result

    m = se.summarize([_row(12, 9, 9)])
    assert m["rows_errored"] == 0 and m["failed"] == "9/12 scans skipped because model requests failed, cause: http 5xx"
    assert m["score"] is None and m["mean_avail"] is None
    line = se.format_table({"m": m}).splitlines()[2]
    assert "FAILED" in line and "0.800" not in line
    # half or fewer, or skipped for another reason (a model that does not report is measured as such): a result
    assert se.summarize([_row(12, 6, 6)])["failed"] is None
    assert se.summarize([_row(12, 9, 0)])["failed"] is None
    assert no_result(4, 0, scans=48, skipped_by_model=int(48 * MOSTLY_SKIPPED) + 1) is not None
