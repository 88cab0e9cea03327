"""The README is a quick start that stays true: its first screen holds the install and the first run, every
command it names exists (and every command is named), and every file it links to is there."""

from __future__ import annotations

import re
from pathlib import Path

from spectrum_rft.tools.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FIRST_SCREEN = 40  # lines


def test_the_first_screen_is_the_quick_start():
    screen = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert "## Quick start" in screen
    block = screen.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert 'pip install -e ".[dev]"' in block and re.search(r"^spectrum-rft eval\b", block, re.M), block
    assert "## Where to go next" in screen


def test_every_command_the_readme_names_exists_and_every_command_is_in_its_table():
    named = set(re.findall(r"spectrum-rft ([a-z][a-z0-9-]*)", README))
    assert named - set(COMMANDS) == set(), "the README names commands that do not exist"
    table = README.split("## Commands", 1)[1].split("\n## ", 1)[0]
    in_table = set(re.findall(r"^\| `spectrum-rft ([a-z0-9-]+)`", table, re.M))
    assert set(COMMANDS) - in_table == set(), "commands missing from the README's table"


def test_every_link_in_the_readme_and_docs_points_at_a_file():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)\)", text):
            if "://" in target:
                continue
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)} links to {target}, which is not there"
        for path in re.findall(r"`((?:docs|scripts|configs|bench|environments)/[\w./-]+\.(?:md|sh|py|toml))`", text):
            assert (ROOT / path).exists(), f"{doc.relative_to(ROOT)} names {path}, which is not there"
