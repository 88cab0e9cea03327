"""The evaluator tarball ``spectrum-rft launch --dry-run`` builds holds the whole evaluator, and works alone.

The tarball is built as eval-protocol's uploader builds it (``eval_protocol/evaluation.py``: folders named
env/build/dist/vendor/coverage, caches and gitignored paths are left out), so a package folder with one of
those names, or an entry that imports something outside the project, would reach the cloud broken. Here
the real project root goes through the dry run; the tarball is listed, extracted, and both evaluation
entries are imported from the extracted copy in an isolated interpreter that cannot see this checkout.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from spectrum_rft.tools.launch import main
from spectrum_rft.tools.launch.cli import build_parser, options_from_args
from spectrum_rft.tools.launch.plan import build_plan

ROOT = Path(__file__).resolve().parent.parent
ROOT_ENTRY_POINTS = ("test_spectrum_turn.py", "test_spectrum_rft.py", "spectrum_server.py", "requirements.txt",
                     "spectrum_adapter.py", "spectrum_mcp.py", "spectrum_reward.py", "spectrum_context_window.py",
                     "spectrum_turn_processor.py", "make_spectrum_dataset.py", "spectrum_templates/__init__.py",
                     "data/spectrum_default16.jsonl")
DROPPED_FOLDERS = {"env", "build", "dist", "vendor", "coverage", "__pycache__", ".git", ".venv"}

# Runs in the extracted copy with `python -I` (no PYTHONPATH, no cwd on sys.path, no user site); the
# editable install's finder (which maps spectrum_rft to this checkout) is removed before any import.
# One episode through the root `spectrum_adapter`, played both in the extracted copy and in this checkout.
PLAY = """\
env = SpectrumEnv(EnvConfig(preset="default", memory_mode="scaffold", reward="default"))
obs, _ = env.reset(seed=seed_for_row("row-0007"))
prompts = [obs["prompt"]]
while not env.done:
    obs, *_ = env.step({"center_freqs": [100.0, 200.0]})
    prompts.append(obs["prompt"])
"""

CHILD = r"""
import json, os, sys
copy, repo = sys.argv[1], sys.argv[2]
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != os.path.realpath(repo)]
sys.path.insert(0, copy)

import test_spectrum_turn, test_spectrum_rft
from spectrum_adapter import EnvConfig, SpectrumEnv, seed_for_row

@@PLAY@@files = {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}
from_checkout = sorted(n for n, f in files.items() if f and os.path.realpath(f).startswith(os.path.realpath(repo) + os.sep)
                       and not os.path.realpath(f).startswith(os.path.realpath(sys.prefix) + os.sep))
print(json.dumps({"isolated": sys.flags.isolated, "files": {n: files[n] for n in (
    "spectrum_rft", "spectrum_rft.task.environment", "test_spectrum_turn", "test_spectrum_rft", "spectrum_adapter")},
    "from_checkout": from_checkout, "entries": [callable(test_spectrum_turn.test_spectrum_turn),
    callable(test_spectrum_rft.test_spectrum_rft)], "prompts": prompts, "truth": env.truth(),
    "fingerprint": env.metrics()["band_fingerprint"], "metrics": env.metrics()}))
""".replace("@@PLAY@@", PLAY)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> tuple[bytes, dict]:
    """The project root's evaluator tarball, from ``launch --dry-run`` (no credentials, no network)."""
    tmp = tmp_path_factory.mktemp("launch")
    argv = ["--arm", "weak-scaffold", "--rows", "1", "--epochs", "1", "--tag", "tar", "--dry-run", "--json",
            "--project-dir", str(ROOT), "--dataset-out", str(tmp / "ds.jsonl")]
    mp = pytest.MonkeyPatch()
    for k in ("FIREWORKS_API_KEY", "FIREWORKS_ACCOUNT_ID", "FIREWORKS_BASE_URL"):
        mp.delenv(k, raising=False)
    try:
        out = io.StringIO()
        mp.setattr(sys, "stdout", out)
        assert main(argv) == 0
        mp.undo()
        requests = json.loads(out.getvalue())["requests"]
        plan = build_plan(options_from_args(build_parser().parse_args(argv)), env={})
    finally:
        mp.undo()
    upload = next(r for r in requests if r["step"] == "evaluator.upload_source")
    # the dry run's upload is this tarball (the build is reproducible)
    assert upload["body"]["sha256"] == hashlib.sha256(plan.tarball).hexdigest()
    assert upload["body"]["files"] == len(plan.source["files"])
    return plan.tarball, upload


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.getnames()


def test_tarball_holds_the_whole_package_and_the_entry_points(tarball):
    data, upload = tarball
    names = _names(data)
    prefix = f"{ROOT.name}/"
    assert all(n.startswith(prefix) for n in names)
    rel = {n[len(prefix):] for n in names}
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spectrum_rft").rglob("*.py")
               if "__pycache__" not in p.parts}
    templates = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spectrum_rft" / "task" / "templates").glob("*.j2")}
    assert len(package) > 30 and {"spectrum_rft/task/templates/scan.j2", "spectrum_rft/task/templates/system.j2",
                                  "spectrum_rft/task/templates/feedback.j2"} <= templates
    assert sorted(package - rel) == []
    assert sorted(templates - rel) == []
    assert sorted(set(ROOT_ENTRY_POINTS) - rel) == []
    for r in rel:  # nothing the uploader drops, no secrets, no caches
        parts = r.split("/")
        assert not set(parts[:-1]) & DROPPED_FOLDERS, r
        assert not parts[-1].startswith(".env") and not r.endswith(".pyc"), r
    assert upload["body"]["tarball"] == f"{ROOT.name}.tar.gz"


def test_the_tarball_is_the_evaluator_and_nothing_else(tarball):
    """No run records (LoRA weights), docs, tests, scripts or plots: only the package, the root modules, the
    template shim, the shipped datasets and the install files."""
    data, _ = tarball
    rel = [n.split("/", 1)[1] for n in _names(data)]
    allowed_roots = {"spectrum_rft", "spectrum_templates", "data"}
    for r in rel:
        head, _, rest = r.partition("/")
        assert (head in allowed_roots and rest) or (not rest and (r.endswith(".py") or r in (
            "requirements.txt", "pyproject.toml", "LICENSE", "README.md"))), r
        assert not r.endswith((".safetensors", ".png", ".bin", ".pt", ".gguf")), r
    assert len(data) < 400_000 and len(rel) < 150  # the evaluator is small; the whole root was 49 MB


def test_the_file_list_ignores_what_is_not_the_evaluator(tmp_path):
    from spectrum_rft.tools.launch.tarball import source_files

    for rel, body in [("spectrum_rft/__init__.py", ""), ("spectrum_rft/task/templates/scan.j2", "x"),
                      ("spectrum_rft/task/stray.png", "x"), ("results/run/adapter/adapter_model.safetensors", "w"),
                      ("docs/LAUNCH.md", "d"), ("tests/test_x.py", ""), ("spectrum_report.png", "p"),
                      ("test_spectrum_turn.py", ""), ("requirements.txt", "numpy"), ("data/rows.jsonl", "{}"),
                      ("data/big.safetensors", "w"), ("spectrum_rft/__pycache__/x.pyc", "c"), (".env", "KEY=1"),
                      ("runs/sft/model/model.safetensors", "w")]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    assert source_files(tmp_path) == ["data/rows.jsonl", "requirements.txt", "spectrum_rft/__init__.py",
                                      "spectrum_rft/task/templates/scan.j2", "test_spectrum_turn.py"]


def test_entries_import_from_an_extracted_copy_in_a_clean_process(tarball, tmp_path):
    data, _ = tarball
    dest = tmp_path / "extracted"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
    copy = dest / ROOT.name
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    child_env["HOME"] = str(tmp_path / "home")  # nothing from this user's eval-protocol store
    proc = subprocess.run([sys.executable, "-I", "-c", CHILD, str(copy), str(ROOT)], cwd=copy, env=child_env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["isolated"] == 1
    for name, f in got["files"].items():
        assert Path(f).resolve().is_relative_to(copy.resolve()), (name, f)
    assert got["from_checkout"] == []  # not one module came from this checkout
    assert got["entries"] == [True, True]

    # The environment of the extracted copy plays the same episode as this checkout's.
    import spectrum_adapter

    ns = vars(spectrum_adapter).copy()
    exec(PLAY, ns)  # noqa: S102 (our own snippet, the one the child ran)
    env, prompts = ns["env"], ns["prompts"]
    assert len(got["prompts"]) == env.n_scans + 1 > 2 and all(got["prompts"][:-1])
    assert got["prompts"] == prompts
    assert got["truth"] == json.loads(json.dumps(env.truth()))
    assert got["fingerprint"] == env.metrics()["band_fingerprint"]
    assert got["metrics"] == json.loads(json.dumps(env.metrics()))
