"""The verifiers environment: its rows, its windows, its refusals, and parity with the evaluator.

Runs in the verifiers venv (``scripts/test_verifiers.sh``); skipped where verifiers is not installed. The
parity tests also need the main venv (eval-protocol, litellm) for the loopback model and for
``spectrum-rft eval``: its python is ``$SPECTRUM_MAIN_PYTHON`` (the script sets it); without it they skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

vf = pytest.importorskip("verifiers.v1")

from openai.types.chat import ChatCompletionMessage  # noqa: E402

from spectrum_memory import SpectrumTaskset, SpectrumTasksetConfig, load_environment  # noqa: E402
from spectrum_rft.rollouts.driver import play  # noqa: E402
from spectrum_rft.rollouts.episode import InProcessEpisode  # noqa: E402
from spectrum_rft.rollouts.dataset import make_rows  # noqa: E402
from spectrum_rft.task.scan_format import is_scan_text  # noqa: E402
from spectrum_rft.task.seeding import seed_for_row  # noqa: E402
from spectrum_rft.task.window import window  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))  # the loopback model (tests/loopback_llm.py)

from loopback_llm import FAULT_MODELS, MAIN_PYTHON, main_python, served_apart  # noqa: E402


def _tasks(**kw):
    return SpectrumTaskset(SpectrumTasksetConfig(id="spectrum-memory", **kw)).load()


def test_load_environment_builds_an_env():
    env = load_environment(rows=3, memory_mode="notepad", salt="s")
    assert isinstance(env, vf.Env)


def test_tasks_are_the_project_rows():
    tasks = _tasks(rows=3, epochs=2, salt="s1", prompt="weak")
    rows = make_rows(3, prompt="weak", epochs=2, salt="s1")
    assert [t.data.id for t in tasks] == [r["id"] for r in rows]
    assert len({t.data.id for t in tasks}) == 6
    for t, r in zip(tasks, rows):
        assert t.data.system_prompt == r["system_prompt"]
        assert t.data.environment_context["seed"] == seed_for_row(t.data.id, "s1")
    other = _tasks(rows=3, epochs=2, salt="s2")
    assert [t.data.environment_context["seed"] for t in other] != [t.data.environment_context["seed"] for t in tasks]


class Scripted:
    """A model as a function of what it is sent: records every request; answers with ``answer(messages)``."""

    def __init__(self, answer):
        self.answer, self.requests = answer, []

    async def __call__(self, messages, tools):
        self.requests.append((json.loads(json.dumps(messages)), tools))
        content, calls = self.answer(messages)
        message = ChatCompletionMessage.model_validate(
            {"role": "assistant", "content": content,
             "tool_calls": [{"id": f"c{len(self.requests)}-{i}", "type": "function",
                             "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)] or None})
        return SimpleNamespace(choices=[SimpleNamespace(message=message, finish_reason="stop")], usage=None)


def _episode(memory_mode: str, answer, **ctx):
    task = _tasks(rows=1, memory_mode=memory_mode, salt="w")[0]
    episode = InProcessEpisode.for_row(task.data.id, {"environment_context": {**task.data.environment_context, **ctx}})
    model = Scripted(answer)
    transcript = [{"role": "system", "content": task.data.system_prompt}, {"role": "user", "content": task.data.prompt}]
    played = asyncio.run(play(episode, model, transcript=transcript, tries=1))  # one try: every reply reaches the env
    return episode.env, model, played.stats.model_calls, played.error


def _scans(messages) -> int:
    return sum(1 for m in messages if m["role"] in ("user", "tool") and is_scan_text(m.get("content") or ""))


@pytest.mark.parametrize("mode", ["none", "scaffold", "scrambled", "notepad"])
def test_icl_off_modes_see_one_scan(mode):
    report = lambda msgs: ("", [("submit_report", json.dumps({"center_freqs": [100.0]}))])  # noqa: E731
    env, model, replies, _ = _episode(mode, report)
    assert env.done and replies == env.n_scans
    assert [_scans(m) for m, _ in model.requests] == [1] * env.n_scans
    assert model.requests[0][1] == env.tools()  # the env's own tool_schemas()


def test_icl_sees_every_scan():
    report = lambda msgs: ("", [("submit_report", json.dumps({"center_freqs": [100.0]}))])  # noqa: E731
    env, model, _, _ = _episode("icl", report)
    assert [_scans(m) for m, _ in model.requests] == list(range(1, env.n_scans + 1))


def test_bad_input_is_refused_and_the_rollout_goes_on():
    junk = iter([("", [("submit_report", "{not json")]), ("", [("no_such_tool", "{}")]), ("just text", []),
                 ("", [("", "")])])

    def answer(msgs):
        return next(junk, ("", [("submit_report", json.dumps({"center_freqs": [float("nan")]}))]))

    env, model, replies, error = _episode("scaffold", answer, max_calls_per_scan=4)
    m = env.metrics()
    assert env.done and error is None and m["scans_skipped"] == env.n_scans and m["score"] == 0.0
    assert m["faults"]["invalid_report"] >= 1 and m["faults"]["unknown_tool"] == 2  # no_such_tool and a call without a name
    texts = [m["content"] for msgs, _ in model.requests for m in msgs if m["role"] == "tool"]
    assert any("not valid JSON" in t for t in texts) and any("unknown tool: no_such_tool" in t for t in texts)


def test_a_model_that_never_answers_is_an_error_with_its_cause():
    import httpx
    import openai

    async def fail(messages, tools):
        raise openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:9/v1"))

    task = _tasks(rows=1, salt="w")[0]
    episode = InProcessEpisode.for_row(task.data.id, {"environment_context": task.data.environment_context})
    played = asyncio.run(play(episode, fail, transcript=[{"role": "system", "content": "s"}], tries=2,
                              backoff_base=0.001, backoff_max=0.002, endpoint="http://127.0.0.1:9/v1"))
    assert played.stats.model_calls == 0 and played.stats.llm_requests == 2 and played.stats.cause == "error"
    assert played.error.startswith("model never produced a usable reply: error (2 requests to http://127.0.0.1:9/v1)")
    env = episode.env
    assert env.done and env.metrics()["scans_skipped"] == env.n_scans
    assert env.metrics()["faults"]["llm_error"] == 2


def test_a_failed_scan_is_skipped_and_the_rollout_goes_on():
    """Every try of scan 2's request fails (HTTP 500): that scan is scored as an empty report, the others
    are played; the rollout is no error."""
    import httpx
    import openai

    report = Scripted(lambda msgs: ("", [("submit_report", json.dumps({"center_freqs": [100.0]}))]))

    async def flaky(messages, tools):
        if any("Scan 2/" in (m.get("content") or "") for m in messages if m["role"] == "user"):
            raise openai.InternalServerError("overloaded", response=httpx.Response(
                500, request=httpx.Request("POST", "http://x/v1")), body=None)
        return await report(messages, tools)

    task = _tasks(rows=1, salt="w")[0]
    episode = InProcessEpisode.for_row(task.data.id, {"environment_context": task.data.environment_context})
    played = asyncio.run(play(episode, flaky, transcript=[{"role": "system", "content": "s"}], tries=2,
                              backoff_base=0.001, backoff_max=0.002))
    m = episode.env.metrics()
    assert played.error is None and played.stats.model_calls == episode.env.n_scans - 1
    assert m["scans_skipped"] == 1 and m["faults"]["llm_5xx"] == 2 and m["faults"]["llm_gave_up"] == 1


# ---- parity with `spectrum-rft eval`, through the real vf-eval CLI and a real loopback HTTP model ----------


def _main_python() -> str:
    return main_python() or pytest.skip(f"{MAIN_PYTHON} (the main venv's python, for the loopback model and "
                                        "spectrum-rft eval) is not set")


@pytest.fixture(params=list(FAULT_MODELS))
def loopback(request):
    """The loopback model over HTTP: the accumulate policy, the junk model, a flaky host (HTTP 500s on scan
    3, empty replies on scan 5) or a dead one (HTTP 500 for every request). Yields (base URL, kind)."""
    with served_apart(_main_python(), request.param) as url:
        yield url, request.param


def _tool_texts_seen(messages: list[dict], memory_mode: str) -> set[str]:
    """Tool results the evaluator sent the model: those in the window of each request (the transcript up to
    each assistant reply, through the project's window)."""
    return {m["content"] for i, a in enumerate(messages) if a["role"] == "assistant"
            for m in window(messages[:i], memory_mode) if m["role"] == "tool"}


def test_vf_eval_matches_spectrum_rft_eval(loopback, tmp_path):
    """The same model through vf-eval and through ``spectrum-rft eval`` (one episode driver): the same bands,
    per-scan rewards, faults and failure causes, and a model that never answers is an error on both."""
    url, kind = loopback
    rows = 2
    env = {**os.environ, "OPENAI_API_KEY": "dummy", "EP_NO_UPLOAD": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "EP_DISABLE_AUTO_BROWSER": "1"}
    env.pop("FIREWORKS_API_KEY", None)
    vf_eval = Path(sys.executable).parent / "vf-eval"
    out = tmp_path / "vf"
    run = subprocess.run([str(vf_eval), "spectrum-memory", "-m", "loopback", "--client.base-url", url,
                          "--client.api-key-var", "OPENAI_API_KEY", "-n", str(rows), "-r", "2",
                          "--env.taskset.rows", str(rows), "--env.taskset.prefix", "eval", "--no-rich", "--no-push",
                          "-o", str(out)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    traces = [t for line in next(out.glob("*/traces.jsonl")).read_text().splitlines()
              for t in json.loads(line)["traces"]]
    dead = kind == "dead"
    assert len(traces) == 2 * rows and all(bool(t["errors"]) == dead for t in traces), [t["errors"] for t in traces]

    ep_out = tmp_path / "ep"
    run = subprocess.run([_main_python(), "-m", "spectrum_rft", "eval", "--model", "openai/loopback", "--api-base",
                          url, "--rows", str(rows), "--out", str(ep_out), "--json", "--no-progress"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == (1 if dead else 0), run.stdout[-3000:] + run.stderr[-3000:]
    ep_rows = {}
    for line in (ep_out / "rows.jsonl").read_text().splitlines():
        r = json.loads(line)
        ep_rows[r["input_metadata"]["row_id"]] = r
    assert len(ep_rows) == rows

    for t in traces:
        row = ep_rows[t["task"]["data"]["id"]]
        mine, theirs = t["info"]["spectrum"], row["execution_metadata"]["extra"]["spectrum"]
        assert mine["band_fingerprint"] == theirs["band_fingerprint"]
        assert mine["per_scan_reward"] == theirs["per_scan_reward"]
        assert mine["score"] == theirs["score"]
        failure = t["info"]["spectrum_rollout"].get("model_failure")
        their_failure = row["execution_metadata"]["extra"]["spectrum_rollout"].get("model_failure")
        assert (failure or {}).get("cause") == (their_failure or {}).get("cause")
        assert (failure is not None) == dead
        if dead:
            assert failure["cause"] == "http 5xx" and failure["requests"] == their_failure["requests"]
            assert "model never produced a usable reply: http 5xx" in row["rollout_status"]["message"]
            assert mine["scans_skipped"] == mine["n_scans"]
            continue
        assert t["rewards"]["spectrum_score"]["score"] == row["evaluation_result"]["score"] == theirs["score"]
        for name in ("memory_gain", "dormant_recall", "carry_rate", "scans_skipped"):
            assert t["metrics"][name] == pytest.approx(theirs[name] or 0.0)
        for k in ("invalid_report", "unknown_tool", "skip_call_budget", "llm_gave_up", "skip_llm_failure"):
            assert mine["faults"].get(k) == theirs["faults"].get(k), k
        # failed requests: as many on both; verifiers' interception endpoint turns a 200 without choices into a
        # 500 (ProviderError), so what the evaluator counts as llm_empty_choices the harness sees as llm_5xx
        assert (mine["faults"].get("llm_5xx", 0) == theirs["faults"].get("llm_5xx", 0)
                + theirs["faults"].get("llm_empty_choices", 0))
        # what the model was sent: verifiers' own record (the trace's message nodes) vs the evaluator's row
        seen = [n["message"] for n in t["nodes"]]
        assert {m["content"] for m in seen if m["role"] == "tool"} == _tool_texts_seen(row["messages"],
                                                                                         mine["memory_mode"])
    if kind == "junk":  # the junk model: refusals reached it, and the budget closed the even scans
        t = traces[0]
        assert t["info"]["spectrum"]["scans_skipped"] == t["info"]["spectrum"]["n_scans"] // 2
        texts = [n["message"]["content"] for n in t["nodes"] if n["message"]["role"] == "tool"]
        assert any(x.startswith("Error: unknown tool: scan_again") for x in texts)
    elif kind == "faults":  # scans 3 and 5 failed on every try (4) and were skipped; the rest were played
        for t in traces:
            f = t["info"]["spectrum"]["faults"]
            assert t["info"]["spectrum"]["scans_skipped"] == 2 and f["llm_5xx"] == 8 and f["llm_gave_up"] == 2
            assert t["info"]["spectrum_rollout"]["model_calls"] == t["info"]["spectrum"]["n_scans"] - 2
    elif kind == "accumulate":
        assert all(t["info"]["spectrum"]["score"] > 0.3 for t in traces)
