"""The OpenEnv environment through OpenEnv's real server (uvicorn, a subprocess, HTTP + WebSocket) and its real
clients: rows, tools, refusals, concurrent sessions, and parity with ``spectrum-rft eval``.

Runs in the OpenEnv venv (``scripts/test_openenv.sh``); skipped where openenv is not installed. The parity
tests also need the main venv (eval-protocol, litellm) for the loopback model and for ``spectrum-rft eval``:
its python is ``$SPECTRUM_MAIN_PYTHON`` (the script sets it); without it they skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openenv.core")

from openenv.core.mcp_client import MCPToolClient  # noqa: E402

from spectrum_openenv import OpenEnvEpisode, OpenEnvToolEnv, SpectrumAction, SpectrumEnvClient, play  # noqa: E402
from spectrum_openenv.client import openai_request  # noqa: E402
from spectrum_rft.rollouts.dataset import make_rows  # noqa: E402
from spectrum_rft.task.environment import env_for_row  # noqa: E402
from spectrum_rft.task.instructions import tool_schemas  # noqa: E402
from spectrum_rft.task.memory import MEMORY_MODES  # noqa: E402
from spectrum_rft.training.spectrum.trl_env import tool_env_class, tool_names  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))  # the loopback model (tests/loopback_llm.py)

from loopback_llm import FAULT_MODELS, MAIN_PYTHON, main_python, served_apart  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(argv: list[str]):
    """Run ``python ARGV`` (an OpenEnv server for the spectrum env) on a free port of 127.0.0.1; yield its
    base URL and process."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, *argv, "--host", "127.0.0.1", "--port", str(port)], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the OpenEnv server exited"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            pytest.fail("the OpenEnv server did not listen within 60 s")
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server():
    """OpenEnv's server for the spectrum env (``uvicorn spectrum_openenv.server:app``, the defaults). Yields
    its base URL."""
    for url, _ in _serve(["-m", "uvicorn", "spectrum_openenv.server:app", "--log-level", "warning"]):
        yield url


def _row(i: int = 0, **kw) -> tuple[str, dict]:
    r = make_rows(i + 1, prefix="eval", **kw)[i]
    return r["id"], {"environment_context": r["environment_context"]}


def _run(coro):
    return asyncio.run(coro)


# ---- one session: the row's episode, its tools, its refusals ----------------------------------------


def test_reset_is_the_rows_episode(server):
    row_id, info = _row(1, memory_mode="notepad")
    env, seed = env_for_row(row_id, info)
    obs0, _ = env.reset(seed)

    async def go():
        async with SpectrumEnvClient(base_url=server) as client:
            return (await client.reset(row_id=row_id, dataset_info=info)).observation, await client.state()

    obs, state = _run(go())
    assert obs.row_id == row_id and obs.seed == seed and state.seed == seed
    assert obs.prompt == obs0["prompt"] and obs.scan == 0 and obs.n_scans == env.n_scans and not obs.done
    assert obs.system_prompt == env.system_prompt() and obs.tool_schemas == env.tools()
    assert obs.memory_mode == "notepad" and obs.reward is None
    assert state.band_fingerprint == env.metrics()["band_fingerprint"] and state.step_count == 0


def test_bad_input_is_one_line_and_the_session_goes_on(server):
    row_id, info = _row(0)

    async def go():
        async with SpectrumEnvClient(base_url=server) as client:
            errors = []
            for kwargs in ({}, {"row_id": row_id, "seed": 3}, {"row_id": row_id, "colour": "red"},
                           {"row_id": row_id, "dataset_info": "x"}):
                with pytest.raises(Exception) as e:
                    await client.reset(**kwargs)
                errors.append(str(e.value))
            with pytest.raises(Exception) as e:  # a step before any reset
                await client.step(SpectrumAction(tool="submit_report", arguments="{}"))
            errors.append(str(e.value))
            await client.reset(row_id=row_id, dataset_info=info)  # the session still works
            steps = [await client.step(SpectrumAction(tool=t, arguments=a, first=True, last=True))
                     for t, a in (("submit_report", "{not json"), ("scan_again", '{"band": "all"}'),
                                  ("submit_report", '{"center_freqs": "everywhere"}'))]
            return errors, steps, await client.state()

    errors, steps, state = _run(go())
    assert all("\n" not in e for e in errors), errors
    assert "reset needs row_id" in errors[0] and "reset(seed=...) is not used" in errors[1]
    assert "got colour" in errors[2] and "dataset_info must be an object" in errors[3]
    assert "call reset(row_id=...) first" in errors[4]
    assert [s.observation.ok for s in steps] == [False, False, False]
    assert "not valid JSON" in steps[0].observation.text
    assert steps[1].observation.text.startswith("Error: unknown tool: scan_again")
    assert all(s.reward == 0.0 and not s.done for s in steps)
    assert state.faults == {"invalid_report": 2, "unknown_tool": 1}
    assert state.scan == 0 and state.step_count == 3


def test_bad_reset_over_http_is_the_same_one_line_4xx(server):
    """Every reset OpenEnv's stateless ``/reset`` (HTTP) refuses is a 4xx whose ``detail`` is the one line the
    WebSocket session says for it (not a bare 500); so is ``/step`` (HTTP has no session, so no episode)."""
    row_id, _ = _row(0)

    def ctx(**c):
        return {"row_id": row_id, "dataset_info": {"environment_context": c}}

    bad = [{}, {"row_id": row_id, "seed": 3}, {"row_id": row_id, "seed": -1}, {"row_id": row_id, "colour": "red"},
           {"row_id": 7}, {"row_id": row_id, "dataset_info": "x"}, {"row_id": row_id, "episode_id": "e" * 300},
           ctx(memory_mode="telepathy"), ctx(preset="nope"), ctx(reward="nope"), ctx(max_calls_per_scan=-1),
           ctx(max_calls_per_scan="many")]

    async def over_ws(kwargs):
        async with SpectrumEnvClient(base_url=server) as client:
            with pytest.raises(Exception) as e:
                await client.reset(**kwargs)
            return str(e.value)

    for kwargs in bad:
        r = httpx.post(f"{server}/reset", json=kwargs, timeout=30)
        assert 400 <= r.status_code < 500, (kwargs, r.status_code, r.text)
        line = r.json()["detail"]
        assert isinstance(line, str) and line and "\n" not in line and "Traceback" not in line, (kwargs, line)
        assert f"Server error: {line} (code:" in _run(over_ws(kwargs)), kwargs
    r = httpx.post(f"{server}/step", json={"action": {"tool": "submit_report", "arguments": "{}"}}, timeout=30)
    assert r.status_code == 400 and r.json()["detail"] == "no episode: call reset(row_id=...) first"
    r = httpx.post(f"{server}/reset", json={"row_id": row_id}, timeout=30)  # a good one still works
    assert r.status_code == 200 and r.json()["observation"]["row_id"] == row_id


def test_distinct_fault_names_are_bounded(server):
    """A client may send any fault names; the session's record keeps the first MAX_FAULT_KINDS distinct ones and
    counts the rest under ``other`` (nothing lost: the counts add up); the env's own keep their names."""
    row_id, info = _row(0)
    sent = 3 * 200

    async def go():
        async with SpectrumEnvClient(base_url=server) as client:
            await client.reset(row_id=row_id, dataset_info=info)
            for k in range(3):  # a message of calls left open: no turn ends, so the env adds no fault of its own
                faults = {f"made_up_{k}_{i}": 1 for i in range(200)}
                await client.step(SpectrumAction(tool="submit_report", arguments="{not json", first=k == 0,
                                                 last=False, faults=faults))
            return await client.state()

    state = _run(go())
    assert len(state.faults) < 100, len(state.faults)  # not one name per fault sent
    from spectrum_rft.task.environment import MAX_FAULT_KINDS, OTHER_FAULT

    assert set(state.faults) - {f"made_up_0_{i}" for i in range(MAX_FAULT_KINDS)} == {"invalid_report", OTHER_FAULT}
    assert state.faults["invalid_report"] == 3  # the env's own faults keep their name
    assert sum(state.faults.values()) == sent + 3  # every fault counted, under its name or as other
    assert state.faults["made_up_0_0"] == 1


def test_idle_sessions_are_reaped():
    """Clients that stay connected and say nothing hold no slot past ``--session-idle-s``: with 2 slots both
    taken, a third client is refused; after the idle limit (OpenEnv's reaper looks every 5 s at the most) it
    gets a slot, and a reaped client's next message is refused in one line."""
    row_id, info = _row(0)

    async def go(url):
        silent = [SpectrumEnvClient(base_url=url) for _ in range(2)]
        await silent[0].reset(row_id=row_id, dataset_info=info)  # one in an episode, one only connected
        await silent[1].connect()
        try:
            with pytest.raises(Exception, match="CAPACITY_REACHED"):
                async with SpectrumEnvClient(base_url=url) as third:
                    await third.reset(row_id=row_id, dataset_info=info)
            t0, deadline = time.monotonic(), time.monotonic() + 30
            while True:  # the idle sessions are ended: a new client gets a slot
                try:
                    async with SpectrumEnvClient(base_url=url) as third:
                        obs = (await third.reset(row_id=row_id, dataset_info=info)).observation
                    break
                except Exception as e:
                    assert "CAPACITY_REACHED" in str(e) and time.monotonic() < deadline, str(e)
                    await asyncio.sleep(0.5)
            waited = time.monotonic() - t0
            with pytest.raises(Exception) as e:
                await silent[0].step(SpectrumAction(tool="submit_report", arguments="{}"))
            return obs, waited, str(e.value)
        finally:
            for c in silent:
                await c.close()

    for url, _ in _serve(["-m", "spectrum_openenv.server", "--max-sessions", "2", "--session-idle-s", "1"]):
        obs, waited, refusal = _run(go(url))
    assert obs.row_id == row_id and waited < 15
    assert "this session is closed" in refusal and "\n" not in refusal


def test_tools_on_mcp_are_the_rows(server):
    """OpenEnv's own MCP client (production mode: tools/list and tools/call on ``/mcp``): the session lists
    the row's tools with the env's schemas, and a call goes to the env as sent (the env refuses bad input)."""

    async def go(memory_mode):
        row_id, info = _row(0, memory_mode=memory_mode)
        async with MCPToolClient(base_url=server) as client:
            await client.reset(row_id=row_id, dataset_info=info)
            tools = await client.list_tools(use_cache=False)
            good = await client.call_tool("submit_report", center_freqs=[100.0, 250.0])
            bad = await client.call_tool("submit_report", center_freqs="everywhere")
            return row_id, info, tools, good, bad

    for mode in MEMORY_MODES:  # byte for byte what the in-process path and the evaluator's MCP server offer
        row_id, info, tools, good, bad = _run(go(mode))
        env, seed = env_for_row(row_id, info)
        env.reset(seed)
        listed = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                    "parameters": t.input_schema}} for t in tools]
        assert json.dumps(listed) == json.dumps(env.tools()) == json.dumps(tool_schemas(mode)), mode
        r = env.call_tool("submit_report", {"center_freqs": [100.0, 250.0]}, first=True, last=True)
        assert good["ok"] and good["advanced"] and good["scan"] == 1 and good["scan_reward"] == r.reward
        assert not bad["ok"] and bad["error"].startswith("center_freqs must be a list")


def test_tool_env_for_trl(server):
    """The TRL-shaped env (``environment_factory``): reset gives scan 1, each tool call the env's answer (and
    the next scan), get_reward the env's score."""
    row_id, info = _row(0)
    env, seed = env_for_row(row_id, info)
    obs0, _ = env.reset(seed)
    cls = OpenEnvToolEnv.for_mode(info["environment_context"]["memory_mode"])
    assert cls is OpenEnvToolEnv.for_mode("scaffold") and cls is not OpenEnvToolEnv.for_mode("notepad")
    assert tool_names(object.__new__(cls)) == {"submit_report"}  # the row's tools exactly: no notepad in scaffold
    assert tool_names(object.__new__(OpenEnvToolEnv.for_mode("notepad"))) == {"submit_report", "notepad_read",
                                                                             "notepad_write"}
    tool_env = cls(server)
    try:
        with pytest.raises(ValueError, match="use OpenEnvToolEnv.for_mode"):  # a notepad row on the scaffold class
            tool_env.reset(row_id=row_id, environment_context={**info["environment_context"], "memory_mode": "notepad"})
        assert tool_env.reset(row_id=row_id, environment_context=info["environment_context"], prompt="x") \
            == obs0["prompt"]
        assert "notepad_read is not available" in tool_env.call("notepad_read", {})  # the env still judges any call
        env.call_tool("notepad_read", {}, first=True, last=True)
        texts = []
        while not env.done:
            texts.append(tool_env.submit_report(center_freqs=[100.0, 300.0]))
            env.call_tool("submit_report", {"center_freqs": [100.0, 300.0]}, first=True, last=True)
        assert texts[0].startswith("Scan 1 recorded.") and "Scan 2/" in texts[0] and "Scan 2/" not in texts[-1]
        assert tool_env.get_reward() == env.metrics()["score"]
    finally:
        tool_env._close()


# ---- many sessions of one row at once --------------------------------------------------------------------


def test_32_concurrent_sessions_of_one_row(server):
    """32 sessions of one row, stepped in lockstep so their messages interleave on the server, each with its
    own reports and notepad: every session faces the row's band, reads back only its own notepad, and gets
    exactly the rewards an in-process env gives its own actions."""
    n = 32
    row_id, info = _row(3, memory_mode="notepad")
    ref, seed = env_for_row(row_id, info)
    obs0, _ = ref.reset(seed)
    n_scans = ref.n_scans

    def report(i: int, k: int) -> list[float]:
        return [float((37 * i + 11 * k) % 700 + 5), float((53 * i + 7 * k) % 700 + 9)][: 1 + i % 2]

    async def go():
        clients = [SpectrumEnvClient(base_url=server) for _ in range(n)]
        await asyncio.gather(*(c.connect() for c in clients))
        try:
            opened = await asyncio.gather(*(c.reset(row_id=row_id, dataset_info=info) for c in clients))
            notes: list[list[str]] = [[] for _ in range(n)]
            rewards: list[list[float]] = [[] for _ in range(n)]
            for k in range(n_scans):
                await asyncio.gather(*(c.step(SpectrumAction(tool="notepad_write", arguments=json.dumps(
                    {"text": f"session {i} scan {k}"}), first=True, last=False)) for i, c in enumerate(clients)))
                read = await asyncio.gather(*(c.step(SpectrumAction(tool="notepad_read", arguments="{}", first=False,
                                                                     last=False)) for c in clients))
                for i, r in enumerate(read):
                    notes[i].append(r.observation.text)
                done = await asyncio.gather(*(c.step(SpectrumAction(tool="submit_report", arguments=json.dumps(
                    {"center_freqs": report(i, k)}), first=False, last=True)) for i, c in enumerate(clients)))
                for i, r in enumerate(done):
                    rewards[i].append(r.observation.scan_reward)
            states = await asyncio.gather(*(c.state() for c in clients))
            return opened, notes, rewards, states
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    opened, notes, rewards, states = _run(go())
    fingerprint = ref.metrics()["band_fingerprint"]
    assert {o.observation.prompt for o in opened} == {obs0["prompt"]}
    assert {s.band_fingerprint for s in states} == {fingerprint} and {s.seed for s in states} == {seed}
    for i in range(n):
        assert notes[i] == [f"session {i} scan {k}" for k in range(n_scans)], i
        env, _ = env_for_row(row_id, info)
        env.reset(seed)
        for k in range(n_scans):
            env.call_tool("notepad_write", {"text": f"session {i} scan {k}"}, first=True, last=False)
            env.call_tool("notepad_read", {}, first=False, last=False)
            env.call_tool("submit_report", {"center_freqs": report(i, k)}, first=False, last=True)
        m = env.metrics()
        assert rewards[i] == m["per_scan_reward"] and states[i].score == m["score"], i
        assert states[i].done and states[i].step_count == 3 * n_scans and states[i].faults == {}
    assert len({tuple(r) for r in rewards}) > 1  # the sessions' own actions, not one shared episode


# ---- parity with `spectrum-rft eval`: the loopback model through OpenEnv and through the evaluator -----


def _main_python() -> str:
    return main_python() or pytest.skip(f"{MAIN_PYTHON} (the main venv's python, for the loopback model and "
                                        "spectrum-rft eval) is not set")


@pytest.fixture(params=list(FAULT_MODELS))
def loopback(request):
    """The loopback model over HTTP (``tests/loopback_llm.py``, main venv): the accumulate policy; the junk
    model (a junk report, an unknown tool and a text-only reply on every scan); a flaky host (HTTP 500s on
    scan 3, empty replies on scan 5); a dead one. Yields (base URL, kind)."""
    with served_apart(_main_python(), request.param) as url:
        yield url, request.param


async def _play_openenv(server: str, url: str, rows: list[tuple[str, dict]], rollouts: int):
    """Every row ``rollouts`` times at once, each rollout in its own OpenEnv session, driven by the
    project's episode driver against the model at ``url``."""
    import openai

    model = openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0, timeout=60)

    async def one(row_id, info):
        async with SpectrumEnvClient(base_url=server) as client:
            episode = OpenEnvEpisode(client, row_id, info)
            played = await play(episode, openai_request(model, "loopback"), endpoint=f"{url} (model loopback)")
            return row_id, played, episode.rewards

    try:
        return await asyncio.gather(*(one(r, i) for r, i in rows for _ in range(rollouts)))
    finally:
        await model.close()


def test_openenv_matches_spectrum_rft_eval(server, loopback, tmp_path):
    """The same model through OpenEnv (server + client + the episode driver) and through ``spectrum-rft eval``:
    the same bands, per-scan rewards, scores, faults, failure causes and transcripts; a model that never
    answers is an error on both; OpenEnv's rewards add up to the score."""
    url, kind = loopback
    n_rows = 2
    rows = [_row(i) for i in range(n_rows)]
    env = {**os.environ, "OPENAI_API_KEY": "dummy", "EP_NO_UPLOAD": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "EP_DISABLE_AUTO_BROWSER": "1"}
    env.pop("FIREWORKS_API_KEY", None)
    ep_out = tmp_path / "ep"
    evaluator = subprocess.Popen([_main_python(), "-m", "spectrum_rft", "eval", "--model", "openai/loopback",
                                  "--api-base", url, "--rows", str(n_rows), "--out", str(ep_out), "--json",
                                  "--no-progress"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    try:  # the evaluator starts (imports) while OpenEnv plays
        played = _run(_play_openenv(server, url, rows, rollouts=2))
        out, err = evaluator.communicate(timeout=300)
    finally:
        if evaluator.poll() is None:
            evaluator.kill()
            evaluator.wait()
    dead = kind == "dead"
    assert evaluator.returncode == (1 if dead else 0), out[-3000:] + err[-3000:]
    ep_rows = {}
    for line in (ep_out / "rows.jsonl").read_text().splitlines():
        r = json.loads(line)
        ep_rows[r["input_metadata"]["row_id"]] = r
    assert set(ep_rows) == {r for r, _ in rows}

    assert len(played) == 2 * n_rows
    for row_id, p, rewards in played:
        row = ep_rows[row_id]
        mine, theirs = p.result, row["execution_metadata"]["extra"]["spectrum"]
        assert mine["band_fingerprint"] == theirs["band_fingerprint"]
        assert mine["per_scan_reward"] == theirs["per_scan_reward"]
        assert mine["score"] == theirs["score"]
        assert mine["faults"] == theirs["faults"]
        assert sum(rewards) == pytest.approx(mine["score"], abs=1e-12)
        failure = p.failure
        their_failure = row["execution_metadata"]["extra"]["spectrum_rollout"].get("model_failure")
        assert (failure or {}).get("cause") == (their_failure or {}).get("cause")
        assert (failure is not None) == dead and (p.error is not None) == dead
        if dead:
            assert failure["cause"] == "http 5xx" and failure["requests"] == their_failure["requests"]
            assert p.error.startswith("model never produced a usable reply: http 5xx")
            assert mine["scans_skipped"] == mine["n_scans"]
            continue
        assert row["evaluation_result"]["score"] == mine["score"]
        # what the model was sent and answered: the evaluator's row and the driver's transcript, message by message
        assert [(m["role"], m.get("content") or "") for m in p.transcript] == \
            [(m["role"], m.get("content") or "") for m in row["messages"]]
    results = [p.result for _, p, _ in played]
    if kind == "accumulate":
        assert all(r["score"] > 0.3 and r["faults"] == {} for r in results)
    elif kind == "junk":  # every refusal reached the env, and the call budget closed the even scans
        for r in results:
            assert r["scans_skipped"] == r["n_scans"] // 2
            assert r["faults"]["unknown_tool"] == r["n_scans"] and r["faults"]["invalid_report"] >= r["n_scans"]
        texts = [m["content"] for m in played[0][1].transcript if m["role"] == "tool"]
        assert any(t.startswith("Error: unknown tool: scan_again") for t in texts)
        assert any(m["role"] == "user" and m["content"].startswith("No tool call received")
                   for m in played[0][1].transcript)
    elif kind == "faults":  # scans 3 and 5 failed on every try (4) and were skipped; the rest were played
        for _, p, _ in played:
            f = p.result["faults"]
            assert p.result["scans_skipped"] == 2 and f["llm_5xx"] == 4 and f["llm_empty_choices"] == 4
            assert f["llm_gave_up"] == 2 and p.stats.model_calls == p.result["n_scans"] - 2


def test_the_trl_class_offers_what_the_trl_adapter_offers():
    """For every mode, OpenEnv's TRL class declares the TRL adapter's tools exactly: the same names, and for
    each the signature, annotations and docstring that TRL renders the schema from (``get_json_schema``; the
    adapter's rendering is held to the env's schemas in the main suite's ``test_trl_env``, this venv has no
    transformers)."""
    import inspect

    def declared(cls) -> dict:
        return {n: (str(inspect.signature(getattr(cls, n))), inspect.getdoc(getattr(cls, n)),
                    repr(getattr(cls, n).__annotations__)) for n in sorted(tool_names(cls))}

    for mode in MEMORY_MODES:
        ours = declared(tool_env_class(mode))
        assert set(ours) == {t["function"]["name"] for t in tool_schemas(mode)}, mode
        assert declared(OpenEnvToolEnv.for_mode(mode)) == ours, mode
