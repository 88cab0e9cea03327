"""Tool-call arguments as a model writes them -> the Python value a tool reads: the one parser.

Models send a tool call's arguments as JSON text; callers may also hand an already decoded object. The
rollout loop asks it whether arguments are JSON at all (unparseable text is a transport fault, retried),
the MCP client whether they can travel as the tool's structured MCP arguments; the env (``SpectrumEnv``)
is the judge of what they mean.
"""

from __future__ import annotations

import json
from typing import Any

# How much of the decoder's message an error shows the model.
DETAIL_CHARS = 80


class InvalidArguments(ValueError):
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
