"""Library warnings go to the command's log, silently; ours stay on screen; a command's last line is its own."""

from __future__ import annotations

import sys
import types
import warnings
from pathlib import Path

from hypothesis import given, strategies as st

from spectrum_rft.common import quiet
from spectrum_rft.tools import cli

LIBRARY_FILE = "/somewhere/site-packages/transformers/training_args.py"


def test_library_warnings_go_to_the_out_folders_log_ours_to_the_screen(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    ours = str(Path(quiet.__file__))
    with quiet.library_warnings_kept(tmp_path / "cache.log", run) as kept:
        warnings.simplefilter("always")
        warnings.warn_explicit("`gradient_checkpointing` is deprecated", FutureWarning, LIBRARY_FILE, 1541)
        warnings.warn_explicit("class-based config", DeprecationWarning, LIBRARY_FILE, 9)
        warnings.warn_explicit("a warning of ours", UserWarning, ours, 1)
        assert kept.count == 2
    text = (run / "warnings.log").read_text()
    assert "FutureWarning: `gradient_checkpointing` is deprecated" in text and "class-based config" in text
    assert "a warning of ours" not in text and not (tmp_path / "cache.log").exists()
    assert kept.log == run / "warnings.log"
    said = capsys.readouterr()
    assert "deprecated" not in said.out + said.err and "class-based" not in said.out + said.err


def test_an_out_that_names_a_file_is_never_made_a_folder(tmp_path):
    """``scan-eval --out x.json`` (a file the command writes at its end): the warnings go to the cache log, and
    x.json is still free to be written; the cache log holds the last run's only."""
    out = tmp_path / "x.json"
    cache = tmp_path / "cache" / "scan-eval.log"
    for run in ("first", "second"):
        with quiet.library_warnings_kept(cache, out):
            warnings.simplefilter("always")
            warnings.warn_explicit(f"{run} run", FutureWarning, LIBRARY_FILE, 1)
    assert not out.exists() and "second run" in cache.read_text() and "first run" not in cache.read_text()
    out.write_text("{}")  # what the command does at its end
    with quiet.library_warnings_kept(cache, out):
        warnings.simplefilter("always")
        warnings.warn_explicit("third run", FutureWarning, LIBRARY_FILE, 1)
    assert out.read_text() == "{}" and "third run" in cache.read_text()


def test_no_warning_no_log(tmp_path):
    with quiet.library_warnings_kept(tmp_path / "w.log", tmp_path) as kept:
        pass
    assert kept.count == 0 and not (tmp_path / "w.log").exists() and not (tmp_path / "warnings.log").exists()


def test_the_filters_are_restored_after_the_block(tmp_path):
    before = warnings.showwarning
    with quiet.library_warnings_kept(tmp_path / "w.log"):
        assert warnings.showwarning is not before
    assert warnings.showwarning is before


@given(st.text(alphabet="abc/_.-", min_size=1, max_size=12).filter(lambda s: not s.startswith("-")),
       st.booleans(), st.lists(st.sampled_from(["--rows", "2", "-x", "--overwrite"]), max_size=4))
def test_the_out_argument_is_found_in_either_spelling(folder, joined, other):
    argv = [*other, *([f"--out={folder}"] if joined else ["--out", folder])]
    assert quiet.out_arg(argv) == Path(folder)


def test_without_out_there_is_none():
    assert quiet.out_arg(["--rows", "2"]) is None and quiet.out_arg(["--out"]) is None  # a dangling --out
    assert quiet.cache_log("bench90") == Path.home() / ".cache" / "spectrum-rft" / "logs" / "bench90.log"


def test_the_dispatcher_keeps_a_commands_library_warnings(tmp_path, monkeypatch, capsys):
    """``spectrum-rft <command> --out DIR``: a warning a library raises while the command runs (after it made
    its folder) is in DIR/warnings.log, and the command's output is its own (its last line last)."""
    def command(argv):
        Path(argv[1]).mkdir()
        warnings.warn_explicit("old API", FutureWarning, LIBRARY_FILE, 3)
        print("the command's own output")
        return 0

    monkeypatch.setitem(cli.COMMANDS, "noisy", ("tests_quiet_probe:command", "a test command"))
    probe = types.ModuleType("tests_quiet_probe")
    probe.command = command
    monkeypatch.setitem(sys.modules, "tests_quiet_probe", probe)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli.main(["noisy", "--out", str(tmp_path / "o")]) == 0
    cap = capsys.readouterr()
    assert "old API" not in cap.out + cap.err and cap.out == "the command's own output\n" and cap.err == ""
    assert "FutureWarning: old API" in (tmp_path / "o" / "warnings.log").read_text()
