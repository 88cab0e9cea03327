"""The evaluator source tarball: the files git tracks, of the evaluator's allowlist, and nothing else.

**What goes** (:func:`source_files`). A project file is packed when all three hold:

1. **git tracks it**: it is in ``git ls-files`` of the project directory (committed, or staged with
   ``git add``). Untracked files never go, whatever their name or folder (a ``local_settings.py``, a private
   ``data/*.jsonl``, a ``spectrum_rft/_my_keys.py``), and neither do ignored ones (to git an ignored file is an
   untracked one). As in git, an ignore rule does not untrack a file: ``git rm --cached FILE`` does. What is
   packed is the working tree's content of those files (what ``git add`` would stage), so an uncommitted edit
   of a tracked module goes with it, and a new module goes once it is ``git add``-ed.
2. **it is the evaluator** (:data:`EVALUATOR`, :data:`ROOT_FILES`): the package, the root modules (the design
   card's entry points and both ``@evaluation_test`` entries), the template shim, the shipped datasets the
   entries read, and the install files. eval-protocol's uploader tars the whole directory; from this
   repository that would send the committed run records (LoRA weights among them), docs, tests and plots.
3. **eval-protocol's uploader would not drop it** (:data:`TAR_DEFAULT_IGNORES`: caches, ``.env*``, folders
   named ``build``/``dist``/``env``/...), so the cloud runs what a plain ``ep upload`` would give it.

Why git, and not a walk of the directory: the directory holds whatever was left in it (scratch settings,
private rows, keys); git's index is the list the user chose and can review (``git status``,
``launch --dry-run`` lists every file with its size). A project directory that is not a git work tree (an
unpacked sdist, a copied folder) or a machine without git is **refused** with one line, not packed by a walk:
a fallback would make what leaves the machine depend on whether a ``.git`` folder happens to be there, which is
exactly the leak this rule closes, and ``git init && git add <files> && git commit`` makes the choice explicit
in seconds. Allowlisted files that exist but are untracked are named in a warning (a module someone forgot to
``git add`` would otherwise break the evaluator in the cloud with no hint).

**What refuses** (:func:`secret_problems`): a file that looks like a secret stops the launch (and the dry
run) with one line naming the file and why, never the value:

* a tracked ``.env`` or ``.env.*`` anywhere in the project (never packed, but a tracked one is committed; its
  ``.example``/``.sample``/``.template``/``.dist`` variants are only read for values like any packed file);
* a packed file whose path has a word ``key(s)``, ``apikey``, ``secret(s)``, ``token(s)``, ``credential(s)``
  or ``password(s)`` (whole words of the name, split at ``_ - .`` and camelCase: ``_my_keys.py`` is one,
  ``ids.py``, ``tokenizer.py`` and ``monkey.py`` are not);
* a packed file whose content holds an API key (``fw_…``, ``sk-…``, ``hf_…``, ``ghp_…``, ``AKIA…``,
  ``xox…``), a ``-----BEGIN … PRIVATE KEY-----`` block, or a literal assigned to a credential name
  (``FIREWORKS_API_KEY=<value>``, ``"WANDB_API_KEY": "<value>"``; env var names, ``os.environ`` reads and
  placeholders such as ``...``/``<key>``/``your-key`` are not values).

The way on is to untrack the file (``git rm --cached FILE``, then add it to ``.gitignore``), or, for code that
only looks like a secret, rename it or read the value from the environment.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any, Iterable

from .options import LaunchError

# What eval-protocol's uploader never puts in the evaluator tarball (eval_protocol.evaluation).
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

# git's own variables would point `git -C PROJECT` at another repository or index: the project dir decides.
GIT_ENV_OVERRIDES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                     "GIT_NAMESPACE")

SECRET_NAME_WORDS = frozenset({"key", "keys", "apikey", "apikeys", "secret", "secrets", "token", "tokens",
                               "credential", "credentials", "password", "passwords", "passwd"})
DOTENV_TEMPLATES = (".example", ".sample", ".template", ".dist")
# (what it is, pattern); the value of a key-shaped match must look random (letters and digits) to count.
SECRET_CONTENT = (
    ("a Fireworks API key (fw_...)", re.compile(r"\bfw_[A-Za-z0-9]{20,}")),
    ("an API key (sk-...)", re.compile(r"\bsk-(?:proj-|ant-(?:api\d+-)?)?[A-Za-z0-9_-]{20,}")),
    ("a Hugging Face token (hf_...)", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a GitHub token (gh*_...)", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("an AWS access key id (AKIA...)", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("a Slack token (xox*-...)", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
)
PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
# NAME=value (dotenv, shell) or NAME = "value" / "NAME": "value" (Python, JSON) for a credential-like NAME.
CREDENTIAL_ASSIGNMENT = re.compile(
    r"\b([A-Z][A-Z0-9_]*(?:API_KEY|APIKEY|SECRET|SECRET_KEY|ACCESS_KEY|TOKEN|PASSWORD))[\"']?"
    r"(?:\s*:\s*[A-Za-z_][\w.\[\]| ]*?)?"  # a Python annotation (NAME: str = "...")
    r"(?:\s*[=:]\s*([\"'])([^\"'\s]{8,})\2|=([^\s\"'$<{(\[]{8,}))")
PLACEHOLDER_HINTS = ("...", "xxx", "<", ">", "your", "dummy", "example", "placeholder", "changeme", "redacted",
                     "***", "environ", "getenv", "os.", "none", "null")


def _is_evaluator(rel: str) -> bool:
    head, _, rest = rel.partition("/")
    if not rest:
        return rel.endswith(".py") or rel in ROOT_FILES
    return any(head == folder and rel.endswith(suffixes) for folder, suffixes in EVALUATOR)


def _ignored(rel: str, is_dir: bool, patterns: Iterable[str]) -> bool:
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


def _dropped_by_uploader(rel: str) -> bool:
    """eval-protocol's uploader drops the file, or one of its folders."""
    parts = rel.split("/")
    return any(_ignored("/".join(parts[:i]), True, TAR_DEFAULT_IGNORES) for i in range(1, len(parts))) \
        or _ignored(rel, False, TAR_DEFAULT_IGNORES)


def git_files(project_dir: Path, *args: str) -> list[str]:
    """``git ls-files -z ARGS`` of the project directory: paths relative to it, sorted. A directory git does
    not know (or no git at all) is a :class:`LaunchError` of one line."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_ENV_OVERRIDES}
    how = ("launch uploads only the files git tracks: make the project a git work tree (git init, git add the "
           "evaluator files, git commit) or pass --project-dir of a git checkout")
    try:
        proc = subprocess.run(["git", "-C", str(project_dir), "ls-files", "-z", *args], capture_output=True,
                              env=env, timeout=120, check=False)
    except FileNotFoundError:
        raise LaunchError(f"git is not installed; {how}") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"git ls-files in {project_dir} took over 120 s; {how}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith("fatal:")), lines[0] if lines else f"exit {proc.returncode}")
        raise LaunchError(f"{project_dir} is not a git work tree ({why.removeprefix('fatal: ')}); {how}")
    return sorted({p for p in proc.stdout.decode(errors="surrogateescape").split("\0") if p})


def _packable(project_dir: Path, rel: str, skip: set[Path]) -> bool:
    path = project_dir / rel
    return _is_evaluator(rel) and not _dropped_by_uploader(rel) and not path.is_symlink() and path.is_file() \
        and path.resolve() not in skip


def source_files(project_dir: Path, exclude: Iterable[Path] = ()) -> list[str]:
    """Project files the evaluator tarball holds (relative, sorted): those git tracks, of the evaluator
    (:data:`EVALUATOR`), less what eval-protocol's uploader drops. Raises :class:`LaunchError` outside git."""
    skip = {Path(p).resolve() for p in exclude}
    return [rel for rel in git_files(project_dir) if _packable(project_dir, rel, skip)]


def untracked_evaluator_files(project_dir: Path, exclude: Iterable[Path] = ()) -> list[str]:
    """Files the allowlist would take that git does not track and does not ignore: NOT packed, named so that a
    module nobody ``git add``-ed is seen before the cloud fails to import it."""
    skip = {Path(p).resolve() for p in exclude}
    others = git_files(project_dir, "--others", "--exclude-standard")
    return [rel for rel in others if _packable(project_dir, rel, skip)]


def _words(rel: str) -> set[str]:
    """The words of a path: split at every non-letter and at camelCase boundaries, lowercased."""
    return {w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", rel)}


def _is_dotenv(name: str) -> bool:
    return name == ".env" or name.startswith(".env.")


def _looks_random(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def content_secret(text: str) -> tuple[int, str] | None:
    """(line, what) of the first secret-looking value in ``text``, or None. The value itself is never returned."""
    found: list[tuple[int, str]] = []
    for what, pattern in SECRET_CONTENT:
        m = next((m for m in pattern.finditer(text) if _looks_random(m.group(0)[3:])), None)
        if m:
            found.append((m.start(), what))
    m = PRIVATE_KEY.search(text)
    if m:
        found.append((m.start(), "a private key block"))
    for m in CREDENTIAL_ASSIGNMENT.finditer(text):
        value = m.group(3) or m.group(4)
        if re.fullmatch(r"[A-Z][A-Z0-9_]*", value) or any(h in value.lower() for h in PLACEHOLDER_HINTS):
            continue  # an env var's name, an os.environ read, a placeholder: not a value
        found.append((m.start(), f"a value assigned to {m.group(1)}"))
        break
    if not found:
        return None
    start, what = min(found)
    return text.count("\n", 0, start) + 1, what


def secret_problems(project_dir: Path, packed: Iterable[str], tracked: Iterable[str] = ()) -> list[str]:
    """Why each file looks like a secret (``FILE: reason``), for the ``packed`` files (name and content) and
    the ``tracked`` ones (``.env*`` only); empty when none does."""
    bad: list[str] = []
    packed = list(packed)
    for rel in tracked:
        name = rel.rsplit("/", 1)[-1]
        if _is_dotenv(name) and not name.endswith(DOTENV_TEMPLATES):
            bad.append(f"{rel} (a tracked .env file)")
        elif _is_dotenv(name) and rel not in packed:
            hit = content_secret((project_dir / rel).read_text(errors="replace")) if (project_dir / rel).is_file() \
                else None
            if hit:
                bad.append(f"{rel}:{hit[0]} ({hit[1]})")
    for rel in packed:
        words = sorted(_words(rel) & SECRET_NAME_WORDS)
        if words:
            bad.append(f"{rel} (its name has {words[0]!r})")
            continue
        hit = content_secret((project_dir / rel).read_text(errors="replace"))
        if hit:
            bad.append(f"{rel}:{hit[0]} ({hit[1]})")
    return bad


def refusal(problems: list[str]) -> str:
    """The one-line refusal for :func:`secret_problems`' findings."""
    shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    return (f"refusing to upload: {len(problems)} tracked file(s) look like a secret: {shown}. Untrack each "
            "(git rm --cached FILE, then add it to .gitignore); if it is not a secret, rename it or read the value "
            "from the environment. Then rerun.")


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
    """The tarball and its summary: ``tarball`` name, ``bytes`` (compressed), ``sha256``, ``files`` (sorted),
    ``file_bytes`` (each file's size), ``total_bytes`` (their sum), ``untracked`` (allowlisted, not packed).
    Raises :class:`LaunchError` (one line) outside git or when a file looks like a secret."""
    tracked = git_files(project_dir)
    skip = {Path(p).resolve() for p in exclude}
    files = [rel for rel in tracked if _packable(project_dir, rel, skip)]
    problems = secret_problems(project_dir, files, tracked)
    if problems:
        raise LaunchError(refusal(problems))
    tar = build_tarball(project_dir, files)
    sizes = {rel: (project_dir / rel).stat().st_size for rel in files}
    return tar, {"tarball": f"{project_dir.name}.tar.gz", "bytes": len(tar),
                 "sha256": hashlib.sha256(tar).hexdigest(), "files": files, "file_bytes": sizes,
                 "total_bytes": sum(sizes.values()), "untracked": untracked_evaluator_files(project_dir, exclude)}
