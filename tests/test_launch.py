"""``spectrum-rft launch`` against the REAL fireworks-ai SDK pointed at a loopback server that records.

Nothing here can reach the Fireworks cloud: every launch gets ``--base-url http://127.0.0.1:PORT``, the
signed upload URL the fake server hands out is loopback too, and the dry-run tests forbid sockets.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import re
import socket
import subprocess
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from spectrum_rft.tools.entries import entry_spec
from spectrum_rft.tools.launch import main
from spectrum_rft.task.arms import ARMS
from spectrum_rft.tools.launch.cli import build_parser, options_from_args
from spectrum_rft.tools.launch.execute import execute
from spectrum_rft.tools.launch.heldout import band_fingerprints
from spectrum_rft.tools.launch.ids import Redact
from spectrum_rft.tools.launch.options import LaunchError, LaunchOptions, option_problems
from spectrum_rft.tools.launch.plan import build_plan, write_dataset
from spectrum_rft.tools.launch.tarball import build_tarball, source_files

FAKE_KEY = "fw-test-KEY-4b1d9e0c77aa"  # set only inside this test process
PLANTED_KEY = "fw_Pl4ntedLocalSettingsKey0x9Zq"  # in untracked files of the project: must never leave
PLANTED = {"local_settings.py": f'FIREWORKS_API_KEY = "{PLANTED_KEY}"\n',
           "data/my_private_run_rows.jsonl": '{"row": "private"}\n',
           "spectrum_rft/_my_keys.py": f'KEY = "{PLANTED_KEY}"\n'}
FAKE_WANDB = "wandb-test-KEY-93ff01"
ACCOUNT = "acct-test"


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.records: list[dict] = []
        self.fail: dict[str, tuple[int, dict]] = {}  # route name -> (status, body)
        self.evaluator_states = ["ACTIVE"]
        self.jobs: dict[str, dict] = {}  # job id -> the job as the API returns it (GET, :resume)
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def _route(method: str, path: str) -> str:
    if method == "PUT" and path.startswith("/signed/"):
        return "upload_source"
    if method == "POST" and path.endswith("/datasets"):
        return "dataset.create"
    if method == "POST" and path.endswith(":upload"):
        return "dataset.upload"
    if method == "POST" and path.endswith("/evaluatorsV2"):
        return "evaluator.create"
    if path.endswith(":getUploadEndpoint"):
        return "evaluator.get_upload_endpoint"
    if path.endswith(":validateUpload"):
        return "evaluator.validate_upload"
    if method == "GET" and "/evaluators/" in path:
        return "evaluator.get"
    if method == "POST" and path.endswith("/reinforcementFineTuningJobs"):
        return "job.create"
    if method == "POST" and path.endswith(":resume"):
        return "job.resume"
    if method == "GET" and "/reinforcementFineTuningJobs/" in path:
        return "job.get"
    if path == "/verifyApiKey":  # eval-protocol's account lookup
        return "verify_api_key"
    if "/secrets" in path:  # eval-protocol uploads secrets even with --dry-run
        return "secret"
    return "unknown"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, *args):  # keep test output quiet
        pass

    def _handle(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        u = urlsplit(self.path)
        route = _route(self.command, u.path)
        rec = {"route": route, "method": self.command, "path": u.path, "query": parse_qs(u.query),
               "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
        with self.server.lock:
            self.server.records.append(rec)
        if route in self.server.fail:
            status, payload = self.server.fail[route]
            return self._send(status, payload)
        acct = f"accounts/{ACCOUNT}"
        if route == "dataset.create":
            payload = {"name": f"{acct}/datasets/{json.loads(body)['datasetId']}", "state": "UPLOADING"}
        elif route == "evaluator.get_upload_endpoint":
            name = next(iter(json.loads(body)["filenameToSize"]))
            payload = {"filenameToSignedUrls": {name: f"{self.server.url}/signed/{name}?sig=abc"}}
        elif route == "evaluator.get":
            with self.server.lock:
                st = self.server.evaluator_states.pop(0) if len(self.server.evaluator_states) > 1 else \
                    self.server.evaluator_states[0]
            payload = {"name": f"{acct}/evaluators/x", "state": st}
        elif route == "job.create":
            payload = {"name": f"{acct}/reinforcementFineTuningJobs/job123", "state": "JOB_STATE_CREATING"}
        elif route in ("job.get", "job.resume"):
            job_id = u.path.rsplit("/", 1)[-1].removesuffix(":resume")
            with self.server.lock:
                job = self.server.jobs.get(job_id)
                if job is not None and route == "job.resume":
                    job["state"] = "JOB_STATE_RUNNING"
            if job is None:
                return self._send(404, {"error": {"code": 404, "message": f"job {job_id} not found"}})
            payload = job
        else:
            payload = {}
        self._send(200, payload)

    def _send(self, status: int, payload: dict):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if self.path == "/verifyApiKey":
            self.send_header("x-fireworks-account-id", ACCOUNT)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle


@pytest.fixture
def server():
    srv = Recorder()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def git(repo: Path, *args: str) -> None:
    """git in ``repo`` with no user or system config (no hooks, no signing, a fixed identity)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_COMMITTER_NAME="t",
               GIT_AUTHOR_EMAIL="t@example.invalid", GIT_COMMITTER_EMAIL="t@example.invalid")
    subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, timeout=60)


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body if isinstance(body, bytes) else body.encode())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small evaluator project in git: the tracked entry file, requirements.txt and a template, committed run
    records, docs and a plot; untracked, a .env with a secret and the files a tester planted (which the
    evaluator's folders would take if untracked files went); ignored junk."""
    p = tmp_path / "proj"
    write_files(p, {
        "requirements.txt": "eval-protocol\n", "test_spectrum_turn.py": "def test_spectrum_turn():\n    pass\n",
        "spectrum_templates/scan.j2": "scan\n", ".gitignore": "out/\n/local_only.txt\n__pycache__/\ndata/ignored_*\n",
        "results/run/adapter_model.safetensors": b"\0" * 64,  # committed run records: never part of the evaluator
        "docs/LAUNCH.md": "docs\n", "spectrum_report.png": b"\x89PNG"})
    git(p, "init", "-q")
    git(p, "add", ".")
    git(p, "commit", "-q", "-m", "evaluator")
    write_files(p, {
        ".env": "OPENAI_API_KEY=sk-should-never-ship\nexport OTHER_SECRET=zzz\n",
        **PLANTED,  # untracked: never uploaded
        "local_only.txt": "ignored\n", "__pycache__/x.pyc": b"\0", "data/ignored_rows.jsonl": "{}\n"})
    return p


@pytest.fixture
def env(monkeypatch):
    for k in ("FIREWORKS_BASE_URL", "FIREWORKS_API_BASE", "FIREWORKS_CUSTOM_HEADERS", "WANDB_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("FIREWORKS_API_KEY", FAKE_KEY)
    monkeypatch.setenv("FIREWORKS_ACCOUNT_ID", ACCOUNT)
    return monkeypatch  # the offline settings come from conftest


def _argv(server, project: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["--arm", "weak-scaffold", "--rows", "3", "--epochs", "2", "--tag", "t1", "--project-dir", str(project),
            "--dataset-out", str(tmp_path / "ds.jsonl"), "--base-url", server.url, "--evaluator-timeout", "5", *extra]


def _plan(argv: list[str]):
    return build_plan(options_from_args(build_parser().parse_args(argv)))


def _no_secrets(*texts: str) -> None:
    for t in texts:
        assert FAKE_KEY not in t
        assert FAKE_WANDB not in t
        assert "sk-should-never-ship" not in t
        assert PLANTED_KEY not in t


def _multipart_file(rec: dict) -> bytes:
    ctype = rec["headers"]["content-type"]
    boundary = re.search(r"boundary=([^;]+)", ctype).group(1).encode()
    for part in rec["body"].split(b"--" + boundary):
        if b'name="file"' in part:
            return part.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n", 1)[0]
    raise AssertionError("no file part")


def test_launch_sends_dataset_then_evaluator_then_job(server, project, tmp_path, env, capsys, caplog):
    env.setenv("WANDB_API_KEY", FAKE_WANDB)
    caplog.set_level(logging.DEBUG)
    rc = main(_argv(server, project, tmp_path, "--wandb-project", "spec", "--json"))
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    routes = [r["route"] for r in server.records]
    assert routes == ["dataset.create", "dataset.upload", "dataset.create", "dataset.upload", "evaluator.create",
                      "evaluator.get_upload_endpoint", "upload_source", "evaluator.validate_upload", "evaluator.get",
                      "job.create"]
    by: dict[str, dict] = {}
    for r in server.records:
        by.setdefault(r["route"], r)  # the first of each route: the training dataset's
    held_create, held_upload = server.records[2], server.records[3]
    # Fireworks calls carry the key; the signed-URL PUT must not.
    for r in server.records:
        if r["route"] == "upload_source":
            assert "authorization" not in r["headers"]
        else:
            assert r["headers"]["authorization"] == f"Bearer {FAKE_KEY}"
            assert r["path"].startswith(f"/v1/accounts/{ACCOUNT}/")

    ds = json.loads(by["dataset.create"]["body"])
    assert ds == {"dataset": {"displayName": "spectrum-weak-scaffold-t1", "evalProtocol": {},
                              "format": "FORMAT_UNSPECIFIED", "exampleCount": "6"},
                  "datasetId": "spectrum-weak-scaffold-t1"}
    rows = [json.loads(x) for x in _multipart_file(by["dataset.upload"]).decode().splitlines()]
    assert len(rows) == 6  # 3 rows x 2 fresh dataset epochs
    ctxs = [r["input_metadata"]["dataset_info"]["environment_context"] for r in rows]
    assert {(c["prompt"], c["memory_mode"]) for c in ctxs} == {("weak", "scaffold")}
    assert [c["epoch"] for c in ctxs] == [0, 0, 0, 1, 1, 1]
    assert len({c["seed"] for c in ctxs}) == 6  # never-repeating bands
    assert len({r["input_metadata"]["row_id"] for r in rows}) == 6

    # the held-out evaluation dataset: 24 fresh bands (the default), marked, no epoch, none a training band
    assert json.loads(held_create["body"])["datasetId"] == "spectrum-weak-scaffold-t1-heldout"
    held = [json.loads(x) for x in _multipart_file(held_upload).decode().splitlines()]
    assert len(held) == 24
    hctx = [r["input_metadata"]["dataset_info"]["environment_context"] for r in held]
    assert {c["split"] for c in hctx} == {"heldout"} and not any("epoch" in c for c in hctx)
    assert {c["salt"] for c in hctx} == {"heldout"} and {c["salt"] for c in ctxs} == {""}
    assert all(r["input_metadata"]["row_id"].startswith("spectrum-heldout-r") for r in held)
    assert not set(band_fingerprints(held).values()) & set(band_fingerprints(rows).values())

    ev = json.loads(by["evaluator.create"]["body"])
    assert ev["evaluatorId"] == "test-spectrum-turn-test-spectrum-turn"
    assert ev["evaluator"]["entryPoint"] == "test_spectrum_turn.py::test_spectrum_turn"
    put = by["upload_source"]
    assert put["headers"]["content-type"] == "application/octet-stream"
    assert put["headers"]["x-goog-content-length-range"] == f"{len(put['body'])},{len(put['body'])}"
    size = json.loads(by["evaluator.get_upload_endpoint"]["body"])["filenameToSize"]
    assert size == {"proj.tar.gz": str(len(put["body"]))}
    with tarfile.open(fileobj=io.BytesIO(put["body"]), mode="r:gz") as tar:
        names = sorted(tar.getnames())
    # the evaluator alone, as git tracks it: no .env, no untracked or ignored files (the planted settings,
    # private rows and keys among them), no caches, no run records, docs or plots
    assert names == ["proj/requirements.txt", "proj/spectrum_templates/scan.j2", "proj/test_spectrum_turn.py"]
    assert PLANTED_KEY.encode() not in gzip.decompress(put["body"])
    assert json.loads(by["evaluator.validate_upload"]["body"]) == {}

    job = json.loads(by["job.create"]["body"])
    assert job["dataset"] == f"accounts/{ACCOUNT}/datasets/spectrum-weak-scaffold-t1"
    assert job["evaluator"] == f"accounts/{ACCOUNT}/evaluators/test-spectrum-turn-test-spectrum-turn"
    assert job["trainingConfig"] == {"baseModel": "accounts/fireworks/models/qwen3-1p7b", "epochs": 1,
                                     "learningRate": 5e-5, "outputModel": "spectrum-weak-scaffold-t1"}
    assert job["inferenceParameters"] == {"temperature": 1.2, "maxOutputTokens": 1024,
                                          "responseCandidatesCount": 12}
    assert job["lossConfig"] == {"method": "GRPO"}
    assert job["maxConcurrentRollouts"] == 96
    assert job["chunkSize"] == 3
    assert job["wandbConfig"] == {"enabled": True, "project": "spec", "apiKey": FAKE_WANDB}
    assert job["evaluationDataset"] == f"accounts/{ACCOUNT}/datasets/spectrum-weak-scaffold-t1-heldout"

    out = json.loads(cap.out)
    assert out["error"] is None
    assert out["start"] == {"from": "base_model", "model": "accounts/fireworks/models/qwen3-1p7b"}
    assert out["evaluation"]["mode"] == "heldout" and out["evaluation"]["rows"] == 24
    assert [c["kind"] for c in out["created"]] == ["dataset", "evaluation dataset", "evaluator", "job"]
    assert out["job"]["name"] == f"accounts/{ACCOUNT}/reinforcementFineTuningJobs/job123"
    assert "WARNING: .env" in cap.err and "OPENAI_API_KEY, OTHER_SECRET" in cap.err
    assert "3 untracked file(s) of the evaluator's folders are NOT uploaded" in cap.err
    _no_secrets(cap.out, cap.err, caplog.text)


@pytest.mark.parametrize("status", [400, 500])
def test_job_error_names_what_was_created(server, project, tmp_path, env, capsys, caplog, status):
    caplog.set_level(logging.DEBUG)
    server.fail["job.create"] = (status, {"error": {"code": status, "message": "quota exceeded for base model"}})
    rc = main(_argv(server, project, tmp_path))
    cap = capsys.readouterr()
    assert rc == 1
    assert [r["route"] for r in server.records].count("job.create") == 1  # never retried: no double job
    assert f"FAILED at job.create: HTTP {status}: quota exceeded for base model" in cap.err
    assert "already created (not rolled back):" in cap.err
    assert f"dataset: accounts/{ACCOUNT}/datasets/spectrum-weak-scaffold-t1 (6 rows uploaded)" in cap.err
    assert f"evaluation dataset: accounts/{ACCOUNT}/datasets/spectrum-weak-scaffold-t1-heldout (24 rows uploaded)" \
        in cap.err
    assert f"evaluator: accounts/{ACCOUNT}/evaluators/test-spectrum-turn-test-spectrum-turn (ACTIVE)" in cap.err
    assert ("rerun with: --reuse-dataset spectrum-weak-scaffold-t1 --evaluation-dataset "
            "spectrum-weak-scaffold-t1-heldout --reuse-evaluator") in cap.err
    _no_secrets(cap.out, cap.err, caplog.text)


def test_resume_after_failure_creates_only_the_job(server, project, tmp_path, env, capsys):
    rc = main(_argv(server, project, tmp_path, "--reuse-dataset", "spectrum-weak-scaffold-t1",
                    "--evaluation-dataset", "spectrum-weak-scaffold-t1-heldout", "--reuse-evaluator"))
    assert rc == 0, capsys.readouterr().err
    assert [r["route"] for r in server.records] == ["evaluator.get", "job.create"]
    job = json.loads(server.records[-1]["body"])
    assert job["dataset"] == f"accounts/{ACCOUNT}/datasets/spectrum-weak-scaffold-t1"
    assert job["evaluationDataset"] == f"accounts/{ACCOUNT}/datasets/spectrum-weak-scaffold-t1-heldout"


def test_evaluator_conflict_reports_dataset_only(server, project, tmp_path, env, capsys):
    server.fail["evaluator.create"] = (409, {"error": {"message": "evaluator already exists"}})
    rc = main(_argv(server, project, tmp_path, "--json"))
    cap = capsys.readouterr()
    assert rc == 1
    assert "job.create" not in [r["route"] for r in server.records]
    out = json.loads(cap.out)
    assert out["failed_step"] == "evaluator.create"
    assert out["error"] == "HTTP 409: evaluator already exists"
    assert [c["kind"] for c in out["created"]] == ["dataset", "evaluation dataset"]
    assert out["resume_flags"] == ["--reuse-dataset", "spectrum-weak-scaffold-t1", "--evaluation-dataset",
                                   "spectrum-weak-scaffold-t1-heldout"]


def test_failed_file_upload_is_reported_as_empty_dataset(server, project, tmp_path, env, capsys):
    server.fail["dataset.upload"] = (503, {"error": {"message": "storage unavailable"}})
    rc = main(_argv(server, project, tmp_path))
    err = capsys.readouterr().err
    assert rc == 1
    assert "FAILED at dataset.upload: HTTP 503: storage unavailable" in err
    assert "spectrum-weak-scaffold-t1 (created, file not uploaded)" in err
    assert "--reuse-dataset" not in err  # an empty dataset is not something to resume from


def test_evaluator_build_failure_and_polling(server, project, tmp_path, env):
    server.evaluator_states = ["BUILDING", "BUILDING", "BUILD_FAILED"]
    plan = _plan(_argv(server, project, tmp_path))
    write_dataset(plan)
    import httpx
    from fireworks import Fireworks

    with httpx.Client() as http:
        client = Fireworks(api_key=FAKE_KEY, account_id=ACCOUNT, base_url=server.url, http_client=http,
                           max_retries=0)
        sleeps = []
        out = execute(plan, client, http, sleep=sleeps.append)
    assert sleeps == [10.0, 10.0]
    assert out.failed_step == "evaluator.get" and "build failed" in out.error
    assert [c["kind"] for c in out.created] == ["dataset", "evaluation dataset", "evaluator"]
    assert "job.create" not in [r["route"] for r in server.records]


def test_dry_run_touches_no_network(server, project, tmp_path, env, capsys, caplog, monkeypatch):
    env.setenv("WANDB_API_KEY", FAKE_WANDB)
    caplog.set_level(logging.DEBUG)

    def no_connect(*a, **k):
        raise AssertionError("the dry run opened a connection")

    monkeypatch.setattr(socket.socket, "connect", no_connect)
    monkeypatch.setattr(socket, "create_connection", no_connect)
    rc = main(_argv(server, project, tmp_path, "--dry-run", "--json", "--wandb-project", "spec"))
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert server.records == []
    out = json.loads(cap.out)
    steps = [r["step"] for r in out["requests"]]
    assert steps == ["dataset.create", "dataset.upload", "evaluation_dataset.create", "evaluation_dataset.upload",
                     "evaluator.create", "evaluator.get_upload_endpoint", "evaluator.upload_source",
                     "evaluator.validate_upload", "evaluator.get", "job.create"]
    job = out["requests"][-1]["json"]
    assert job["wandbConfig"]["apiKey"] == "***"
    assert job["trainingConfig"]["epochs"] == 1
    assert out["requests"][1]["multipart"]["file"]["rows"] == 6
    assert out["requests"][3]["multipart"]["file"]["rows"] == 24
    assert out["requests"][3]["multipart"]["file"]["filename"] == "ds-heldout.jsonl"
    assert any(line.startswith("firectl create reinforcement-fine-tuning-job") for line in out["firectl"])
    assert any(line.startswith("firectl create dataset spectrum-weak-scaffold-t1 ") for line in out["firectl"])
    _no_secrets(cap.out, cap.err, caplog.text)


def test_dry_run_matches_real_requests(server, project, tmp_path, env, capsys):
    """The dry run's JSON bodies are byte-for-byte what the real launch sends."""
    assert main(_argv(server, project, tmp_path, "--dry-run", "--json")) == 0
    dry = json.loads(capsys.readouterr().out)["requests"]
    assert main(_argv(server, project, tmp_path)) == 0
    real = [r for r in server.records]
    assert len(dry) == len(real)
    for d, r in zip(dry, real):
        assert d["method"] == r["method"]
        if "json" in d:
            assert d["json"] == json.loads(r["body"])
            assert d["url"] == server.url + r["path"]


def test_dry_run_needs_no_credentials(project, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("FIREWORKS_API_KEY", raising=False)
    monkeypatch.delenv("FIREWORKS_ACCOUNT_ID", raising=False)
    rc = main(["--arm", "icl", "--rows", "2", "--epochs", "2", "--project-dir", str(project), "--dry-run",
                  "--dataset-out", str(tmp_path / "d.jsonl"), "--tag", "x"])
    cap = capsys.readouterr()
    assert rc == 0
    assert "accounts/ACCOUNT_ID/datasets/spectrum-icl-x" in cap.out
    assert "placeholder" in cap.err


def test_missing_credentials_is_a_clear_error(project, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("FIREWORKS_API_KEY", raising=False)
    monkeypatch.setenv("FIREWORKS_ACCOUNT_ID", ACCOUNT)
    rc = main(["--arm", "icl", "--project-dir", str(project), "--dataset-out", str(tmp_path / "d.jsonl")])
    assert rc == 2
    assert "FIREWORKS_API_KEY is not set" in capsys.readouterr().err


def test_a_launch_names_every_missing_credential_at_once(project, tmp_path, monkeypatch, capsys):
    """Neither variable set: one line naming both (once it named the account id, and the key on the next try)."""
    monkeypatch.delenv("FIREWORKS_API_KEY", raising=False)
    monkeypatch.delenv("FIREWORKS_ACCOUNT_ID", raising=False)
    rc = main(["--arm", "icl", "--project-dir", str(project), "--dataset-out", str(tmp_path / "d.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "FIREWORKS_API_KEY and FIREWORKS_ACCOUNT_ID are not set" in err
    assert not (tmp_path / "d.jsonl").exists()


@pytest.mark.parametrize("name", ["qwen3-1p7b", "fireworks/qwen3-1p7b", "models/qwen3-1p7b"])
def test_a_base_model_without_its_account_path_is_refused_in_one_line(project, tmp_path, env, capsys, name):
    """Refused, not normalised (a bare name may be the catalogue's or the account's own model)."""
    rc = main(["--arm", "icl", "--project-dir", str(project), "--dry-run", "--base-model", name])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert f"--base-model {name!r}" in err and "accounts/fireworks/models/qwen3-1p7b" in err


def test_dry_runs_and_failed_launches_leave_no_dataset_file_unless_kept(project, tmp_path, env, monkeypatch, capsys):
    """Without --keep the dataset lives in a temporary folder for the command's time: a dry run and a launch that
    fails at the API leave nothing in the working folder (out/launch/) nor in the temp folder; --keep writes it."""
    import tempfile

    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    base = ["--arm", "icl", "--rows", "2", "--epochs", "1", "--tag", "k1", "--project-dir", str(project)]
    assert main([*base, "--dry-run"]) == 0
    assert "--keep writes out/launch/spectrum-icl-k1.jsonl" in capsys.readouterr().err
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    assert main([*base, "--base-url", f"http://127.0.0.1:{port}"]) == 1
    capsys.readouterr()
    assert list(work.rglob("*")) == [] and list(temp.rglob("*")) == []
    assert main([*base, "--dry-run", "--keep"]) == 0
    kept = work / "out" / "launch" / "spectrum-icl-k1.jsonl"
    assert kept.is_file() and len(kept.read_text().splitlines()) == 2


def test_arms_differ_only_in_prompt_and_memory_mode(project, tmp_path, env):
    """One command per arm, everything else equal: same row ids, same seeds (paired bands), same job."""
    plans = {}
    for arm in ("explicit-scaffold", "weak-scaffold", "scrambled-control", "notepad", "icl"):
        plan = _plan(["--arm", arm, "--rows", "2", "--epochs", "3", "--tag", "t",
                      "--project-dir", str(project), "--dry-run", "--dataset-out", str(tmp_path / f"{arm}.jsonl")])
        rows = [json.loads(x) for x in write_dataset(plan).read_text().splitlines()]
        plans[arm] = (plan, rows)
    ref_plan, ref_rows = plans["explicit-scaffold"]
    for arm, (plan, rows) in plans.items():
        ctx = [r["input_metadata"]["dataset_info"]["environment_context"] for r in rows]
        assert {(c["prompt"], c["memory_mode"]) for c in ctx} == {(ARMS[arm].prompt, ARMS[arm].memory_mode)}
        ref_ctx = [r["input_metadata"]["dataset_info"]["environment_context"] for r in ref_rows]
        assert [c["seed"] for c in ctx] == [c["seed"] for c in ref_ctx]
        assert [r["input_metadata"]["row_id"] for r in rows] == [r["input_metadata"]["row_id"] for r in ref_rows]
        strip = lambda j: {k: v for k, v in j.items() if k not in ("display_name", "evaluation_dataset")} | {  # noqa: E731
            "training_config": {k: v for k, v in j["training_config"].items() if k != "output_model"}}
        assert strip(plan.job_kwargs) == strip(ref_plan.job_kwargs)
        assert plan.evaluator_id == ref_plan.evaluator_id
        held = lambda p: [r["input_metadata"]["dataset_info"]["environment_context"]["seed"]  # noqa: E731
                          for r in p.eval_dataset]
        assert held(plan) == held(ref_plan) and len(held(plan)) == 24  # paired held-out bands too


def test_repeat_mode_and_overrides(project, tmp_path, env):
    plan = _plan([
        "--arm", "notepad", "--rows", "4", "--epochs", "5", "--epoch-mode", "repeat", "--tag", "r",
        "--project-dir", str(project), "--dry-run", "--dataset-out", str(tmp_path / "r.jsonl"),
        "--base-model", "accounts/x/models/m", "--learning-rate", "1e-4", "--temperature", "0.9",
        "--max-output-tokens", "512", "--response-candidates", "8", "--max-concurrent-rollouts", "32",
        "--loss", "DAPO", "--kl-beta", "0.01", "--lora-rank", "16", "--extra-body",
        '{"chat_template_kwargs": {"enable_thinking": false}}', "--entry", "rft"])
    assert plan.dataset_rows == 4 and plan.dataset_epochs == 1
    j = plan.job_kwargs
    assert j["training_config"] == {"base_model": "accounts/x/models/m", "epochs": 5, "learning_rate": 1e-4,
                                    "output_model": "spectrum-notepad-r", "lora_rank": 16}
    assert j["inference_parameters"] == {"temperature": 0.9, "max_output_tokens": 512,
                                         "response_candidates_count": 8,
                                         "extra_body": '{"chat_template_kwargs":{"enable_thinking":false}}'}
    assert j["loss_config"] == {"method": "DAPO", "kl_beta": 0.01}
    assert j["max_concurrent_rollouts"] == 32 and "chunk_size" not in j
    assert plan.entry == "test_spectrum_rft.py::test_spectrum_rft"
    assert any("repeat" in n for n in plan.notes)


def test_tarball_is_reproducible(project):
    files = source_files(project)
    assert build_tarball(project, files) == build_tarball(project, files)
    assert ".env" not in files and "local_only.txt" not in files
    with gzip.open(io.BytesIO(build_tarball(project, files))) as g:
        assert g.read()  # a valid gzip stream


def test_redaction_filter():
    rec = logging.LogRecord("fireworks._base_client", logging.DEBUG, "", 0, "body %s", ({"apiKey": FAKE_WANDB},),
                            None)
    Redact([FAKE_WANDB]).filter(rec)
    assert FAKE_WANDB not in rec.getMessage() and "***" in rec.getMessage()


def test_unreachable_api_is_reported(project, tmp_path, env, capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    rc = main(["--arm", "icl", "--rows", "1", "--epochs", "1", "--project-dir", str(project), "--tag", "u",
                  "--dataset-out", str(tmp_path / "u.jsonl"), "--base-url", f"http://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "FAILED at dataset.create: cannot reach the API" in err and "nothing was created." in err
    _no_secrets(err)


def test_build_plan_takes_typed_options_and_writes_nothing(project, tmp_path, env):
    """The plan is data: options in, rows and request bodies out; the dataset file is a separate step."""
    out = tmp_path / "typed.jsonl"
    plan = build_plan(LaunchOptions(arm="icl", rows=2, epochs=2, tag="typed", project_dir=str(project),
                                    dataset_out=str(out)))
    assert not out.exists()
    assert len(plan.dataset) == plan.dataset_rows == 4
    assert plan.source["files"] == source_files(project)
    assert [json.loads(x) for x in write_dataset(plan).read_text().splitlines()] == plan.dataset
    assert build_plan(LaunchOptions(arm="icl", project_dir=str(project), dataset_out=str(out),
                                    reuse_dataset="ds", reuse_evaluator=True)).dataset == []
    with pytest.raises(LaunchError, match="unknown arm"):
        build_plan(LaunchOptions(arm="nope", project_dir=str(project)))


@pytest.mark.parametrize(("name", "path"), [("turn", "turn"), ("rft", "mcp"), ("mcp", "mcp")])
def test_entry_names_come_from_the_one_entries_table(project, tmp_path, env, name, path):
    plan = build_plan(LaunchOptions(arm="icl", rows=1, epochs=1, tag="e", entry=name, dry_run=True,
                                    project_dir=str(project), dataset_out=str(tmp_path / "e.jsonl")))
    assert plan.entry == entry_spec(path)
    with pytest.raises(LaunchError, match="FILE.py::FUNCTION"):
        build_plan(LaunchOptions(arm="icl", entry="nonsense", project_dir=str(project)))


def test_a_tracked_secret_refuses_the_launch_before_any_request(server, project, tmp_path, env, capsys):
    write_files(project, {"spectrum_rft/settings.py": f'FIREWORKS_API_KEY = "{PLANTED_KEY}"\n'})
    git(project, "add", "spectrum_rft/settings.py")  # staged is tracked: it would go
    rc = main(_argv(server, project, tmp_path))
    cap = capsys.readouterr()
    assert rc == 2 and server.records == []
    assert len(cap.err.strip().splitlines()) == 1, cap.err
    assert "spectrum_rft/settings.py:1 (a value assigned to FIREWORKS_API_KEY)" in cap.err
    assert "git rm --cached" in cap.err and "Traceback" not in cap.err
    _no_secrets(cap.out, cap.err)


def test_the_resume_hint_reruns_as_printed(server, project, tmp_path, env, capsys):
    """A launch given --eval-rows fails after uploading its held-out rows: the printed hint says what its flags
    replace, and the command less those plus the printed flags passes the checks and resumes (the held-out rows
    are not uploaded twice)."""
    server.fail["job.create"] = (500, {"error": {"message": "quota exceeded"}})
    argv = _argv(server, project, tmp_path, "--eval-rows", "8")
    assert main(argv) == 1
    hint = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("to resume"))
    flags, _, drop = hint.split("rerun with: ", 1)[1].partition(", in place of ")
    assert drop == "--eval-rows 8"
    drop_at = argv.index("--eval-rows")
    rerun = argv[:drop_at] + argv[drop_at + len(drop.split()):] + flags.split()
    assert option_problems(options_from_args(build_parser().parse_args(rerun))) == []
    server.fail.clear()
    server.records.clear()
    assert main(rerun) == 0, capsys.readouterr().err
    assert [r["route"] for r in server.records] == ["evaluator.get", "job.create"]
    assert json.loads(server.records[-1]["body"])["evaluationDataset"] == \
        f"accounts/{ACCOUNT}/datasets/spectrum-weak-scaffold-t1-heldout"
