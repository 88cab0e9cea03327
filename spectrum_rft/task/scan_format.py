"""The scan text format, both directions: what the model reads, and how anything reads it back.

The one module that knows the text format of the task (``templates/*.j2`` beside it). Everything else
renders through it (the environment: system prompt, scans, acknowledgements) or reads through it (the
context window, the scripted policies, the policies served as models): no other module holds a regex or a
string match on this format (tests/test_scan_format.py greps the package for that).

A scan as the model reads it::

    Scan 3/12 | band 0.0-180.0 MHz | noise floor -50.0 dBm[ | <note>]
    3 peaks detected (id, freq MHz, power dBm, width MHz):        (or: No peaks detected.)
    P116 6.3 -36.7 6.3
    ...
    Your previous report (centres, MHz): 8.1, 40.2                (scaffold / scrambled echo, optional)
    Your notepad: <text, possibly several lines>                  (icl_notepad, optional)
    Call submit_report with the centre frequencies of all occupied regions (at most 16).

A scored report is acknowledged ``Scan 3 recorded.`` (the last one adds ``Monitoring complete: all 12 scans
recorded.``). On the MCP path a scan arrives inside the acknowledgement of the previous report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import jinja2

if TYPE_CHECKING:  # pragma: no cover
    from spectrum_rft.task.episode import EpisodeDraw
    from spectrum_rft.task.memory import MemoryMode
    from spectrum_rft.task.reward import Reward

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"

# --------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def templates() -> jinja2.Environment:
    """The task's Jinja environment (``templates/``), loaded once."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=False,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["mhz"] = lambda x: f"{x:.1f}"
    return env


def render_system_prompt(*, variant: str, memory: "MemoryMode", band: tuple[float, float], n_scans: int,
                         max_regions: int, report_width: float | None, think: bool, reward: "Reward") -> str:
    """The system prompt (``system.j2``); ``memory`` (the memory mode) says what the model is told about its
    echo or notepad, ``reward`` (the reward) how scoring is described (its ``prompt`` sentence)."""
    return templates().get_template("system.j2").render(
        variant=variant, memory=memory, band=band, n_scans=n_scans, max_regions=max_regions,
        report_width=report_width, think=think, reward=reward,
    ).strip()


_SEP = "\x1e"  # separates the bodies of one rendering pass (never part of a rendered scan)


def render_bodies(episode: "EpisodeDraw") -> list[str]:
    """Every scan body of an episode (header + peak table), rendered in one template pass. A scan's note
    (the preset's, e.g. a stage name) is one line without the separator ``\\x1e``."""
    band_text = f"{episode.band[0]:.1f}-{episode.band[1]:.1f}"
    text = templates().get_template("scan.j2").render(mode="bodies", scans=episode.scans, band_text=band_text,
                                                       noise_floor=episode.noise_floor, sep=_SEP)
    return [b.strip() for b in text.split(_SEP)[: len(episode.scans)]]


@lru_cache(maxsize=64)
def _static_tail(max_regions: int) -> str:
    return _render_tail(None, None, max_regions)


def _render_tail(echo: Sequence[float] | None, notepad: str | None, max_regions: int) -> str:
    return templates().get_template("scan.j2").render(mode="tail", echo=echo, notepad=notepad,
                                                       max_regions=max_regions).strip()


def render_tail(echo: Sequence[float] | None, notepad: str | None, max_regions: int) -> str:
    """What follows a scan's body: the memory echo (None: none shown), the notepad (None: none shown) and
    the instruction line. It changes with the agent's own actions; the bodies do not."""
    if echo is None and notepad is None:
        return _static_tail(max_regions)
    return _render_tail(echo, notepad, max_regions)


def render_scan(body: str, echo: Sequence[float] | None, notepad: str | None, max_regions: int) -> str:
    """A whole scan as the model reads it: a body of :func:`render_bodies` and its tail."""
    return body + "\n" + render_tail(echo, notepad, max_regions)


def render_feedback(scan: int | None, n_scans: int, done: bool) -> str:
    """The acknowledgement of a scored report for scan ``scan`` (1-based), with the completion line when
    ``done``; ``scan=None`` renders the completion line alone (the observation after the last scan)."""
    return templates().get_template("feedback.j2").render(scan=scan, n_scans=n_scans, done=done).strip()


def render_complete(n_scans: int) -> str:
    """What the model is shown once every scan is recorded."""
    return render_feedback(None, n_scans, True)


# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------

_F = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"  # a Python float's repr (finite), or a ``mhz`` number
HEADER = re.compile(rf"^Scan (\d+)/(\d+) \| band ({_F})-({_F}) MHz \| noise floor ({_F}) dBm(?: \| ([^\n]*))?$",
                    re.M)
_COUNT = re.compile(r"(\d+) peaks? detected \(id, freq MHz, power dBm, width MHz\):")
_NO_PEAKS = "No peaks detected."
_PEAK = re.compile(rf"(\S+) ({_F}) ({_F}) ({_F})")
_ECHO = "Your previous report (centres, MHz): "
_NOTEPAD = "Your notepad: "
_EMPTY = "(empty)"
_CAP = re.compile(r"^Call submit_report with the centre frequencies of all occupied regions \(at most (\d+)\)\.$",
                  re.M)
_ACK = re.compile(r"(?:Scan \d+ recorded\.|Monitoring complete: all \d+ scans recorded\.)")
DEFAULT_MAX_REGIONS = 16  # when a text carries no instruction line


@dataclass(slots=True)
class ParsedScan:
    """One scan read back from its text."""

    scan: int  # 1-based
    n_scans: int
    band: tuple[float, float]
    peaks: list[tuple[float, float, float]]  # (freq, power, width), as listed
    echo: list[float] | None  # the environment's echo of the previous report; None when not shown
    max_regions: int
    notepad: str | None = None  # the notepad shown with the scan ("" when empty); None when not shown
    noise_floor: float | None = None
    note: str = ""  # the header's optional metadata (e.g. a bench90 stage name)
    peak_ids: list[str] = field(default_factory=list)


def is_scan_text(text: str) -> bool:
    """Whether ``text`` contains a scan header (a line ``Scan k/N | band ...``)."""
    return HEADER.search(text) is not None


def parse_scan(text: str) -> ParsedScan | None:
    """Parse the (first) scan in ``text``; None if it holds none. Text before the header (the MCP path's
    acknowledgement) is ignored."""
    h = HEADER.search(text)
    if h is None:
        return None
    lines = text[h.end():].split("\n")[1:]
    i, peaks, ids = 0, [], []
    if lines and (c := _COUNT.fullmatch(lines[0])):
        i = 1
        for line in lines[1:1 + int(c.group(1))]:
            p = _PEAK.fullmatch(line)
            if p is None:
                break
            ids.append(p.group(1))
            peaks.append((float(p.group(2)), float(p.group(3)), float(p.group(4))))
            i += 1
    elif lines and lines[0] == _NO_PEAKS:
        i = 1
    rest = "\n".join(lines[i:])
    echo = None
    if rest.startswith(_ECHO):
        line, _, rest = rest.partition("\n")
        body = line[len(_ECHO):].strip()
        echo = [] if body == _EMPTY else [float(x) for x in body.split(",") if x.strip()]
    caps = list(_CAP.finditer(rest))
    notepad = None
    if rest.startswith(_NOTEPAD):
        end = caps[-1].start() - 1 if caps else len(rest)  # the notepad runs up to the instruction line
        notepad = rest[len(_NOTEPAD):max(end, len(_NOTEPAD))]
        notepad = "" if notepad == _EMPTY else notepad
    return ParsedScan(
        scan=int(h.group(1)), n_scans=int(h.group(2)), band=(float(h.group(3)), float(h.group(4))),
        peaks=peaks, echo=echo, max_regions=int(caps[-1].group(1)) if caps else DEFAULT_MAX_REGIONS,
        notepad=notepad, noise_floor=float(h.group(5)), note=h.group(6) or "", peak_ids=ids,
    )


def with_next_scan(feedback: str, scan: str) -> str:
    """A tool result that closed a scan, carrying the next scan (``"<feedback>\n\n<scan>"``): how the next scan
    rides in the tool result on every transport that carries it there (MCP, the TRL adapter, OpenEnv)."""
    return f"{feedback}\n\n{scan}"


def is_scan_recorded(text: str) -> bool:
    """Whether a tool result is the acknowledgement that a scan was scored (``Scan k recorded.``, or the
    completion line): the open scan is then closed."""
    return _ACK.match(text) is not None
