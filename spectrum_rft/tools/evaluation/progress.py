"""The evaluation's progress bar (one line on stderr)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


class Progress:
    """One line on stderr: ``eval turn [#####.....] model 2/3 spectrum/accumulate rows 8/16 scans 101/192 12s``.

    ``scans`` (per model, when ``scans`` per model is given) counts every scan closed, so a model that takes
    minutes per reply is seen moving long before its first row ends. The clock keeps ticking while nothing
    finishes (a terminal's line is redrawn every second); where stderr is not a terminal (a log file, CI),
    a line every ``heartbeat_s`` seconds says where the run is, or that it is still waiting, on what, and for
    how long, so a model that never answers is never silence."""

    def __init__(self, n_models: int, rows: int, path: str, stream: Any = None, enabled: bool = True,
                 heartbeat_s: float = 30.0, scans: int = 0):
        self.n_models, self.rows, self.path = n_models, rows, path
        self.scans = scans  # scans per model (0: unknown, not shown)
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.model_i, self.label, self.done_rows, self.done_scans = 0, "", 0, 0
        self._lock = threading.Lock()
        self._last = ""
        self.heartbeat_s = heartbeat_s
        self._changed = self.start  # when a scan or row last finished (or a model started)
        self._reported = self.start  # when the heartbeat last wrote a line
        self._stop = threading.Event()
        if enabled:
            threading.Thread(target=self._beat, name="eval-progress", daemon=True).start()

    def _beat(self) -> None:
        while not self._stop.wait(1.0 if self.tty else self.heartbeat_s):
            if self.tty:
                self._draw(force=True)
                continue
            now = time.monotonic()
            idle = now - self._changed
            if self._changed > self._reported:  # something moved since the last line: where the run is
                self._reported = now
                self._draw(force=True)
            elif idle >= self.heartbeat_s:
                with self._lock:
                    self.stream.write(f"eval {self.path} waiting: model {self.model_i + 1}/{self.n_models} {self.label}, "
                                      f"{self._counts(', ')}, no {'scan' if self.scans else 'row'} finished for "
                                      f"{idle:.0f}s ({now - self.start:.0f}s in all)\n")
                    self.stream.flush()

    def model(self, i: int, label: str) -> None:
        self.model_i, self.label, self.done_rows, self.done_scans = i, label, 0, 0
        self._changed = time.monotonic()
        self._draw(force=True)

    def rows_done(self, done: int, total: int) -> None:
        if min(done, self.rows) != self.done_rows:
            self._changed = time.monotonic()
        self.done_rows = min(done, self.rows)
        self._draw()

    def scans_done(self, closed: int) -> None:
        """``closed``: scans the child says closed for this model, episodes' last scans aside (a finished
        row counts its last scan)."""
        if closed != self.done_scans:
            self._changed = time.monotonic()
        self.done_scans = closed
        self._draw()

    def _scans(self) -> int:
        return min(self.scans, self.done_scans + self.done_rows) if self.scans else 0

    def _counts(self, sep: str = " ") -> str:
        return f"rows {self.done_rows}/{self.rows}" + (f"{sep}scans {self._scans()}/{self.scans}" if self.scans else "")

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            total = max(1, self.n_models * (self.scans or self.rows))
            frac = (self.model_i * (self.scans or self.rows) + (self._scans() if self.scans else self.done_rows)) / total
            bar = "#" * int(round(24 * frac))
            line = (f"eval {self.path} [{bar:<24}] model {self.model_i + 1}/{self.n_models} {self.label} "
                    f"{self._counts()} {time.monotonic() - self.start:4.0f}s")
            if line == self._last and not force:
                return
            if self.tty:
                self.stream.write("\r" + line.ljust(len(self._last)))
            elif force or line.split(" rows ")[0] != self._last.split(" rows ")[0]:
                self.stream.write(line + "\n")
            self.stream.flush()
            self._last = line

    def finish(self) -> None:
        self._stop.set()
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
