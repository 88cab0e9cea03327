"""``spectrum-rft eval`` when runs go wrong: a model that never answers (HTTP 500, a closed port), scans
that are mostly skipped, options out of range, a run stopped by a watchdog or Ctrl-C (the finished rows
are kept). Real pytest children run the real entries against ``tests/loopback_llm.py`` (a real
OpenAI-compatible HTTP server on 127.0.0.1). Nothing waits on a clock to decide what happened: the
models that must not finish hang until the server stops, and stops are triggered by observed events."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from spectrum_rft.common.processes import group_alive
from spectrum_rft.tools import evaluation as se
from spectrum_rft.tools.evaluation import runner
from loopback_llm import LoopbackLLM, Trickle, chat_response, policy_responder

_SCAN = re.compile(r"^Scan (\d+)/(\d+) \| band ", re.M)
HANG_S = 3600.0  # a request that never gets an answer (released when the server stops)


@pytest.fixture(scope="module")
def offline_env(offline_env):
    """The session's offline settings (conftest) plus a dummy key for OpenAI-compatible endpoints."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "dummy")
        yield


def _last_scan(request: dict) -> tuple[int, int] | None:
    """(k, n) of the last ``Scan k/n`` shown in a chat request."""
    for m in reversed(request.get("messages") or []):
        content = m.get("content")
        text = content if isinstance(content, str) else "".join(
            str(p.get("text") or "") for p in content or [] if isinstance(p, dict))
        hits = _SCAN.findall(text)
        if m.get("role") in ("user", "tool") and hits:
            return int(hits[-1][0]), int(hits[-1][1])
    return None


class FirstRowThenHang:
    """Plays ``spectrum/accumulate`` until one rollout has answered its last scan, then never answers
    again. With ``--concurrency 1`` the first row finishes at once and the second hangs."""

    def __init__(self) -> None:
        self.play = policy_responder("accumulate")
        self.first_done = threading.Event()
        self.hanging = threading.Event()  # a request of a later row is waiting

    def __call__(self, request: dict):
        if self.first_done.is_set():
            self.hanging.set()
            return 200, chat_response("too late"), HANG_S
        reply = self.play(request)
        scan = _last_scan(request)
        if scan is not None and scan[0] == scan[1]:
            self.first_done.set()
        return reply


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on exit: nothing listens there


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines() if line.strip()]


def _table_line(text: str, label: str) -> list[str]:
    return next(line for line in text.splitlines() if line.startswith(label + " ")).split()


def _scored_rows_streamed(out: Path) -> int:
    """Rows the (running) child has scored so far: the run's row stream in ``out``."""
    try:
        return len((out / se.STREAM_FILE).read_text().splitlines())
    except OSError:
        return 0



def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------------
# 4. options are checked before any work
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, option", [
    (["--max-calls-per-scan", "0"], "--max-calls-per-scan"),
    (["--max-calls-per-scan", "two"], "--max-calls-per-scan"),
    (["--timeout", "0"], "--timeout"),
    (["--timeout", "-5"], "--timeout"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--rows", "0"], "--rows"),
    (["--rows", "1.5"], "--rows"),
    (["--concurrency", "0"], "--concurrency"),
    (["--concurrency", "-1"], "--concurrency"),
])
def test_numeric_options_are_refused_at_parse_time(argv, option, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        se.main([*argv, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback, no usage block
    assert f"argument {option}:" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing started


def test_run_eval_refuses_what_the_parser_would(tmp_path):
    with pytest.raises(ValueError, match="max_calls_per_scan"):
        se.run_eval(se.model_specs(["accumulate"]), path="turn", rows=1, out=tmp_path / "a", max_calls_per_scan=0)
    with pytest.raises(ValueError, match="timeout"):
        se.run_eval(se.model_specs(["accumulate"]), path="turn", rows=1, out=tmp_path / "b", timeout=-5)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# --------------------------------------------------------------------------------------------------
# 1. a model that never produced a usable reply: errors, the cause, the exit status
# --------------------------------------------------------------------------------------------------


def _error_row(message: str, failure: dict | None = None, skipped: int = 12) -> dict:
    extra: dict = {"spectrum": {"n_scans": 12, "scans_skipped": skipped, "faults": {"skip_llm_failure": skipped}}}
    if failure is not None:
        extra["spectrum_rollout"] = {"transport": "turn", "model_failure": failure}
    return {"rollout_status": {"code": 13, "message": message}, "execution_metadata": {"extra": extra},
            "evaluation_result": {"score": 0.0, "is_score_valid": True}}


@pytest.mark.parametrize("message, cause", [
    ("model never produced a usable reply: http 5xx (4 requests)", "http 5xx"),  # the processors' own words
    ("litellm.InternalServerError: InternalServerError: OpenAIException - boom LiteLLM Retried: 8 times", "http 5xx"),
    ("litellm.APIConnectionError: OpenAIException - Connection error.", "connection refused"),
    ("[Errno 111] Connection refused", "connection refused"),
    ("litellm.Timeout: APITimeoutError - Request timed out.", "timeout"),
    ("litellm.RateLimitError: RateLimitError: OpenAIException - Error code: 429", "rate limited"),
    ("model request rejected (HTTP 404): litellm.NotFoundError: model not found", "bad request"),
    ("litellm.BadRequestError: OpenAIException - Error code: 400 - context too long", "bad request"),
    ("IndexError: list index out of range", "error"),
    ("", "error"),
])
def test_error_cause_from_the_status_message(message, cause):
    """Rows without ``model_failure`` (eval-protocol's own errors, before the processors record it)."""
    assert se.error_cause(_error_row(message)) == cause


def test_error_cause_prefers_the_recorded_model_failure():
    row = _error_row("model never produced a usable reply: timeout",
                     {"cause": "rate limited", "requests": 4, "detail": "HTTP 429"})
    assert se.error_cause(row) == "rate limited"
    bogus = _error_row("litellm.Timeout: Request timed out", {"cause": "cosmic rays", "requests": 1, "detail": ""})
    assert se.error_cause(bogus) == "timeout"  # an unknown recorded cause: classified from the message
    ok = {"rollout_status": {"code": 100, "message": "Rollout finished"}}
    assert se.error_cause(ok) is None


def test_summary_and_report_of_error_rows_with_and_without_the_field(tmp_path, capsys):
    """The dominant cause per model, from rows with ``model_failure`` and rows without (both contracts)."""
    with_field = [_error_row("model never produced a usable reply: http 5xx", {"cause": "http 5xx", "requests": 4,
                                                                             "detail": "HTTP 500"})] * 2
    without = [_error_row("litellm.APIConnectionError: Connection error.")] * 2 + \
              [_error_row("litellm.InternalServerError: boom")]
    models = {"a": se.summarize(with_field), "b": se.summarize(without)}
    assert models["a"]["error_cause"] == "http 5xx" and models["a"]["error_causes"] == {"http 5xx": 2}
    assert models["b"]["error_cause"] == "connection refused"
    assert models["b"]["error_causes"] == {"connection refused": 2, "http 5xx": 1}
    table = se.format_table(models)
    assert _table_line(table, "a")[-4:] == ["2", "2", "http", "5xx"]  # rows, errors, cause
    assert table.splitlines()[3].endswith("connection refused")
    for m in models.values():
        m.update(privileged=False, rows_unfinished=0)
    summary = {"models": models, "displays": {}, "out": str(tmp_path), "log": str(tmp_path / "pytest.log"),
               "rows": 3, "path": "turn", "preset": "default", "memory_mode": "scaffold", "reward": "default",
               "wall_s": 1.0, "plot": None, "missing": ["a"], "stopped": None, "cut_off": []}
    assert se.report(summary) == 1
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if "every rollout errored" in line]
    assert len(lines) == 2
    assert "a: every rollout errored (2/2), cause: http 5xx" in lines[0] and str(tmp_path / "pytest.log") in lines[0]
    assert "b: every rollout errored (3/3), cause: connection refused" in lines[1]
    assert not any(line.startswith("WARNING") for line in err)  # the error line says it already


def test_a_server_answering_500_to_everything(offline_env, tmp_path, capsys):
    """Table: errors and the cause; stderr: one line naming the cause and the log; exit 1. A healthy
    model in the same run is unaffected."""
    server = LoopbackLLM(lambda req: (500, {"error": {"message": "boom", "type": "server_error"}}, 0.0)).start()
    try:
        rc = se.main(["--model", "openai/x", "--api-base", server.base_url, "--model", "accumulate", "--rows", "2",
                      "--out", str(tmp_path), "--no-progress"])
    finally:
        server.stop()
    cap = capsys.readouterr()
    assert rc == 1, cap.out + cap.err
    assert server.count >= 2
    x, acc = _summary(tmp_path)["models"]["openai/x"], _summary(tmp_path)["models"]["spectrum/accumulate"]
    assert acc["rows_errored"] == 0 and acc["score"] > 0.3
    line = next(line for line in cap.err.splitlines() if line.startswith("spectrum-rft eval: openai/x:"))
    assert "http 5xx" in line and str(tmp_path / "pytest.log") in line
    # a model that never answered gives error rows (model_failure), not rows of skipped scans
    assert x["rows_errored"] == 2 and x["error_cause"] == "http 5xx"
    assert _table_line(cap.out, "openai/x")[-3:] == ["2", "http", "5xx"]
    assert "every rollout errored (2/2), cause: http 5xx" in line
    assert "openai/x: " in cap.out.split("faults (")[1]  # the fault summary under the table


@pytest.mark.parametrize("path", ["turn", "mcp"])
def test_a_reply_that_trickles_meets_the_whole_reply_deadline(offline_env, tmp_path, path):
    """The first reply trickles a byte every 0.4 s (headers at once: a per-read timeout never trips, the whole
    body would take minutes); ``--param timeout=6`` is a deadline for the whole reply (a normal one takes
    milliseconds): that try ends as a timeout (counted ``llm_timeout``), the retry gets the policy's report and
    the row finishes and scores."""
    first = threading.Event()
    play = policy_responder("accumulate")

    def model(request):
        if not first.is_set():
            first.set()
            return 200, Trickle(chat_response("", []), every=0.4), 0.0
        return play(request)

    server = LoopbackLLM(model).start()
    out = tmp_path / "out"
    try:
        rc = se.main(["--path", path, "--model", "openai/x", "--api-base", server.base_url, "--param", "timeout=6",
                      "--rows", "1", "--timeout", "120", "--out", str(out), "--no-progress"])
    finally:
        server.stop()
    m = _summary(out)["models"]["openai/x"]
    assert rc == 0 and _summary(out)["stopped"] is None, m
    assert m["faults"].get("llm_timeout") == 1 and m["rows_errored"] == 0
    assert _rows(out)[0]["evaluation_result"]["score"] > 0.3


@pytest.mark.parametrize("path", ["turn", "mcp"])
def test_a_key_given_as_a_param_reaches_the_model_and_no_file(offline_env, tmp_path, monkeypatch, path):
    """``--param api_key=...`` (and a credential header): the model server gets the key on every request, and
    not one file the run writes holds it: rows, summary, pytest.log (test ids), the plot, and eval-protocol's
    own row log (``--ep-logs``: ~/.eval_protocol/logs.db)."""
    key, header = "sk-spectrum-test-6f1d0c2a9b8e7d", "tok-spectrum-test-51e4aa"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    server = LoopbackLLM(policy_responder("accumulate")).start()
    out = tmp_path / "out"
    try:
        rc = se.main(["--path", path, "--model", "openai/x", "--api-base", server.base_url, "--param", f"api_key={key}",
                      "--param", "extra_headers=" + json.dumps({"X-Api-Token": header}),
                      "--rows", "1", "--ep-logs", "--out", str(out), "--no-progress"])
    finally:
        server.stop()
    assert rc == 0, _summary(out)
    assert server.authorizations == {f"Bearer {key}"} and server.headers_seen == {header}
    assert _rows(out)[0]["evaluation_result"]["score"] > 0.3
    written = [f for f in [*out.rglob("*"), *home.rglob("*")] if f.is_file()]
    assert any(f.name == "logs.db" for f in written) and any(f.name == "pytest.log" for f in written)
    for f in written:
        data = f.read_bytes()
        assert key.encode() not in data and header.encode() not in data, f"a key written to {f}"
    # the summary names where the key came from (a variable of the child's environment), the row says it was there
    cp = _summary(out)["models"]["openai/x"]["completion_params"]
    assert cp["api_key"] == {"$env": "SPECTRUM_EVAL_SECRET_API_KEY"}
    row_cp = _rows(out)[0]["input_metadata"]["completion_params"]
    assert row_cp["api_key"] == "<redacted>" and row_cp["extra_headers"] == {"X-Api-Token": "<redacted>"}


def test_a_closed_port(offline_env, tmp_path, capsys):
    port = _closed_port()
    rc = se.main(["--model", "openai/x", "--api-base", f"http://127.0.0.1:{port}/v1", "--rows", "1",
                  "--out", str(tmp_path), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 1, cap.out + cap.err
    x = _summary(tmp_path)["models"]["openai/x"]
    assert "connection refused" in (x["error_cause"], x["llm_failure_cause"])
    line = next(line for line in cap.err.splitlines() if line.startswith("spectrum-rft eval: openai/x:"))
    assert "connection refused" in line and "pytest.log" in line


# --------------------------------------------------------------------------------------------------
# 3. faults and skipped scans under the table, a WARNING, totals in summary.json
# --------------------------------------------------------------------------------------------------


def test_fault_summary_and_the_skipped_scans_warning(offline_env, tmp_path, capsys):
    """``openai/mute`` only ever talks (every scan skipped after its one call), ``openai/mostly`` reports
    only every third scan (8 of 12 skipped): a WARNING for both, a failure for the mute one only."""
    play = policy_responder("accumulate")

    def respond(request: dict):
        scan = _last_scan(request)
        if request.get("model") == "mostly" and scan is not None and scan[0] % 3 == 0:
            return play(request)
        return 200, chat_response("I would rather chat about the weather."), 0.0

    server = LoopbackLLM(respond).start()
    try:
        rc = se.main(["--model", "openai/mute", "--model", "openai/mostly", "--model", "accumulate",
                      "--api-base", server.base_url, "--max-calls-per-scan", "1", "--rows", "1",
                      "--out", str(tmp_path), "--no-progress"])
    finally:
        server.stop()
    cap = capsys.readouterr()
    assert rc == 1, cap.out + cap.err
    models = _summary(tmp_path)["models"]
    assert (models["openai/mute"]["scans_skipped_total"], models["openai/mute"]["scans_total"]) == (12, 12)
    assert (models["openai/mostly"]["scans_skipped_total"], models["openai/mostly"]["scans_total"]) == (8, 12)
    assert models["spectrum/accumulate"]["scans_skipped_total"] == 0
    for name in ("openai/mute", "openai/mostly"):  # fault totals in summary.json, as the rows have them
        rows = [r for r in _rows(tmp_path) if r["input_metadata"]["completion_params"]["model"] == name]
        total: dict = {}
        for r in rows:
            for k, v in r["execution_metadata"]["extra"]["spectrum"]["faults"].items():
                total[k] = total.get(k, 0) + v
        assert models[name]["faults"] == total and total
        assert sum(models[name]["fault_groups"].values()) == sum(total.values())
    faults = cap.out.split("faults (")[1].splitlines()
    mute = next(line for line in faults if line.strip().startswith("openai/mute:"))
    top_kind, top_count = next(iter(models["openai/mute"]["faults"].items()))
    assert f"{top_kind} {top_count}" in mute and "scans skipped 12/12 (100%)" in mute
    assert any("openai/mostly:" in line and "scans skipped 8/12 (67%)" in line for line in faults)
    assert any("spectrum/accumulate:" in line and "none" in line for line in faults)
    warnings = [line for line in cap.err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 2 and "openai/mute: 12/12 scans skipped" in warnings[0]
    assert "openai/mostly: 8/12 scans skipped (67%)" in warnings[1]
    failures = [line for line in cap.err.splitlines() if "every scan of every row was skipped" in line]
    assert len(failures) == 1 and "openai/mute" in failures[0]


# --------------------------------------------------------------------------------------------------
# 7. watchdogs; 4. Ctrl-C; 2. both keep the rows that finished
# --------------------------------------------------------------------------------------------------


def record_stops(monkeypatch) -> list[int]:
    """Patch the runner's process-group stopper to also record the pids it stops; returns that list."""
    stopped: list[int] = []
    real_stop = runner.stop_process_group

    def recording_stop(proc, grace=15.0):
        stopped.append(proc.pid)
        real_stop(proc, grace)

    monkeypatch.setattr(runner, "stop_process_group", recording_stop)
    return stopped


def test_a_watchdog_stops_the_run_and_the_finished_row_is_kept(offline_env, tmp_path, capsys, monkeypatch):
    """A fake watchdog fires once the first row has been scored (and the second is hanging): the child's
    process group is stopped, the finished row kept, the message recorded and printed, exit 1."""
    tmp_root = tmp_path / "tmp"
    tmp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_root))
    model = FirstRowThenHang()
    server = LoopbackLLM(model).start()
    stopped = record_stops(monkeypatch)
    calls = []
    message = "model server exited: code -9 (SIGKILL)\nlast words of the server log"

    def watchdog() -> str | None:
        calls.append(time.monotonic())
        return message if model.hanging.is_set() and _scored_rows_streamed(tmp_path / "out") >= 1 else None

    try:
        specs = se.model_specs(["openai/x"], api_base=server.base_url)
        summary = se.run_eval(specs, path="turn", rows=2, out=tmp_path / "out", concurrency=1, timeout=600,
                              progress=False, watchdogs=[watchdog])
    finally:
        server.stop()
    out = tmp_path / "out"
    assert summary["stopped"] == "aborted" and summary["aborted"] == message
    assert _summary(out)["aborted"] == message and _summary(out)["cut_off"] == ["openai/x"]
    m = _summary(out)["models"]["openai/x"]
    assert m["rows"] == 1 and m["rows_unfinished"] == 1 and m["aborted"] == message and m["stopped"] == "aborted"
    rows = _rows(out)
    assert len(rows) == 1 and rows[0]["evaluation_result"]["score"] > 0.3
    assert m["unfinished_row_ids"] == [d for d in ["eval-r0000", "eval-r0001"]
                                       if d != rows[0]["input_metadata"]["row_id"]]
    assert len(stopped) == 1 and not group_alive(stopped[0])
    assert len(calls) >= 2  # polled while the child ran
    assert se.report(summary) == 1
    cap = capsys.readouterr()
    assert "model server exited: code -9 (SIGKILL)" in cap.err and "last words of the server log" in cap.err
    assert "cut off: openai/x (1/2 rows finished)" in cap.err
    assert _table_line(cap.out, "openai/x")[-3:] == ["1/2", "0", "-"]
    assert not list(tmp_root.iterdir())  # nothing in the system temp folder
    assert not (out / se.WORK_DIR).exists() and not (out / se.STREAM_FILE).exists()  # rows.jsonl took its rows


def test_a_watchdog_that_raises_still_stops_the_run(offline_env, tmp_path, monkeypatch):
    """A watchdog that raises still stops the run (a broken supervisor must not leave the child running)."""
    server = LoopbackLLM(lambda req: (200, chat_response("..."), HANG_S)).start()
    seen = threading.Event()

    def broken() -> str | None:
        if server.count:
            seen.set()
            raise RuntimeError("supervisor bug")
        return None

    try:
        specs = se.model_specs(["openai/x"], api_base=server.base_url)
        summary = se.run_eval(specs, path="turn", rows=1, out=tmp_path, timeout=600, progress=False,
                              watchdogs=[broken])
    finally:
        server.stop()
    assert seen.is_set() and summary["stopped"] == "aborted"
    assert "supervisor bug" in summary["aborted"] and summary["models"]["openai/x"]["rows"] == 0
    assert _rows(tmp_path) == [] and _summary(tmp_path)["models"]["openai/x"]["rows_unfinished"] == 1


def test_a_local_model_server_that_dies_aborts_the_run(offline_env, tmp_path, capsys, monkeypatch):
    """``--model local``: the server run_eval starts is watched (its ``failure()``); when it reports the
    server dead, the run stops, keeps the finished row and prints the message (exit 1)."""
    import contextlib

    from spectrum_rft.tools import local_llm as spectrum_local

    tmp_root = tmp_path / "tmp"
    tmp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_root))
    model = FirstRowThenHang()
    server = LoopbackLLM(model).start()
    dead = "model server exited: code -9 (SIGKILL) (llama.cpp at loopback). Its output ends with:\nKilled"

    class FakeLocalServer:  # spectrum_local.LocalServer's interface: params and failure()
        params = {"model": "openai/smollm2", "api_base": server.base_url, "tool_choice": "auto"}

        def failure(self) -> str | None:
            return dead if model.hanging.is_set() and _scored_rows_streamed(tmp_path / "out") >= 1 else None

    started: list[bool] = []

    @contextlib.contextmanager
    def fake_local_server(**kwargs):
        started.append(True)
        yield FakeLocalServer()

    monkeypatch.setattr(spectrum_local, "local_server", fake_local_server)
    try:
        rc = se.main(["--model", "local", "--rows", "2", "--concurrency", "1", "--out", str(tmp_path / "out"),
                      "--no-progress"])
    finally:
        server.stop()
    cap = capsys.readouterr()
    assert started and rc == 1, cap.out + cap.err
    assert "model server exited: code -9 (SIGKILL)" in cap.err
    summary = _summary(tmp_path / "out")
    assert summary["stopped"] == "aborted" and summary["aborted"] == dead
    assert summary["models"]["local (smollm2)"]["rows"] == 1 and summary["models"]["local (smollm2)"]["aborted"] == dead


def _procs_with(text: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if text in (d / "cmdline").read_bytes().decode("utf-8", "replace"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def _ctrl_c_default() -> None:
    """In the child before exec: SIGINT back to its default. A test run started in the background of a
    non-interactive shell inherits SIGINT *ignored*, and Python then installs no KeyboardInterrupt handler:
    the eval would (rightly) ignore the Ctrl-C this test sends, as a background job ignores the terminal's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_eval(out: Path, tmp_root: Path, server: LoopbackLLM, path: str = "turn",
                rows: int = 2) -> subprocess.Popen:
    """``python -m spectrum_rft eval`` as a user starts it (its own session, TMPDIR under the test's folder)."""
    env = {**os.environ, "TMPDIR": str(tmp_root)}
    return subprocess.Popen([sys.executable, "-m", "spectrum_rft", "eval", "--path", path, "--model", "openai/x",
                             "--api-base", server.base_url, "--rows", str(rows), "--concurrency", "1", "--out", str(out),
                             "--no-progress"], cwd=se.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_ctrl_c_default)


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGTERM, 143, "stopped by SIGTERM"),
                                             (signal.SIGHUP, 129, "stopped by SIGHUP")])
def test_ctrl_c_or_sigterm_keeps_the_finished_row_and_says_so(offline_env, tmp_path, sig, code, said):
    """SIGINT (Ctrl-C), SIGTERM (Slurm, ``timeout``) or SIGHUP (a dropped SSH session) once the first row is
    scored and the second hangs: one line saying where the rows are and that --resume goes on, no traceback,
    exit 128 + the signal; rows.jsonl and summary.json hold the finished row; no child left, nothing in the
    system temp folder."""
    tmp_root = tmp_path / "tmp"
    tmp_root.mkdir()
    out = tmp_path / "out"
    model = FirstRowThenHang()
    server = LoopbackLLM(model).start()
    proc = _start_eval(out, tmp_root, server)
    try:
        _wait(lambda: proc.poll() is not None or (model.hanging.is_set() and _scored_rows_streamed(out) >= 1),
              300, "the first row to be scored")
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        server.stop()
    assert proc.returncode == code, stdout + stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and said in lines[0] and str(out) in lines[0] and "--resume" in lines[0], stderr
    assert "1 of 2 rows" in lines[0]
    assert stdout.strip() == ""
    rows = _rows(out)
    assert len(rows) == 1 and rows[0]["evaluation_result"]["score"] > 0.3
    summary = _summary(out)
    assert summary["stopped"] == "interrupted" and summary["models"]["openai/x"]["rows_unfinished"] == 1
    assert summary["signal"] == (None if sig == signal.SIGINT else sig.name)
    assert not _procs_with(str(out / "dataset.jsonl")), "the pytest child outlived the signal"
    assert not list(tmp_root.iterdir())


# fields of a row that say when, where and under which ids it ran, not what it did (tool-call ids are the
# loopback model's random ones; the killed run's model server had another port)
_WHEN = {"tool_call_id", "api_base", "created_at", "updated_at", "timestamp", "duration_seconds", "rollout_id", "run_id", "experiment_id",
         "invocation_id", "cohort_id", "eval_duration_seconds", "rollout_duration_seconds", "finished_at", "pid",
         "id", "created", "started_at", "log_id", "processor_duration_seconds"}


def _what_it_did(x):
    """A row without its timestamps, ids and durations: what a rerun of the same band must reproduce exactly."""
    if isinstance(x, dict):
        return {k: _what_it_did(v) for k, v in x.items() if k not in _WHEN and "time" not in k}
    if isinstance(x, list):
        return [_what_it_did(v) for v in x]
    return x


@pytest.mark.parametrize("path", ["turn", "mcp"])
def test_kill_9_loses_no_finished_row_and_resume_runs_only_the_rest(offline_env, tmp_path, path):
    """``kill -9`` of ``spectrum-rft eval`` (an OOM kill, a preempted node) once one row is scored and the next
    hangs: the finished row is on disk in --out, every process the command started is gone within seconds,
    nothing is in the system temp folder; ``--resume`` runs only the unfinished row, and the rows equal an
    uninterrupted run's (the turn path's: both paths score the same bands alike), timestamps and ids aside."""
    import psutil

    tmp_root = tmp_path / "tmp"
    tmp_root.mkdir()
    out = tmp_path / "out"
    model = FirstRowThenHang()
    server = LoopbackLLM(model).start()
    proc = _start_eval(out, tmp_root, server, path)
    try:
        _wait(lambda: proc.poll() is not None or (model.hanging.is_set() and _scored_rows_streamed(out) >= 1),
              300, "the first row to be scored")
        assert proc.poll() is None, proc.communicate()
        family = psutil.Process(proc.pid).children(recursive=True)
        assert family, "the eval started no child"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        gone, alive = psutil.wait_procs(family, timeout=30)
        assert not alive, f"outlived kill -9 of their parent: {[p.cmdline()[:4] for p in alive]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        server.stop()
    assert not list(tmp_root.iterdir())
    assert not (out / "rows.jsonl").exists() and _scored_rows_streamed(out) == 1

    server = LoopbackLLM(policy_responder("accumulate")).start()
    try:
        resumed = _start_eval(out, tmp_root, server, path)
        _, err = resumed.communicate(timeout=300)
        assert resumed.returncode == 2 and "already holds a run (rows.partial.jsonl)" in err, err  # never overwritten
        cmd = [sys.executable, "-m", "spectrum_rft", "eval", "--path", path, "--model", "openai/x", "--api-base",
               server.base_url, "--rows", "2", "--concurrency", "1", "--no-progress"]
        res = subprocess.run([*cmd, "--out", str(out), "--resume"], cwd=se.ROOT, capture_output=True, text=True,
                             timeout=300, env={**os.environ, "TMPDIR": str(tmp_root)})
        assert res.returncode == 0, res.stdout + res.stderr
        assert "resume: 1 finished rows kept, 1 of 2 rows to run" in res.stderr
        asked = server.count
        full = tmp_path / "full"
        res = subprocess.run([*cmd[:3], *cmd[3:], "--path", "turn", "--out", str(full)], cwd=se.ROOT,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        server.stop()
    assert 12 <= asked <= 12 * 2, "the resume ran the finished row again"
    got, want = _rows(out), _rows(full)
    assert [r["input_metadata"]["row_id"] for r in got] == ["eval-r0000", "eval-r0001"]
    if path == "turn":
        assert [_what_it_did(r) for r in got] == [_what_it_did(r) for r in want]
    assert [json.dumps(r["evaluation_result"], sort_keys=True) for r in got] == \
        [json.dumps(r["evaluation_result"], sort_keys=True) for r in want]
    assert _summary(out)["resumed"] == {"kept_rows": 1, "ran_rows": 1}
    assert not (out / se.STREAM_FILE).exists() and not (out / se.WORK_DIR).exists()
    assert not list(tmp_root.iterdir())


# --------------------------------------------------------------------------------------------------
# 2. streamed rows (the child's side copy) merge with eval-protocol's persisted rows
# --------------------------------------------------------------------------------------------------


def test_the_row_stream_reads_back_each_models_first_row_of_each_id(tmp_path):
    """The stream is read from an offset (what this child wrote), skips a line cut short by a killed child
    and lines that are not streamed rows; per model the first row of each id wins (a kept row over a rerun)."""
    def row(rid: str, score: float) -> dict:
        return {"input_metadata": {"row_id": rid}, "evaluation_result": {"score": score}, "evals": {"score": score}}

    stream = tmp_path / se.STREAM_FILE
    earlier = json.dumps({"model": "a", "row": row("r0", 0.1)}) + "\n"
    stream.write_text(earlier + "".join(json.dumps(x) + "\n" for x in [
        {"model": "a", "row": row("r1", 0.4)}, {"model": "b", "row": row("r1", 0.7)}, {"model": "a", "row": row("r1", 0.9)},
        {"model": "c", "row": row("r2", 0.3)}, {"not": "a row"}, [1, 2]]) + '{"model": "a", "row": {"input_met')
    pairs = se.load_streamed_rows(stream)
    assert [(m, r["input_metadata"]["row_id"]) for m, r in pairs] == \
        [("a", "r0"), ("a", "r1"), ("b", "r1"), ("a", "r1"), ("c", "r2")]
    assert all("evals" not in r for _, r in pairs)
    got = se.first_of_each(["a", "b"], se.load_streamed_rows(stream, offset=len(earlier)))
    assert {k: [(r["input_metadata"]["row_id"], r["evaluation_result"]["score"]) for r in v] for k, v in got.items()} == \
        {"a": [("r1", 0.4)], "b": [("r1", 0.7)]}
    assert se.load_streamed_rows(tmp_path / "missing.jsonl") == []


def test_progress_follower_counts_marks_split_across_reads_and_far_from_the_end():
    """The parent's reader of the child's output: a mark early in a large read (more than 600 characters
    before its end) and a mark split between two reads are each counted once; the bar is read after it."""
    from spectrum_rft.tools.evaluation.plugin import ITEM_MARK
    from spectrum_rft.tools.evaluation.runner import ProgressFollower

    f = ProgressFollower()
    big = f"\n{ITEM_MARK} test_spectrum_turn.py::a\n" + "x" * 7000 + "  Run 1:  50%|#####     | 8/16 [00:01]"
    assert f.feed(big) == (0, (8, 16))
    mark = f"\n{ITEM_MARK} test_spectrum_turn.py::b\n"
    half = 1 + len(ITEM_MARK) // 2  # inside the mark itself
    assert f.feed("noise " + mark[:half]) == (None, (8, 16))
    item, rows = f.feed(mark[half:] + "  Run 1:  12%|#         | 2/16 [00:00]")
    assert (item, rows) == (1, (2, 16)) and f.item == 1
    assert f.feed("more output, no mark") == (None, (2, 16)) and f.item == 1


def test_progress_follower_counts_scan_marks_per_model():
    """Scan marks (one per scan closed) are counted once, also when split between two reads, and the count
    starts over with the next model's item."""
    from spectrum_rft.tools.evaluation.plugin import ITEM_MARK, SCAN_MARK
    from spectrum_rft.tools.evaluation.runner import ProgressFollower, without_scan_marks

    f = ProgressFollower()
    f.feed(f"\n{ITEM_MARK} a\n{SCAN_MARK} 0\nlog line\n{SCAN_MARK} 1\n")
    assert (f.item, f.scans) == (0, 2)
    line = f"{SCAN_MARK} 2\n"
    f.feed("x" * 900 + line[:7])
    assert f.scans == 2
    f.feed(line[7:] + f"{SCAN_MARK} 3\n")
    assert f.scans == 4
    f.feed(f"{SCAN_MARK} 4\n\n{ITEM_MARK} b\n{SCAN_MARK} 0\n")
    assert (f.item, f.scans) == (1, 1)
    assert without_scan_marks(f"a\n{SCAN_MARK} 0\nb\n{SCAN_MARK} 11\n") == "a\nb\n"


class HangAtScan:
    """Plays the accumulate policy until scan ``at`` (1-based) opens, then hangs until the server stops."""

    def __init__(self, at: int) -> None:
        self.at, self.play, self.hanging = at, policy_responder("accumulate"), threading.Event()

    def __call__(self, request: dict):
        k = _last_scan(request)
        if k is not None and k[0] >= self.at:
            self.hanging.set()
            return 200, chat_response("", []), HANG_S
        return self.play(request)


@pytest.mark.parametrize("path", ["turn", "mcp"])
def test_progress_counts_scans_while_no_row_has_finished(offline_env, tmp_path, monkeypatch, path):
    """A slow model is seen moving before its first row ends: the bar says ``scans 4/12`` while the row
    hangs at scan 5 (not a terminal: the heartbeat line), and pytest.log keeps none of the marks."""
    import functools
    import io

    from spectrum_rft.tools.evaluation import cli as eval_cli
    from spectrum_rft.tools.evaluation.plugin import SCAN_MARK
    from spectrum_rft.tools.evaluation.progress import Progress

    shown = io.StringIO()
    monkeypatch.setattr(eval_cli, "Progress", functools.partial(Progress, stream=shown, heartbeat_s=0.2))
    model = HangAtScan(5)
    server = LoopbackLLM(model).start()

    def watchdog() -> str | None:
        return "seen" if "rows 0/1 scans 4/12" in shown.getvalue() else None

    try:
        specs = se.model_specs(["openai/x"], api_base=server.base_url)
        summary = se.run_eval(specs, path=path, rows=1, out=tmp_path / "out", concurrency=1, timeout=600,
                              watchdogs=[watchdog])
    finally:
        server.stop()
    assert summary["stopped"] == "aborted" and summary["aborted"] == "seen", shown.getvalue()
    lines = shown.getvalue().splitlines()
    assert any(x.startswith(f"eval {path} [{'#' * 8}{' ' * 16}] model 1/1 openai/x rows 0/1 scans 4/12 ")
               for x in lines)  # the bar moves by scans: 4 of 12 is a third of it
    assert not any(re.search(r"scans ([5-9]|1\d)/12", x) for x in lines)  # never more than closed
    assert SCAN_MARK not in (tmp_path / "out" / "pytest.log").read_text()


# --------------------------------------------------------------------------------------------------
# 5. a user's dataset (--dataset FILE): every row runs or the file is refused before any work
# --------------------------------------------------------------------------------------------------


def _raw_rows(n: int, prefix: str = "mine", **kw) -> list[dict]:
    from spectrum_rft.rollouts.dataset import make_rows

    return make_rows(n, prefix=prefix, **kw)


def test_a_dataset_file_with_a_broken_line_names_it_and_runs_the_other_rows(offline_env, tmp_path, capsys):
    from spectrum_rft.rollouts.dataset import to_evaluation_row_dict

    rows = _raw_rows(2) + [to_evaluation_row_dict(r) for r in _raw_rows(1, prefix="theirs", memory_mode="none")]
    f = tmp_path / "rows.jsonl"
    lines = [json.dumps(r) for r in rows]
    f.write_text("\n".join([lines[0], '{"id": "mine-r0009", "environment_context": {', lines[1], "", "[1, 2]", lines[2]])
                 + "\n")
    out = tmp_path / "out"
    rc = se.main(["--model", "accumulate", "--dataset", str(f), "--out", str(out), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    err = [line for line in cap.err.splitlines() if line.strip()]
    assert err == [f"spectrum-rft eval: {f}:2: not JSON (Expecting property name enclosed in double quotes at column "
                   f"46); line skipped", f"spectrum-rft eval: {f}:5: not a spectrum row (an object with id, or "
                   "input_metadata.row_id); line skipped"]
    got = _rows(out)
    assert [r["input_metadata"]["row_id"] for r in got] == ["mine-r0000", "mine-r0001", "theirs-r0000"]
    assert all(r["evaluation_result"]["score"] > 0 for r in got)
    s = _summary(out)
    assert s["rows"] == 3 and s["memory_mode"] == "mixed" and s["preset"] == "default-v2"
    # the same file, the rows capped by --rows, and the flags the rows carry refused
    assert se.main(["--model", "accumulate", "--dataset", str(f), "--rows", "1", "--json", "--no-progress",
                    "--out", str(tmp_path / "one")]) == 0
    assert len(_rows(tmp_path / "one")) == 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        se.main(["--dataset", str(f), "--preset", "seed", "--salt", "x", "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and "drop --preset, --salt" in capsys.readouterr().err


@pytest.mark.parametrize("trouble, said", [
    ("duplicate", "1 row id(s) appear more than once ('mine-r0001')"),
    ("huge", "over the 1,000,000-byte limit of a row; nothing was run"),
    ("missing", "is not a valid row"),
    ("empty", "holds no row to run"),
])
def test_a_dataset_file_that_cannot_run_is_refused_in_one_line_before_any_work(tmp_path, capsys, trouble, said):
    rows = _raw_rows(3)
    if trouble == "duplicate":
        rows[2]["id"] = rows[1]["id"]
    elif trouble == "huge":
        rows[1]["system_prompt"] = "x" * 1_200_000
    elif trouble == "missing":
        rows[1] = {"messages": "not a list", "input_metadata": {"row_id": "mine-r0001"}}
    else:
        rows = []
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    rc = se.main(["--model", "accumulate", "--dataset", str(f), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and said in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_dataset_adapter_refuses_in_one_line():
    """The entries' adapter (pytest --ep-jsonl-path, the cloud): the same refusals, one line each."""
    from spectrum_rft.rollouts.dataset import DatasetError, dataset_adapter

    rows = _raw_rows(2)
    other = {**rows[0], "environment_context": {**rows[0]["environment_context"], "memory_mode": "none"}}
    with pytest.raises(DatasetError, match=r"1 differing rows share an id \('mine-r0000'\)"):
        dataset_adapter([rows[0], rows[1], other])
    assert len(dataset_adapter([rows[0], dict(rows[0])])) == 2  # one row twice, unchanged: GRPO candidates
    with pytest.raises(DatasetError, match="over the 1,000,000-byte limit") as e:
        dataset_adapter([{**rows[0], "system_prompt": "y" * 1_100_000}])
    with pytest.raises(DatasetError) as e:
        dataset_adapter([{"messages": [{"role": 7}], "input_metadata": {"row_id": "a"}}])
    assert "\n" not in str(e.value) and "dataset row 0 ('a') is not a valid row: messages.0" in str(e.value)
    assert len(dataset_adapter(rows)) == 2


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_inside_a_running_task_unwinds_every_task(name, capsys):
    """A stop signal delivered while a task's step is running (not while the loop waits) cancels the command's
    main task: every task runs its own cleanup, none is left pending, the command sees one Stop naming the
    signal, and the command's own handler is back afterwards (CI's failure: a KeyboardInterrupt raised inside
    one task stopped the loop there, and asyncio printed "Task was destroyed but it is pending!")."""
    import asyncio
    import gc

    from spectrum_rft.tools.evaluation.cli import run_until_stopped, signals_stop_the_run
    from spectrum_rft.tools.evaluation.runner import Stop

    cleaned = []

    async def inner() -> None:
        try:
            os.kill(os.getpid(), getattr(signal, name))  # delivered now, inside this task's step
            await asyncio.sleep(3600)
        finally:
            cleaned.append("inner")

    async def outer() -> None:
        others = [asyncio.ensure_future(inner()), asyncio.ensure_future(asyncio.sleep(3600))]
        try:
            await asyncio.gather(*others)
        finally:
            cleaned.append("outer")

    with signals_stop_the_run():
        handler = signal.getsignal(getattr(signal, name))
        with pytest.raises(Stop) as stopped:
            run_until_stopped(outer())
        assert signal.getsignal(getattr(signal, name)) is handler
    gc.collect()
    assert stopped.value.signal == name and sorted(cleaned) == ["inner", "outer"]
    err = capsys.readouterr().err
    assert "pending" not in err and "never retrieved" not in err, err
