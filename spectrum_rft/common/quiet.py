"""Library warnings out of a command's output, kept in a log.

Deprecation and other warnings that torch, transformers, TRL, pydantic or litellm raise about their own code
(``FutureWarning: `gradient_checkpointing` is deprecated ...``) are not the user's business while a command
runs: :func:`library_warnings_kept` writes each one to a log file instead of stderr, silently (a command's
last line stays its own: the result, or the one line that says what went wrong). Where the log is:
``OUT/warnings.log`` for a command with an output folder, else ``~/.cache/spectrum-rft/logs/<command>.log``.
A warning raised from this package's own code is shown as usual. Nothing is switched at import: the
``spectrum-rft`` dispatcher wraps each command in it.
"""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # spectrum_rft/
LOG_NAME = "warnings.log"


def is_ours(filename: str) -> bool:
    """Whether a warning was raised from this package's own code (it is then shown, not logged)."""
    try:
        return Path(filename).resolve().is_relative_to(PACKAGE_DIR)
    except (OSError, ValueError):
        return False


@dataclass
class KeptWarnings:
    """The library warnings of one command: how many, and the log holding them.

    ``out``: the command's ``--out`` (None: it has none). The log is chosen at the first warning, never
    creating anything at ``out``: ``OUT/warnings.log`` (appended: a resumed run adds to it) when ``out`` is
    a folder by then, else ``cache`` (``~/.cache/spectrum-rft/logs/<command>.log``, the last run's), so a
    ``--out`` that names a file (``scan-eval --out x.json``) is never turned into a folder."""

    cache: Path
    out: Path | None = None
    count: int = 0
    log: Path | None = None
    _file: IO[str] | None = None

    def keep(self, text: str) -> None:
        self.count += 1
        try:
            f = self._file
            if f is None:
                if self.out is not None and self.out.is_dir():
                    self.log, mode = self.out / LOG_NAME, "a"
                else:
                    self.log, mode = self.cache, "w"
                    self.cache.parent.mkdir(parents=True, exist_ok=True)
                f = self._file = self.log.open(mode, encoding="utf-8")
            f.write(text)
            f.flush()
        except OSError:  # a log that cannot be written never stops the command: the warning goes to stderr
            self.log = None
            sys.stderr.write(text)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def out_arg(argv: list[str]) -> Path | None:
    """A command's ``--out DIR`` / ``--out=DIR`` (None: not given)."""
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv) and argv[i + 1] and not argv[i + 1].startswith("-"):
            return Path(argv[i + 1])
        if a.startswith("--out=") and len(a) > len("--out="):
            return Path(a[len("--out="):])
    return None


def cache_log(command: str) -> Path:
    """The log of a command with no output folder: the last run's."""
    return Path.home() / ".cache" / "spectrum-rft" / "logs" / f"{command}.log"


@contextmanager
def library_warnings_kept(cache: Path, out: Path | None = None) -> Iterator[KeptWarnings]:
    """Within the block, every warning shown from outside this package goes to the command's log (chosen at
    the first one: :class:`KeptWarnings`); ours are shown as usual."""
    kept = KeptWarnings(cache, out)
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
            if is_ours(filename) or file is not None:
                shown(message, category, filename, lineno, file, line)
                return
            kept.keep(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = showwarning
        try:
            yield kept
        finally:
            kept.close()
