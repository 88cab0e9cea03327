"""The evaluator source tarball: the evaluator and nothing else, packed as eval-protocol's uploader packs it.

eval-protocol's uploader tars the whole project directory less its ignore rules; run from this repository
that would send the committed run records (LoRA weights among them), the docs, the tests and any plot left
in the folder. What the Fireworks cloud runs is the evaluator: the package, the root modules (the design
card's entry points and both ``@evaluation_test`` entries), the template shim, the shipped datasets the
entries read, and ``requirements.txt`` (what the cloud installs). Only those are packed (:data:`EVALUATOR`),
with the uploader's ignore rules applied on top (caches, secrets, gitignored paths).
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path
from typing import Any, Iterable

# What eval-protocol's uploader never puts in the evaluator tarball (eval_protocol.evaluation), plus .gitignore.
TAR_DEFAULT_IGNORES = (
    ".git", ".github", "__pycache__", "*.pyc", "*.pyo", "*.pyd", ".venv", "venv", ".tox", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", ".ipynb_checkpoints", ".idea", ".vscode", ".cache", "node_modules", "vendor",
    "dist", "build", "*.egg-info", "*.egg", "*.whl", "*.tar.gz", "*.zip", "*.log", "*.tmp", "*.swp", ".DS_Store",
    "coverage", "htmlcov", ".coverage", "coverage.xml", ".env", ".env.*", "*.so", "*.dylib", "env",
    ".eval_protocol", ".hypothesis",
)
TAR_WARN_BYTES = 50 * 1024 * 1024

# The evaluator: (folder, file suffixes packed from it) for the folders, then the root's own files. A root
# file is packed when it is a Python module or one of ROOT_FILES.
EVALUATOR: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spectrum_rft", (".py", ".j2")),
    ("spectrum_templates", (".py", ".j2")),
    ("data", (".jsonl",)),
)
ROOT_FILES = ("requirements.txt", "pyproject.toml", "LICENSE", "README.md")


def _is_evaluator(rel: str) -> bool:
    head, _, rest = rel.partition("/")
    if not rest:
        return rel.endswith(".py") or rel in ROOT_FILES
    return any(head == folder and rel.endswith(suffixes) for folder, suffixes in EVALUATOR)


def _gitignore_patterns(project_dir: Path) -> list[str]:
    p = project_dir / ".gitignore"
    if not p.is_file():
        return []
    return [ln.strip() for ln in p.read_text(errors="replace").splitlines() if ln.strip() and not ln.startswith("#")
            and not ln.strip().startswith("!")]


def _ignored(rel: str, is_dir: bool, patterns: list[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    for pat in patterns:
        dir_only = pat.endswith("/")
        pat = pat.rstrip("/")
        if dir_only and not is_dir:
            continue
        if pat.startswith("/"):  # anchored at the project root
            if fnmatch.fnmatch(rel, pat[1:]):
                return True
            continue
        if fnmatch.fnmatch(name, pat) or ("/" in pat and fnmatch.fnmatch(rel, pat)):
            return True
    return False


def source_files(project_dir: Path, exclude: Iterable[Path] = ()) -> list[str]:
    """Project files the evaluator tarball holds (relative, sorted): the evaluator's (:data:`EVALUATOR`),
    less eval-protocol's ignores and .gitignore."""
    patterns = list(TAR_DEFAULT_IGNORES) + _gitignore_patterns(project_dir)
    skip = {p.resolve() for p in exclude}
    out = []
    for root, dirs, files in os.walk(project_dir):
        rroot = Path(root)
        rel_root = rroot.relative_to(project_dir).as_posix()
        rel_of = (lambda n: n) if rel_root == "." else (lambda n: f"{rel_root}/{n}")
        dirs[:] = sorted(d for d in dirs if not _ignored(rel_of(d), True, patterns)
                         and not (rroot / d).is_symlink()
                         and (rel_root != "." or any(d == folder for folder, _ in EVALUATOR)))
        for f in files:
            path = rroot / f
            if path.is_symlink() or not path.is_file() or path.resolve() in skip:
                continue
            if _is_evaluator(rel_of(f)) and not _ignored(rel_of(f), False, patterns):
                out.append(rel_of(f))
    return sorted(out)


def build_tarball(project_dir: Path, files: list[str]) -> bytes:
    """A reproducible tar.gz (sorted, zeroed times and owners) rooted at the project directory's name,
    like eval-protocol's uploader."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            data = (project_dir / rel).read_bytes()
            info = tarfile.TarInfo(f"{project_dir.name}/{rel}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def source_bundle(project_dir: Path, exclude: Iterable[Path] = ()) -> tuple[bytes, dict[str, Any]]:
    """The tarball and its summary (``tarball`` name, ``bytes``, ``sha256``, ``files``)."""
    files = source_files(project_dir, exclude)
    tar = build_tarball(project_dir, files)
    return tar, {"tarball": f"{project_dir.name}.tar.gz", "bytes": len(tar),
                 "sha256": hashlib.sha256(tar).hexdigest(), "files": files}
