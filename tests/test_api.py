"""The public API (``spectrum_rft.api``): every name is its room's own object, importing the module loads nothing
heavy, the names a type checker sees are exactly the names served, and an unknown name is one clear line."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import spectrum_rft.api as api


def test_every_public_name_is_the_object_of_its_room():
    assert api.__all__ == sorted(api._HOME) and len(api.__all__) >= 30
    for name in api.__all__:
        assert getattr(api, name) is getattr(importlib.import_module(api._HOME[name]), name), name
    assert set(api.__all__) <= set(dir(api))


def test_importing_the_api_loads_nothing_heavy():
    heavy = ("torch", "transformers", "trl", "eval_protocol", "litellm", "mcp")
    code = f"import sys, spectrum_rft.api; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out


def test_what_a_type_checker_sees_is_what_is_served():
    tree = ast.parse(Path(api.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = {a.name: n.module for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert seen == api._HOME


def test_an_unknown_name_is_one_line():
    with pytest.raises(AttributeError) as e:
        api.SpectrumEnvironment  # noqa: B018
    assert "spectrum_rft.api has no 'SpectrumEnvironment'; its names: " in str(e.value) and "\n" not in str(e.value)
