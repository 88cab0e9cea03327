"""scripts/record_runs.py: what it keeps of a run for the repository, an unfinished run's checkpoint included
(``--with-checkpoint``, which the evidence script's ``restore`` stage hands back to ``train --resume``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "record_runs.py"
sys.path.insert(0, str(SCRIPT.parent))
import record_runs  # noqa: E402

from spectrum_rft.training.trl_common import latest_checkpoint, start_record  # noqa: E402


def record(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    """The script as a user runs it, from a folder of its own (it refuses the temp folder's paths, and a
    test's files live there: TMPDIR points elsewhere)."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(cwd)})


def a_run(root: Path, steps: list[int], finished: bool = False) -> Path:
    """A GRPO run folder as `train --save-every 1` leaves it: logs, and a TRL checkpoint per step kept."""
    run = root / "runs" / "weak-scaffold-s2"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"model": "runs/evidence5/sft/model", "seed": 2}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": 0.1 * s}) + "\n" for s in range(1, 8)))
    (run / "rollouts.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(7)))
    for step in steps:
        ckpt = run / "trl" / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        for name in record_runs.CHECKPOINT_FILES:
            (ckpt / name).write_text(json.dumps({"step": step, "file": name}))
        (ckpt / "tokenizer.json").write_text("x" * 1000)  # the run's --model has it: not kept
    if finished:
        (run / "summary.json").write_text("{}")
    return run


@pytest.fixture()
def home(tmp_path) -> Path:
    (tmp_path / "cwd").mkdir()
    return tmp_path


def test_an_unfinished_run_keeps_its_newest_checkpoint_for_resume(home):
    run = a_run(home, [6, 7])
    res = record("--with-checkpoint", home / "results", run, cwd=home / "cwd")
    assert res.returncode == 0, res.stderr
    assert "unfinished, its checkpoint-7 kept for train --resume" in res.stdout
    out = home / "results" / run.name
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-7", "config.json", "metrics.jsonl", "rollouts.jsonl"]
    assert sorted(p.name for p in (out / "checkpoint-7").iterdir()) == sorted(record_runs.CHECKPOINT_FILES)
    assert json.loads((out / "checkpoint-7" / "optimizer.pt").read_text())["step"] == 7
    # where the restore stage puts it back, train --resume finds step 7 and cuts the logs back to it
    back = home / "restored"
    (back / "trl").mkdir(parents=True)
    shutil.copytree(out / "checkpoint-7", back / "trl" / "checkpoint-7")  # what the script's restore does
    for name in ("config.json", "metrics.jsonl", "rollouts.jsonl"):
        (back / name).write_text((out / name).read_text())
    path, step = start_record(back, resume=True, is_main=True)
    assert step == 7 and path == back / "trl" / "checkpoint-7" and latest_checkpoint(back) == (path, 7)
    assert [json.loads(x)["step"] for x in (back / "metrics.jsonl").read_text().splitlines()] == list(range(1, 8))
    assert [json.loads(x)["step"] for x in (back / "rollouts.jsonl").read_text().splitlines()] == list(range(7))


def test_a_newer_checkpoint_replaces_the_recorded_one_and_a_finished_run_drops_it(home):
    run = a_run(home, [3])
    assert record("--with-checkpoint", home / "results", run, cwd=home / "cwd").returncode == 0
    out = home / "results" / run.name
    (run / "trl" / "checkpoint-3").rename(run / "trl" / "checkpoint-9")
    assert record("--with-checkpoint", home / "results", run, cwd=home / "cwd").returncode == 0
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-9"]
    # recorded without the flag, an unfinished run keeps what was recorded
    assert record(home / "results", run, cwd=home / "cwd").returncode == 0
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-9"]
    (run / "summary.json").write_text("{}")  # finished: its record is the adapter, not a checkpoint
    assert record("--with-checkpoint", home / "results", run, cwd=home / "cwd").returncode == 0
    assert not list(out.glob("checkpoint-*")) and (out / "summary.json").is_file()


def test_what_it_refuses_one_line_each(home):
    run = a_run(home, [])
    res = record("--with-checkpoint", home / "results", run, cwd=home / "cwd")
    assert res.returncode == 1 and res.stderr.strip().endswith("not finished and no checkpoint (trl/checkpoint-N) to keep")
    ckpt = run / "trl" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_model.safetensors").write_text("w")
    res = record("--with-checkpoint", home / "results", run, cwd=home / "cwd")
    assert res.returncode == 1 and "not a checkpoint train --resume can use" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    for name in record_runs.CHECKPOINT_FILES:
        (ckpt / name).write_text("{}")
    (ckpt / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": f"{home / 'cwd'}/sft/model"}))
    res = record("--with-checkpoint", home / "results", run, cwd=home / "cwd")
    assert res.returncode == 1 and "names a machine path" in res.stderr
    assert not (home / "results" / run.name / "checkpoint-2").exists()


def test_an_adapter_kept_in_float16_is_half_the_size_and_the_same_weights(home):
    """``--with-adapter --float16``: the LoRA adapter recorded in float16 (what the repository keeps of a warm
    start), its values the run's to float16 rounding, its config naming the run's --model, not a path."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    run = a_run(home, [], finished=True)
    (run / "adapter").mkdir()
    weights = {"base_model.model.layers.0.q_proj.lora_A.weight": torch.randn(16, 576) * 0.02,
               "base_model.model.layers.0.q_proj.lora_B.weight": torch.randn(576, 16) * 0.01}
    save_file(weights, run / "adapter" / "adapter_model.safetensors")
    (run / "adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(home / "m")}))
    res = record("--with-adapter", "--float16", home / "results", run, cwd=home / "cwd")
    assert res.returncode == 0, res.stderr
    kept = home / "results" / run.name / "adapter"
    got = load_file(kept / "adapter_model.safetensors")
    assert got.keys() == weights.keys() and all(t.dtype == torch.float16 for t in got.values())
    assert all(torch.allclose(got[k].float(), weights[k], rtol=1e-3, atol=1e-6) for k in weights)
    size = (kept / "adapter_model.safetensors").stat().st_size
    assert size < 0.55 * (run / "adapter" / "adapter_model.safetensors").stat().st_size
    assert json.loads((kept / "adapter_config.json").read_text())["base_model_name_or_path"] == "runs/evidence5/sft/model"
