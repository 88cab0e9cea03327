"""The evaluator tarball ``spectrum-rft launch --dry-run`` builds holds the whole evaluator, works alone, and
holds nothing else: only files git tracks go, the dry run lists each with its size, a secret refuses.

The tarball drops what eval-protocol's uploader drops (``eval_protocol/evaluation.py``: folders named
env/build/dist/vendor/coverage, caches, ``.env*``), so a package folder with one of those names, or an entry
that imports something outside the project, would reach the cloud broken. Here the real project root goes
through the dry run; the tarball is listed, extracted, and both evaluation entries are imported from the
extracted copy in an isolated interpreter that cannot see this checkout. Then small real git repositories,
with untracked, ignored and tracked-secret files planted in them, show what goes and what refuses.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from spectrum_rft.tools.launch import main
from spectrum_rft.tools.launch.cli import build_parser, options_from_args
from spectrum_rft.tools.launch.options import LaunchError, LaunchOptions
from spectrum_rft.tools.launch.plan import build_plan
from spectrum_rft.tools.launch.tarball import git_files, secret_problems, source_files

ROOT = Path(__file__).resolve().parent.parent
ROOT_ENTRY_POINTS = ("test_spectrum_turn.py", "test_spectrum_rft.py", "spectrum_server.py", "requirements.txt",
                     "spectrum_adapter.py", "spectrum_mcp.py", "spectrum_reward.py", "spectrum_context_window.py",
                     "spectrum_turn_processor.py", "make_spectrum_dataset.py", "spectrum_templates/__init__.py",
                     "data/spectrum_default16.jsonl")
DROPPED_FOLDERS = {"env", "build", "dist", "vendor", "coverage", "__pycache__", ".git", ".venv"}
PLANTED_KEY = "fw_Pl4ntedLocalSettingsKey0x9Zq"
# What a tester planted in a project, untracked: settings with a key, private rows, a key module.
PLANTED = {"local_settings.py": f'FIREWORKS_API_KEY = "{PLANTED_KEY}"\n',
           "data/my_private_run_rows.jsonl": '{"row": "private run row"}\n',
           "spectrum_rft/_my_keys.py": f'KEY = "{PLANTED_KEY}"\n'}


def git(repo: Path, *args: str) -> None:
    """git in ``repo`` with no user or system config (no hooks, no signing, a fixed identity)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_COMMITTER_NAME="t",
               GIT_AUTHOR_EMAIL="t@example.invalid", GIT_COMMITTER_EMAIL="t@example.invalid")
    subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, timeout=60)


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)

# Runs in the extracted copy with `python -I` (no PYTHONPATH, no cwd on sys.path, no user site); the
# editable install's finder (which maps spectrum_rft to this checkout) is removed before any import.
# One episode through the root `spectrum_adapter`, played both in the extracted copy and in this checkout.
PLAY = """\
env = SpectrumEnv(EnvConfig(preset="default", memory_mode="scaffold", reward="default"))
obs, _ = env.reset(seed=seed_for_row("row-0007"))
prompts = [obs["prompt"]]
while not env.done:
    obs, *_ = env.step({"center_freqs": [100.0, 200.0]})
    prompts.append(obs["prompt"])
"""

CHILD = r"""
import json, os, sys
copy, repo = sys.argv[1], sys.argv[2]
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != os.path.realpath(repo)]
sys.path.insert(0, copy)

import test_spectrum_turn, test_spectrum_rft
from spectrum_adapter import EnvConfig, SpectrumEnv, seed_for_row

@@PLAY@@files = {n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}
from_checkout = sorted(n for n, f in files.items() if f and os.path.realpath(f).startswith(os.path.realpath(repo) + os.sep)
                       and not os.path.realpath(f).startswith(os.path.realpath(sys.prefix) + os.sep))
print(json.dumps({"isolated": sys.flags.isolated, "files": {n: files[n] for n in (
    "spectrum_rft", "spectrum_rft.task.environment", "test_spectrum_turn", "test_spectrum_rft", "spectrum_adapter")},
    "from_checkout": from_checkout, "entries": [callable(test_spectrum_turn.test_spectrum_turn),
    callable(test_spectrum_rft.test_spectrum_rft)], "prompts": prompts, "truth": env.truth(),
    "fingerprint": env.metrics()["band_fingerprint"], "metrics": env.metrics()}))
""".replace("@@PLAY@@", PLAY)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> tuple[bytes, dict]:
    """The project root's evaluator tarball, from ``launch --dry-run`` (no credentials, no network)."""
    tmp = tmp_path_factory.mktemp("launch")
    argv = ["--arm", "weak-scaffold", "--rows", "1", "--epochs", "1", "--tag", "tar", "--dry-run", "--json",
            "--project-dir", str(ROOT), "--dataset-out", str(tmp / "ds.jsonl")]
    mp = pytest.MonkeyPatch()
    for k in ("FIREWORKS_API_KEY", "FIREWORKS_ACCOUNT_ID", "FIREWORKS_BASE_URL"):
        mp.delenv(k, raising=False)
    try:
        out = io.StringIO()
        mp.setattr(sys, "stdout", out)
        assert main(argv) == 0
        mp.undo()
        requests = json.loads(out.getvalue())["requests"]
        plan = build_plan(options_from_args(build_parser().parse_args(argv)), env={})
    finally:
        mp.undo()
    upload = next(r for r in requests if r["step"] == "evaluator.upload_source")
    # the dry run's upload is this tarball (the build is reproducible)
    assert upload["body"]["sha256"] == hashlib.sha256(plan.tarball).hexdigest()
    assert upload["body"]["files"] == len(plan.source["files"])
    return plan.tarball, upload


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.getnames()


def test_tarball_holds_the_whole_package_and_the_entry_points(tarball):
    data, upload = tarball
    names = _names(data)
    prefix = f"{ROOT.name}/"
    assert all(n.startswith(prefix) for n in names)
    rel = {n[len(prefix):] for n in names}
    untracked = set(git_files(ROOT, "--others"))  # not uploaded: a module nobody git-added is not the package yet
    assert not untracked & rel
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spectrum_rft").rglob("*.py")
               if "__pycache__" not in p.parts} - untracked
    templates = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spectrum_rft" / "task" / "templates").glob("*.j2")}
    assert len(package) > 30 and {"spectrum_rft/task/templates/scan.j2", "spectrum_rft/task/templates/system.j2",
                                  "spectrum_rft/task/templates/feedback.j2"} <= templates
    assert sorted(package - rel) == []
    assert sorted(templates - rel) == []
    assert sorted(set(ROOT_ENTRY_POINTS) - rel) == []
    for r in rel:  # nothing the uploader drops, no secrets, no caches
        parts = r.split("/")
        assert not set(parts[:-1]) & DROPPED_FOLDERS, r
        assert not parts[-1].startswith(".env") and not r.endswith(".pyc"), r
    assert upload["body"]["tarball"] == f"{ROOT.name}.tar.gz"


def test_the_tarball_is_the_evaluator_and_nothing_else(tarball):
    """No run records (LoRA weights), docs, tests, scripts or plots: only the package, the root modules, the
    template shim, the shipped datasets and the install files."""
    data, _ = tarball
    rel = [n.split("/", 1)[1] for n in _names(data)]
    allowed_roots = {"spectrum_rft", "spectrum_templates", "data"}
    for r in rel:
        head, _, rest = r.partition("/")
        assert (head in allowed_roots and rest) or (not rest and (r.endswith(".py") or r in (
            "requirements.txt", "pyproject.toml", "LICENSE", "README.md"))), r
        assert not r.endswith((".safetensors", ".png", ".bin", ".pt", ".gguf")), r
    assert len(data) < 400_000 and len(rel) < 150  # the evaluator is small; the whole root was 49 MB


def test_the_file_list_ignores_what_is_not_the_evaluator(tmp_path):
    for rel, body in [("spectrum_rft/__init__.py", ""), ("spectrum_rft/task/templates/scan.j2", "x"),
                      ("spectrum_rft/task/stray.png", "x"), ("results/run/adapter/adapter_model.safetensors", "w"),
                      ("docs/LAUNCH.md", "d"), ("tests/test_x.py", ""), ("spectrum_report.png", "p"),
                      ("test_spectrum_turn.py", ""), ("requirements.txt", "numpy"), ("data/rows.jsonl", "{}"),
                      ("data/big.safetensors", "w"), ("spectrum_rft/__pycache__/x.pyc", "c"), (".env", "KEY=1"),
                      ("runs/sft/model/model.safetensors", "w")]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")  # every one tracked: the allowlist and the uploader's ignores still decide
    assert source_files(tmp_path) == ["data/rows.jsonl", "requirements.txt", "spectrum_rft/__init__.py",
                                      "spectrum_rft/task/templates/scan.j2", "test_spectrum_turn.py"]


def test_entries_import_from_an_extracted_copy_in_a_clean_process(tarball, tmp_path):
    data, _ = tarball
    dest = tmp_path / "extracted"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
    copy = dest / ROOT.name
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    child_env["HOME"] = str(tmp_path / "home")  # nothing from this user's eval-protocol store
    proc = subprocess.run([sys.executable, "-I", "-c", CHILD, str(copy), str(ROOT)], cwd=copy, env=child_env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["isolated"] == 1
    for name, f in got["files"].items():
        assert Path(f).resolve().is_relative_to(copy.resolve()), (name, f)
    assert got["from_checkout"] == []  # not one module came from this checkout
    assert got["entries"] == [True, True]

    # The environment of the extracted copy plays the same episode as this checkout's.
    import spectrum_adapter

    ns = vars(spectrum_adapter).copy()
    exec(PLAY, ns)  # noqa: S102 (our own snippet, the one the child ran)
    env, prompts = ns["env"], ns["prompts"]
    assert len(got["prompts"]) == env.n_scans + 1 > 2 and all(got["prompts"][:-1])
    assert got["prompts"] == prompts
    assert got["truth"] == json.loads(json.dumps(env.truth()))
    assert got["fingerprint"] == env.metrics()["band_fingerprint"]
    assert got["metrics"] == json.loads(json.dumps(env.metrics()))


# --- only what git tracks leaves the machine --------------------------------------------------------------------

EVALUATOR_FILES = {  # tracked and committed; ids.py, tokenizer.py and the .env template must not look like secrets
    "requirements.txt": "numpy\n", "test_spectrum_turn.py": "def test_spectrum_turn():\n    pass\n",
    "spectrum_rft/__init__.py": "", "spectrum_rft/tools/launch/ids.py": "def dotenv_keys(d):\n    return d.keys()\n",
    "spectrum_rft/tokenizer.py": "PAD_TOKEN = '<pad>'\nAPI_KEY_ENV = 'FIREWORKS_API_KEY'\n",
    "spectrum_rft/later.py": "LATER = 1\n", "data/rows.jsonl": '{"row_id": "r0"}\n', "docs/notes.md": "docs\n",
    ".env.example": "FIREWORKS_API_KEY=\nWANDB_API_KEY=<your key>\n", ".gitignore": "data/ignored_*\n"}
PACKED = ["data/rows.jsonl", "requirements.txt", "spectrum_rft/__init__.py", "spectrum_rft/later.py",
          "spectrum_rft/staged.py", "spectrum_rft/tokenizer.py", "spectrum_rft/tools/launch/ids.py",
          "test_spectrum_turn.py"]


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git project: the evaluator committed, one module staged, the tester's files planted untracked, ignored
    files, and a tracked module a later ignore rule matches (still tracked: git's rule, so it goes)."""
    p = tmp_path / "proj"
    write_files(p, EVALUATOR_FILES)
    git(p, "init", "-q")
    git(p, "add", ".")
    git(p, "commit", "-q", "-m", "evaluator")
    write_files(p, {"spectrum_rft/staged.py": "STAGED = 1\n"})
    git(p, "add", "spectrum_rft/staged.py")
    write_files(p, {**PLANTED, "data/ignored_rows.jsonl": "{}\n", "spectrum_rft/scratch.py": f"K = '{PLANTED_KEY}'\n",
                    ".gitignore": "data/ignored_*\nspectrum_rft/scratch.py\nspectrum_rft/later.py\n",
                    "spectrum_rft/__init__.py": "EDITED = 1\n"})  # an uncommitted edit of a tracked file goes
    return p


def _dry_run(repo: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["--arm", "weak-scaffold", "--rows", "1", "--epochs", "1", "--tag", "g", "--dry-run", "--project-dir",
            str(repo), "--dataset-out", str(tmp_path / "ds.jsonl"), *extra]


@pytest.fixture
def no_credentials(monkeypatch):
    for k in ("FIREWORKS_API_KEY", "FIREWORKS_ACCOUNT_ID", "FIREWORKS_BASE_URL", "WANDB_API_KEY"):
        monkeypatch.delenv(k, raising=False)


def test_only_files_git_tracks_go_in_the_tarball(repo, tmp_path, no_credentials):
    plan = build_plan(LaunchOptions(arm="icl", rows=1, epochs=1, tag="g", dry_run=True, project_dir=str(repo),
                                    dataset_out=str(tmp_path / "ds.jsonl")))
    assert plan.source["files"] == PACKED == source_files(repo)
    assert _names(plan.tarball) == [f"proj/{rel}" for rel in PACKED]
    with tarfile.open(fileobj=io.BytesIO(plan.tarball), mode="r:gz") as tar:
        bodies = {n.split("/", 1)[1]: tar.extractfile(n).read() for n in tar.getnames()}
    assert PLANTED_KEY.encode() not in b"".join(bodies.values())
    assert bodies["spectrum_rft/__init__.py"] == b"EDITED = 1\n"  # the working tree's content of tracked files
    assert plan.source["untracked"] == sorted(PLANTED)  # named (not uploaded); ignored ones are not even named
    note = next(n for n in plan.notes if "untracked" in n)
    assert "3 untracked file(s)" in note and "NOT uploaded" in note and "spectrum_rft/_my_keys.py" in note
    assert "scratch" not in note and "ignored_rows" not in note


def test_dry_run_lists_every_file_with_its_size(repo, tmp_path, no_credentials, capsys):
    assert main(_dry_run(repo, tmp_path)) == 0
    out = capsys.readouterr().out
    sizes = {rel: (repo / rel).stat().st_size for rel in PACKED}
    listed = {}
    for line in out.splitlines():
        m = re.fullmatch(r"\s*([\d,]+)  (\S+)", line)
        if m:
            listed[m.group(2)] = int(m.group(1).replace(",", ""))
    assert listed == sizes
    total = sum(sizes.values())
    assert re.search(rf"^\s*{total:,}  total: {len(PACKED)} files \(", out, re.M)
    assert out.index("total:") < out.index("# dry run: no request was sent")  # the files come first
    for rel in (*PLANTED, "data/ignored_rows.jsonl", "spectrum_rft/scratch.py", ".env.example", "docs/notes.md"):
        assert rel not in out
    assert main(_dry_run(repo, tmp_path, "--json")) == 0
    source = json.loads(capsys.readouterr().out)["source"]
    assert source["files"] == [{"path": rel, "bytes": sizes[rel]} for rel in PACKED]
    assert source["total_bytes"] == total


@pytest.mark.parametrize(("rel", "body", "why"), [
    (".env", "A=1\n", ".env (a tracked .env file)"),
    ("conf/.env.local", "A=1\n", "conf/.env.local (a tracked .env file)"),
    (".env.example", f"FIREWORKS_API_KEY={PLANTED_KEY}\n", ".env.example:1 (a value assigned to FIREWORKS_API_KEY)"),
    ("spectrum_rft/api_keys.py", "X = 1\n", "spectrum_rft/api_keys.py (its name has 'keys')"),
    ("spectrum_rft/_my_keys.py", PLANTED["spectrum_rft/_my_keys.py"], "spectrum_rft/_my_keys.py (its name has 'keys')"),
    ("spectrum_rft/credentials.py", "", "spectrum_rft/credentials.py (its name has 'credentials')"),
    ("local_settings.py", PLANTED["local_settings.py"], "local_settings.py:1 (a value assigned to FIREWORKS_API_KEY)"),
    ("spectrum_rft/settings.py", f"import os\n\nX = '{PLANTED_KEY}'\n", "settings.py:3 (a Fireworks API key (fw_...))"),
    ("spectrum_rft/client.py", 'H = {"Authorization": "Bearer sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2"}\n',
     "client.py:1 (an API key (sk-...))"),
    ("data/rows2.jsonl", '{"a": 1}\n{"k": "-----BEGIN RSA PRIVATE KEY-----\\nMIIE"}\n',
     "data/rows2.jsonl:2 (a private key block)"),
    ("data/rows3.jsonl", '{"env": {"WANDB_API_KEY": "0123456789abcdef0123"}}\n',
     "data/rows3.jsonl:1 (a value assigned to WANDB_API_KEY)"),
])
def test_a_tracked_file_that_looks_like_a_secret_refuses_in_one_line(tmp_path, no_credentials, capsys, rel, body,
                                                                      why):
    p = tmp_path / "proj"
    write_files(p, {**{k: EVALUATOR_FILES[k] for k in ("requirements.txt", "test_spectrum_turn.py")}, rel: body})
    git(p, "init", "-q")
    git(p, "add", "-f", ".")
    assert main(_dry_run(p, tmp_path)) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and len(cap.err.strip().splitlines()) == 1, cap.err
    assert cap.err.startswith("spectrum-rft launch: refusing to upload: 1 tracked file(s) look like a secret")
    assert why in cap.err and "git rm --cached" in cap.err and "Traceback" not in cap.err
    for secret in (PLANTED_KEY, "A1b2C3d4E5f6G7h8I9j0K1l2", "0123456789abcdef0123", "MIIE"):
        assert secret not in cap.err  # the file and the reason, never the value


def test_the_projects_own_files_pass_the_secret_check():
    """This repository's whole upload (and its .env-like names anywhere in git) looks like no secret, and the
    name rule takes words, not substrings."""
    assert secret_problems(ROOT, source_files(ROOT), git_files(ROOT)) == []
    assert secret_problems(ROOT, ["spectrum_rft/tools/launch/ids.py", "spectrum_rft/tools/launch/tarball.py"]) == []


def test_a_project_outside_git_is_refused_in_one_line(tmp_path, no_credentials, capsys, monkeypatch):
    p = tmp_path / "sdist"
    write_files(p, {**EVALUATOR_FILES, **PLANTED})
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above the test folder either
    with pytest.raises(LaunchError, match="not a git work tree"):
        source_files(p)
    assert main(_dry_run(p, tmp_path)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is not a git work tree" in err and "git init" in err, err
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no git on this machine
    assert main(_dry_run(p, tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("spectrum-rft launch: git is not installed") and len(err.strip().splitlines()) == 1
