"""Tool-call arguments as a model writes them -> the Python value a tool reads: the one parser, the size
limit, and the report's validation.

Models send a tool call's arguments as JSON text; callers may also hand an already decoded object. The
rollout loop asks :func:`is_unparseable` whether arguments are JSON at all (unparseable text is a transport
fault, retried), the MCP client whether they can travel as the tool's structured MCP arguments; the env
(``SpectrumEnv``) decodes them here and :func:`parse_report` says whether a report is one it can score.
"""

from __future__ import annotations

import json
import math
from typing import Any

from spectrum_rft.task.episode import Preset
from spectrum_rft.task.reward import is_finite_number

# How much of the decoder's message an error shows the model.
DETAIL_CHARS = 80
# Tool-call arguments (as the model wrote them, UTF-8) larger than this are refused whole, by size, on every
# transport: the MCP transport cannot carry much more (mcp's 4 MiB request limit) and sends only the size.
MAX_ARGUMENT_BYTES = 2 << 20


class InvalidAction(ValueError):
    """A report the environment refuses; the message is written for the model."""


class InvalidArguments(InvalidAction):
    """Arguments that are not JSON. ``str(e)`` is the message the model is shown."""


def parse_arguments(arguments: Any) -> Any:
    """JSON text (``str`` or ``bytes``) decoded; any other value as it is. Raises :class:`InvalidArguments`
    (``"arguments are not valid JSON: ..."``) for text that is not JSON, blank text and nesting too deep
    for the decoder included."""
    if not isinstance(arguments, (str, bytes)):
        return arguments
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError) as e:
        raise InvalidArguments(f"arguments are not valid JSON: {str(e)[:DETAIL_CHARS]}") from None


def is_blank(arguments: Any) -> bool:
    """Text with nothing in it: a call without arguments, not a call with bad ones."""
    return isinstance(arguments, (str, bytes)) and not arguments.strip()


def is_unparseable(arguments: Any) -> bool:
    """Whether ``arguments`` are text that is not JSON at all (blank text is no arguments, not bad ones)."""
    if is_blank(arguments):
        return False
    try:
        parse_arguments(arguments)
    except InvalidArguments:
        return True
    return False


def argument_bytes(arguments: Any) -> int:
    """UTF-8 size of tool-call arguments written as text (0 for anything else); exact only when it can
    exceed :data:`MAX_ARGUMENT_BYTES` (a cheap bound otherwise)."""
    if isinstance(arguments, bytes):
        return len(arguments)
    if not isinstance(arguments, str) or 4 * len(arguments) <= MAX_ARGUMENT_BYTES:
        return len(arguments) if isinstance(arguments, str) else 0
    return len(arguments.encode("utf-8", "surrogatepass"))


def _number_list(name: str, value: Any) -> list[float]:
    if not isinstance(value, (list, tuple)):
        raise InvalidAction(f"{name} must be a list of numbers, got {type(value).__name__}")
    if all(type(v) is float or type(v) is int for v in value) and all(map(math.isfinite, value)):
        return [float(v) for v in value]  # the common case, checked in bulk
    out = []
    for i, v in enumerate(value):
        if not is_finite_number(v):
            shown = repr(v)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise InvalidAction(f"{name}[{i}] must be a finite number, got {shown}")
        out.append(float(v))
    return out


def parse_report(action: Any, preset: Preset) -> tuple[list[float], list[float]]:
    """Validate a report; return (centres, widths). Raises :class:`InvalidAction` with a clear message.

    An invalid report is refused as a whole (nothing is scored, the scan stays open, the model may try
    again within its call budget). On a preset with a fixed report width ``bandwidths`` is ignored, never
    checked (it is not in that preset's tool schema). JSON text is accepted (:func:`parse_arguments`), since models send tool
    arguments as text.
    """
    action = parse_arguments(action)
    if not isinstance(action, dict):
        raise InvalidAction(f"arguments must be an object with center_freqs, got {type(action).__name__}")
    if "center_freqs" not in action:
        raise InvalidAction("missing required argument center_freqs (a list of centre frequencies in MHz)")
    raw = action["center_freqs"]
    if isinstance(raw, (list, tuple)) and len(raw) > preset.max_regions:
        raise InvalidAction(f"too many regions: {len(raw)} > {preset.max_regions}; merge or drop some")
    centres = _number_list("center_freqs", raw)
    lo, hi = preset.band
    if centres and not (lo <= min(centres) and max(centres) <= hi):
        i, c = next((i, c) for i, c in enumerate(centres) if not lo <= c <= hi)
        raise InvalidAction(f"center_freqs[{i}] = {c:g} MHz is outside the band {lo:g}-{hi:g} MHz")
    if preset.report_width is not None:
        # The preset fixes every region's width: ``bandwidths`` is not in its tool schema and is ignored
        # whatever it holds (a field the env throws away never refuses a report).
        return centres, [preset.report_width] * len(centres)
    bw = action.get("bandwidths")
    if bw is None:
        return centres, [preset.default_width] * len(centres)
    if isinstance(bw, (list, tuple)) and len(bw) != len(centres):
        raise InvalidAction(f"bandwidths has {len(bw)} entries but center_freqs has {len(centres)}")
    widths = _number_list("bandwidths", bw)
    for i, w in enumerate(widths):
        if not 0.0 < w <= hi - lo:
            raise InvalidAction(f"bandwidths[{i}] = {w:g} MHz must be > 0 and at most the band width")
    return centres, widths
