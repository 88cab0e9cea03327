"""The evaluation's progress bar (one line on stderr)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


class Progress:
    """One line on stderr: ``eval turn [#####.....] 2/3 spectrum/accumulate rows 8/16 12s``.

    The clock keeps ticking while nothing finishes (a terminal's line is redrawn every second); where stderr
    is not a terminal (a log file, CI), a heartbeat line says every ``heartbeat_s`` seconds that the run is
    still waiting, on what, and for how long, so a model that never answers is never silence."""

    def __init__(self, n_models: int, rows: int, path: str, stream: Any = None, enabled: bool = True,
                 heartbeat_s: float = 30.0):
        self.n_models, self.rows, self.path = n_models, rows, path
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.monotonic()
        self.model_i, self.label, self.done_rows = 0, "", 0
        self._lock = threading.Lock()
        self._last = ""
        self.heartbeat_s = heartbeat_s
        self._changed = self.start  # when a row last finished (or a model started)
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
            if idle >= self.heartbeat_s:
                with self._lock:
                    self.stream.write(f"eval {self.path} waiting: model {self.model_i + 1}/{self.n_models} {self.label}, "
                                      f"rows {self.done_rows}/{self.rows}, no row finished for {idle:.0f}s "
                                      f"({now - self.start:.0f}s in all)\n")
                    self.stream.flush()

    def model(self, i: int, label: str) -> None:
        self.model_i, self.label, self.done_rows = i, label, 0
        self._changed = time.monotonic()
        self._draw(force=True)

    def rows_done(self, done: int, total: int) -> None:
        if min(done, self.rows) != self.done_rows:
            self._changed = time.monotonic()
        self.done_rows = min(done, self.rows)
        self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            total = max(1, self.n_models * self.rows)
            frac = (self.model_i * self.rows + self.done_rows) / total
            bar = "#" * int(round(24 * frac))
            line = (f"eval {self.path} [{bar:<24}] model {self.model_i + 1}/{self.n_models} {self.label} "
                    f"rows {self.done_rows}/{self.rows} {time.monotonic() - self.start:4.0f}s")
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
