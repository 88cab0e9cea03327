"""The run's record: the code revision, the evaluator identity, the item manifest, and JSON writers."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # the project root (git revision, recorded files)
RECORD_FILES = ("spectrum_rft/training/gsm8k/card.py", "spectrum_rft/training/sc_grpo.py", "spectrum_rft/training/sc_options.py",
                "spectrum_rft/training/trl_common.py", "spectrum_rft/training/models.py",
                "spectrum_rft/training/provenance.py", "spectrum_rft/training/loss.py",
                "spectrum_rft/training/gsm8k/data.py", "spectrum_rft/training/spectrum/trl_env.py",
                "spectrum_rft/training/spectrum/trl_data.py", "spectrum_rft/training/spectrum/trl_run.py",
                "spectrum_rft/training/chat_template.py", "spectrum_rft/task/environment.py",
                "spectrum_rft/task/reward.py")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def code_revision() -> dict:
    """git HEAD (when available), whether the recorded files differ from it, and their sha256."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=20,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    files = {f: sha256_file(REPO / f) for f in RECORD_FILES if (REPO / f).is_file()}
    dirty = git("status", "--porcelain", "--", *files)
    return {"git_head": git("rev-parse", "HEAD"), "dirty": bool(dirty) if dirty is not None else None,
            "dirty_files": dirty.splitlines() if dirty else [], "file_sha256": files}


def evaluator_identity(*, task: str, metric: str, scorer_sources: list[str], prompt_template: str, parser_rule: str,
                       decoding: dict, chat_template: str | None) -> dict:
    """sha256 over the scorer code, prompt template (incl. the model's chat template), decoding and parser."""
    code = hashlib.sha256()
    for f in scorer_sources:
        code.update(f.encode() + b"\0" + (REPO / f).read_bytes() + b"\0")
    body = {
        "task": task,
        "metric": metric,
        "code_sha256": code.hexdigest(),
        "code_files": list(scorer_sources),
        "prompt_template": prompt_template,
        "chat_template_sha256": hashlib.sha256((chat_template or "").encode()).hexdigest(),
        "decoding": decoding,
        "parser": parser_rule,
    }
    body["evaluator_id"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return body


def manifest_sha256(items: list[dict]) -> str:
    """sha256 over the items' ``id<TAB>sha256`` lines, in order (a content hash of a list of items)."""
    return hashlib.sha256("\n".join(f"{it['id']}\t{it['sha256']}" for it in items).encode()).hexdigest()


def item_manifest(items: list[dict], extra: dict) -> dict:
    ids = [it["id"] for it in items]
    return {"eval_items": items, "eval_ids": ids, "eval_manifest_sha256": manifest_sha256(items), **extra}


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def append_jsonl(path: Path, obj: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj, sort_keys=True, default=str) + "\n")
