"""A new model backend is one class: a test-only engine (it reads the scan in its prompt and reports that scan's
peaks, the memoryless policy, as tool-call tokens), registered with ``engines.register_engine``, runs through
``serve-hf`` (in process and over HTTP, free and under the grammar's request) and ``scan-eval`` (the library and
the command) with no other code, and is scored by the env like any model. The built-in engines' own tests:
``test_trl_train`` (transformers), ``tests_vllm/`` (vLLM against transformers)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import urllib.request

import pytest

from spectrum_rft.task.instructions import tool_schemas
from spectrum_rft.task.scan_format import parse_scan
from spectrum_rft.training.spectrum import engines as E
from spectrum_rft.training.spectrum import scan_eval as S
from spectrum_rft.training.spectrum import serve


class PeaksEngine:
    """Test-only: each completion reports the peaks of the last scan its prompt shows (the memoryless policy)."""

    name = label = "peaks"

    def __init__(self, model_dir, tokenizer, options):
        self.tok, self.options, self.calls = tokenizer, options, []

    def complete(self, prompts, *, tools=None, temperature=0.0, max_new_tokens=256, seed=0):
        self.calls.append({"n": len(prompts), "tools": tools, "temperature": temperature, "seed": seed})
        out = []
        for p in prompts:
            text = self.tok.decode(p)
            scan = parse_scan(text[text.rindex("<|im_start|>user"):])
            call = {"name": "submit_report", "arguments": {"center_freqs": [f for f, _, _ in scan.peaks]}}
            ids = self.tok.encode(f"<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>", add_special_tokens=False)
            out.append((ids[:max_new_tokens], len(ids) <= max_new_tokens))
        return out

    def shared_prefix(self, prompts, *, tools=None):
        return contextlib.nullcontext()


@pytest.fixture
def peaks(monkeypatch):
    """The test-only engine registered (in a copy of the registry: other tests see the built-in ones)."""
    monkeypatch.setattr(E, "ENGINES", dict(E.ENGINES))
    built = []

    def build(model_dir, tok, options):
        built.append(PeaksEngine(model_dir, tok, options))
        return built[-1]

    E.register_engine("peaks", E.EngineKind(build))
    return built


@pytest.fixture(scope="module")
def model_dir():
    from spectrum_rft.training.models import resolve_model_dir

    return resolve_model_dir("smollm2", os.path.expanduser("~/.cache/spectrum-rft"))[0]


def _scan_request(mode: str = "scaffold") -> dict:
    from spectrum_rft.rollouts.dataset import make_rows
    from spectrum_rft.task.environment import env_for_row

    r = make_rows(1, prompt="weak", memory_mode=mode, prefix="engine")[0]
    env, seed = env_for_row(r["id"], {"environment_context": r["environment_context"]})
    obs, _ = env.reset(seed)
    return {"messages": [{"role": "system", "content": env.system_prompt()}, {"role": "user", "content": obs["prompt"]}],
            "tools": env.tools(), "temperature": 0, "max_tokens": 200, "_peaks": [p[0] for p in parse_scan(obs["prompt"]).peaks]}


def test_serve_hf_answers_through_a_registered_engine(peaks, model_dir):
    req = _scan_request()
    want = req.pop("_peaks")
    hf = serve.HfChatModel(model_dir, engine="peaks", threads=1)
    assert peaks and peaks[0].options.server  # built for a server
    out = hf.complete(req)
    msg = out["choices"][0]["message"]
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"center_freqs": want}
    assert peaks[0].calls[-1]["tools"] is None  # free: no grammar asked for
    hf.complete({**req, "tool_choice": "required", "temperature": 0.5, "seed": 7})
    assert peaks[0].calls[-1] == {"n": 1, "tools": req["tools"], "temperature": 0.5, "seed": 7}

    server = serve.make_server(hf, "spectrum-hf")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        body = json.dumps({**req, "model": "spectrum-hf"}).encode()
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
        with urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"})) as r:
            reply = json.loads(r.read())
        assert json.loads(reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["center_freqs"] == want
    finally:
        server.shutdown()
        server.server_close()


def test_scan_eval_scores_a_registered_engine(peaks, model_dir, tmp_path, capsys):
    """The library: the engine's completions judged by the env (a memoryless policy gains exactly nothing over
    the memoryless policy, and every report is valid); under the grammar it is asked with the env's tools and
    each batch's seed. The command: ``--engine peaks`` is offered and recorded."""
    from spectrum_rft.training.trl_common import load_tokenizer

    tok = load_tokenizer(model_dir)
    r = S.evaluate(model_dir, scans=5, batch=2, temperature=1.0, constrained=True, seed=3, tokenizer=tok,
                   engine=E.make_engine("peaks", model_dir, tok))
    eng = peaks[-1]
    assert [c["seed"] for c in eng.calls] == [3, 5, 7] and [c["n"] for c in eng.calls] == [2, 2, 1]
    assert all(c["tools"] == tool_schemas("scaffold") for c in eng.calls)
    assert r["engine"] == "peaks" and r["scans"] == 5 and r["valid"] == 1.0
    assert all(x["gain_vs_memoryless"] == 0 for x in r["records"]) and r["score"] > 0

    out = tmp_path / "peaks.json"
    assert S.main(["--model", str(model_dir), "--engine", "peaks", "--scans", "2", "--temperature", "0",
                   "--out", str(out)]) == 0
    res = json.loads(out.read_text())["results"][0]
    assert res["engine"] == "peaks" and res["valid"] == 1.0 and not res["constrained"]
    assert "scan-eval" in capsys.readouterr().out


def test_an_engine_that_cannot_run_here_is_one_line_before_any_model_is_loaded(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(E, "ENGINES", dict(E.ENGINES))

    def never(*_):
        raise AssertionError("built")

    E.register_engine("absent", E.EngineKind(never, lambda: "the absent engine needs `pip install absent`"))
    (tmp_path / "config.json").write_text("{}")
    assert S.main(["--model", str(tmp_path), "--engine", "absent", "--scans", "1"]) == 2
    assert serve.main(["--model", str(tmp_path), "--engine", "absent"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["spectrum-rft scan-eval: --engine absent: the absent engine needs `pip install absent`",
                   "spectrum-rft serve-hf: --engine absent: the absent engine needs `pip install absent`"]
    assert serve.main(["--model", str(tmp_path), "--engine", "nope"]) == 2  # an unknown name: one line, no usage block
    assert capsys.readouterr().err.strip().splitlines() == [
        "spectrum-rft serve-hf: --engine nope: unknown engine 'nope'; one of transformers, vllm, llama.cpp, absent"]
    with pytest.raises(ValueError, match="built in"):
        E.register_engine("transformers", E.EngineKind(never))
    with pytest.raises(ValueError, match="built in"):
        E.register_engine("llama.cpp", E.EngineKind(never))
    with pytest.raises(ValueError, match=r"unknown engine 'nope'; one of transformers, vllm, llama.cpp, absent"):
        E.make_engine("nope", tmp_path, None)
