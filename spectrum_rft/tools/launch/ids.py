"""Fireworks resource ids and names (the one parser: :func:`resource_ref`), and keeping secrets out of what a
launch prints and logs."""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Any, Iterator

from .options import JOB_ID, RESOURCE_NAME, LaunchError

JOBS = "reinforcementFineTuningJobs"
DATASETS = "datasets"
NOUNS = {JOBS: "job", DATASETS: "dataset"}
SDK_LOGGERS = ("fireworks", "fireworks._base_client", "httpx", "httpcore", "httpcore.http11", "httpcore.connection")


def resource_id(text: str, limit: int = 63) -> str:
    """A Fireworks resource id: lowercase a-z, 0-9 and '-', starts with a letter, at most 63 chars."""
    s = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "", text.lower().replace("_", "-"))).strip("-")
    if not s or not s[0].isalpha():
        s = "x-" + s
    return s[:limit].rstrip("-")


def resource_ref(name: str, collection: str, account: str | None) -> tuple[str, str]:
    """(account, id) of a resource of ``collection`` given as an id (the account from ``account``, e.g.
    FIREWORKS_ACCOUNT_ID) or as a resource name ``accounts/<account>/<collection>/<id>``; anything else, or an id
    with no account, is refused in one line (:class:`LaunchError`). The one parser of resource names."""
    noun = NOUNS.get(collection, "resource")
    if RESOURCE_NAME.fullmatch(name) and name.split("/")[2] == collection:
        return name.split("/")[1], name.split("/")[3]
    if JOB_ID.fullmatch(name):
        if not account:
            raise LaunchError(f"{noun} {name!r} is an id: set FIREWORKS_ACCOUNT_ID or give "
                              f"accounts/<account>/{collection}/{name}")
        return account, resource_id(name)
    raise LaunchError(f"{noun} {name!r}: expected a {noun} id or accounts/<account>/{collection}/<id>")


def job_ref(job: str, account: str | None) -> tuple[str, str]:
    """(account, job id) of ``JOB`` (an id, with the account given, or a resource name): :func:`resource_ref`."""
    return resource_ref(job, JOBS, account)


def resource_name(name: str, collection: str, account: str | None) -> str:
    """``accounts/<account>/<collection>/<id>`` of a resource given as an id or a resource name."""
    acct, rid = resource_ref(name, collection, account)
    return f"accounts/{acct}/{collection}/{rid}"


def evaluator_id_for(entry: str) -> str:
    """The id ``eval-protocol upload`` derives from an entry (``file.py::func`` -> ``file-func``)."""
    path, _, func = entry.partition("::")
    return resource_id(f"{Path(path).stem}-{func}")


def dotenv_keys(project_dir: Path) -> dict[str, list[str]]:
    """Key names (never values) of the ``.env`` files in the project directory."""
    out = {}
    for p in sorted(project_dir.glob(".env*")):
        if not p.is_file():
            continue
        keys = []
        try:
            for line in p.read_text(errors="replace").splitlines():
                m = re.match(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=", line)
                if m:
                    keys.append(m.group(1))
        except OSError:
            keys.append("(unreadable)")
        out[p.name] = keys
    return out


class Redact(logging.Filter):
    """Replaces secret strings in log records (the SDK logs request bodies at DEBUG: a W&B key is in one)."""

    def __init__(self, secrets: list[str]):
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            msg = record.getMessage()
            if any(s in msg for s in self.secrets):
                for s in self.secrets:
                    msg = msg.replace(s, "***")
                record.msg, record.args = msg, None
        return True


@contextlib.contextmanager
def redacted_logs(secrets: list[str]) -> Iterator[None]:
    """While inside: the SDK's and httpx's loggers never emit one of ``secrets``."""
    flt = Redact(secrets)
    loggers = [logging.getLogger(n) for n in SDK_LOGGERS]
    for lg in loggers:
        lg.addFilter(flt)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(flt)


def redact_body(obj: Any, secrets: list[str]) -> Any:
    """A request body (JSON value) with every ``apiKey``/``api_key`` value and every secret string as ``***``."""
    if isinstance(obj, dict):
        return {k: ("***" if k in ("apiKey", "api_key") else redact_body(v, secrets)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_body(v, secrets) for v in obj]
    if isinstance(obj, str) and any(s and s in obj for s in secrets):
        for s in secrets:
            obj = obj.replace(s, "***") if s else obj
    return obj
