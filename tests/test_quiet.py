"""Library warnings go to the command's log, ours stay on screen, and the user is told in one line."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

from hypothesis import given, strategies as st

from spectrum_rft.common import quiet
from spectrum_rft.tools import cli

LIBRARY_FILE = "/somewhere/site-packages/transformers/training_args.py"


def test_library_warnings_go_to_the_log_ours_to_the_screen(tmp_path):
    screen = io.StringIO()
    log = tmp_path / "run" / "warnings.log"
    ours = str(Path(quiet.__file__))
    with quiet.library_warnings_kept(log, stream=screen) as kept:
        warnings.simplefilter("always")
        warnings.warn_explicit("`gradient_checkpointing` is deprecated", FutureWarning, LIBRARY_FILE, 1541)
        warnings.warn_explicit("class-based config", DeprecationWarning, LIBRARY_FILE, 9)
        warnings.warn_explicit("a warning of ours", UserWarning, ours, 1)
        assert kept.count == 2
    text = log.read_text()
    assert "FutureWarning: `gradient_checkpointing` is deprecated" in text and "class-based config" in text
    assert "a warning of ours" not in text
    said = screen.getvalue()
    assert "a warning of ours" not in said  # ours went to warnings' own stream (stderr), not the summary stream
    assert said == f"(2 library warnings (1 FutureWarning, 1 DeprecationWarning) kept in {log})\n"


def test_no_warning_no_log_no_line(tmp_path):
    screen = io.StringIO()
    with quiet.library_warnings_kept(tmp_path / "w.log", stream=screen):
        pass
    assert screen.getvalue() == "" and not (tmp_path / "w.log").exists()


def test_the_filters_are_restored_after_the_block(tmp_path):
    before = warnings.showwarning
    with quiet.library_warnings_kept(tmp_path / "w.log", stream=io.StringIO()):
        assert warnings.showwarning is not before
    assert warnings.showwarning is before


@given(st.text(alphabet="abc/_.-", min_size=1, max_size=12).filter(lambda s: not s.startswith("-")),
       st.booleans(), st.lists(st.sampled_from(["--rows", "2", "-x", "--overwrite"]), max_size=4))
def test_the_log_is_in_the_out_folder_when_there_is_one(folder, joined, other):
    argv = [*other, *([f"--out={folder}"] if joined else ["--out", folder])]
    assert quiet.log_path(argv, "sft") == Path(folder) / "warnings.log"


def test_without_out_the_log_is_the_commands_own_in_the_cache():
    assert quiet.log_path(["--rows", "2"], "bench90") == Path.home() / ".cache" / "spectrum-rft" / "logs" / "bench90.log"
    assert quiet.log_path(["--out"], "eval").name == "eval.log"  # a dangling --out: not a folder


def test_the_dispatcher_keeps_a_commands_library_warnings(tmp_path, monkeypatch, capsys):
    """``spectrum-rft <command>``: a warning a library raises while the command runs is in OUT/warnings.log
    and the command's output says so in one line."""
    def command(argv):
        warnings.warn_explicit("old API", FutureWarning, LIBRARY_FILE, 3)
        print("the command's own output")
        return 0

    monkeypatch.setitem(cli.COMMANDS, "noisy", ("tests_quiet_probe:command", "a test command"))
    import sys
    import types

    probe = types.ModuleType("tests_quiet_probe")
    probe.command = command
    monkeypatch.setitem(sys.modules, "tests_quiet_probe", probe)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(["noisy", "--out", str(tmp_path / "o")]) == 0
    cap = capsys.readouterr()
    assert "old API" not in cap.out + cap.err and "the command's own output" in cap.out
    assert f"kept in {tmp_path / 'o' / 'warnings.log'}" in cap.err
    assert "FutureWarning: old API" in (tmp_path / "o" / "warnings.log").read_text()
