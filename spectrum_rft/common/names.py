"""Versioned names: a definition keeps its name forever, an alias (``default``) moves to the newest version.
Configs store what an alias stood for when they were made, so an old row never changes meaning."""

from __future__ import annotations

from typing import Collection, Mapping


def resolve_name(kind: str, name: object, definitions: Collection[str], aliases: Mapping[str, str]) -> str:
    """The definition ``name`` stands for (itself, or what its alias names); a one-line ``ValueError`` naming
    the choices for anything else (a non-string included)."""
    if not isinstance(name, str):
        raise ValueError(f"{kind} must be a name (a string), got {type(name).__name__}")
    if name in definitions:
        return name
    if name in aliases:
        return aliases[name]
    raise ValueError(f"unknown {kind} {name!r}; choose one of {', '.join([*aliases, *definitions])}")
