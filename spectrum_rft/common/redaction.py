"""Keys in completion params: recognised by name, kept out of every file and log the project writes, and
passed by reference (stdlib only).

A completion param whose name says it is a credential (``api_key``, ``token``, ``x_api_key``, an
``Authorization`` header, ...) never travels as its value through a command line, a test id, a row or a
summary: the process that holds the value puts it into the environment of the process that needs it and
writes ``{"$env": NAME}`` in its place; :func:`resolve_env_refs` turns the reference back into the value at
the moment of the request. What is written of params goes through :func:`redact_params`."""

from __future__ import annotations

import os
import re
from typing import Any

# a param (or header) name that holds a credential
_SECRET_NAME = re.compile(r"(^|[_-])(api[_-]?key|key|token|secret|password|passwd|authorization|credentials?)$",
                          re.IGNORECASE)
ENV_REF = "$env"  # {"$env": "NAME"}: the value of environment variable NAME, read when the request is made
REDACTED = "<redacted>"


def is_secret_name(name: Any) -> bool:
    return isinstance(name, str) and bool(_SECRET_NAME.search(name))


def is_env_ref(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {ENV_REF} and isinstance(value[ENV_REF], str)


def redact_params(params: Any) -> Any:
    """``params`` with the value of every credential-named key (at any depth, e.g. in ``extra_headers``)
    replaced by :data:`REDACTED`; an environment reference is kept (it names a variable, not a value), and a
    folder of params under such a name is redacted key by key."""
    if isinstance(params, dict):
        return {k: REDACTED if is_secret_name(k) and v is not None and not isinstance(v, dict) else redact_params(v)
                for k, v in params.items()} if not is_env_ref(params) else params
    if isinstance(params, list):
        return [redact_params(v) for v in params]
    return params


def secrets_by_reference(params: dict[str, Any], prefix: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(params with each credential value, at any depth, replaced by ``{"$env": NAME}``, {NAME: value}): the
    variables to set in the environment of the process that makes the requests. ``prefix`` makes NAME unique
    per holder (``<prefix>_<PATH>``, upper case)."""
    env: dict[str, str] = {}

    def walk(d: dict[str, Any], path: str) -> dict[str, Any]:
        out = {}
        for k, v in d.items():
            here = re.sub(r"[^A-Z0-9_]", "_", f"{path}_{k}".upper())
            if is_secret_name(k) and isinstance(v, str) and v:
                name, n = here, 1
                while name in env:  # api_key and API-KEY side by side: two variables
                    n += 1
                    name = f"{here}_{n}"
                out[k], env[name] = {ENV_REF: name}, v
            else:
                out[k] = walk(v, here) if isinstance(v, dict) else v
        return out

    return walk(params, prefix), env


def resolve_env_refs(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every ``{"$env": NAME}`` (at any depth) replaced by that environment variable's value;
    ValueError (one line) when it is not set."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if is_env_ref(v):
            name = v[ENV_REF]
            if name not in os.environ:
                raise ValueError(f"completion param {k!r} names the environment variable {name}, which is not set")
            out[k] = os.environ[name]
        else:
            out[k] = resolve_env_refs(v) if isinstance(v, dict) else v
    return out
