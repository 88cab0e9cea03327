"""Issue 44: ``serve-hf`` logs every request on one line, and ``spectrum-rft smoke`` runs the whole local path
(sft -> one GRPO step -> serve-hf -> a 1-row eval) with ``configs/train/smoke.toml``, one line per stage."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from spectrum_rft.training.spectrum import smoke
from spectrum_rft.training.spectrum.serve import make_server

ROOT = Path(__file__).resolve().parent.parent


class Canned:
    """A stand-in for HfChatModel: one reply cut off at max_tokens, or a refusal."""

    def complete(self, body: dict) -> dict:
        if not body.get("messages"):
            from spectrum_rft.training.spectrum.serve import BadRequest

            raise BadRequest("messages must be a non-empty list")
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 601, "completion_tokens": 64, "total_tokens": 665}}


def test_serve_hf_logs_each_request_on_one_line(capsys):
    server = make_server(Canned(), "spectrum-hf")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"

    def post(body: dict) -> int:
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    try:
        assert post({"messages": [{"role": "user", "content": "hi"}]}) == 200
        assert post({"messages": []}) == 400
    finally:
        server.shutdown()
        server.server_close()
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("serve-hf: request")]
    assert len(err) == 2, err
    assert "601 prompt tokens" in err[0] and "64 completion tokens" in err[0] and "finish_reason=length" in err[0]
    assert err[0].split(", ")[2].endswith(" s")  # the seconds it took
    assert err[1].startswith("serve-hf: request 400") and "messages must be a non-empty list" in err[1]


class Slow(Canned):
    def __init__(self) -> None:
        self.started = threading.Event()

    def complete(self, body: dict) -> dict:
        self.started.set()
        import time

        time.sleep(0.5)  # the client is gone by now
        return super().complete(body)


def test_serve_hf_says_in_one_line_when_the_client_did_not_wait(capsys):
    """A client that gave up (its timeout shorter than the reply took) gets no traceback in the server's log:
    the request's line and one line saying the reply was not delivered; the server goes on serving."""
    import socket
    import struct

    model = Slow()
    server = make_server(model, "spectrum-hf")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert model.started.wait(10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, as a killed client
        s.close()
        import time

        err, deadline = "", time.monotonic() + 10
        while "not delivered" not in err and time.monotonic() < deadline:
            time.sleep(0.1)
            err += capsys.readouterr().err
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:  # still serving
            assert r.status == 200
    finally:
        server.shutdown()
        server.server_close()
    err += capsys.readouterr().err
    assert "serve-hf: request 200" in err and "the client had gone" in err and "Traceback" not in err, err


def test_smoke_config_is_refused_in_one_line(tmp_path, capsys):
    bad = tmp_path / "s.toml"
    bad.write_text('[train]\nmodel = "x"\n')
    assert smoke.main(["--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[train] sets model" in err
    bad.write_text('[trian]\nsteps = 1\n')
    assert smoke.main(["--config", str(bad)]) == 2 and "unknown tables trian" in capsys.readouterr().err
    assert smoke.stage_flags({"steps": 1, "constrained": True, "use_cpu": False, "param": ["a=1", "b=2"]}, "train") == [
        "--steps", "1", "--constrained", "--no-use-cpu", "--param", "a=1", "--param", "b=2"]
    assert not (tmp_path / "o").exists()


def test_smoke_runs_every_stage(tmp_path, capsys, monkeypatch):
    """The issue's CI check: the smoke config end to end (a few minutes on 2 cores; the times are printed)."""
    pytest.importorskip("trl")
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    out = tmp_path / "smoke"
    rc = smoke.main(["--config", str(ROOT / "configs" / "train" / "smoke.toml"), "--out", str(out)])
    printed = capsys.readouterr()
    with capsys.disabled():
        print("\n" + printed.out)
    assert rc == 0, printed.err
    stages = [x.split()[1] for x in printed.out.splitlines() if x.startswith("smoke: ") and x.split()[2].replace(".", "").isdigit()]
    assert stages == ["sft", "train", "serve-hf", "eval", "total"], printed.out
    assert (out / "sft" / "model" / "config.json").is_file() and (out / "grpo" / "model" / "config.json").is_file()
    rollouts = (out / "grpo" / "rollouts.jsonl").read_text().splitlines()
    assert len(rollouts) == 2  # one GRPO step of one group of 2
    requests = [x for x in (out / "serve-hf.log").read_text().splitlines() if x.startswith("serve-hf: request 200")]
    assert len(requests) >= 12  # a whole episode: a request per scan, each logged
    summary = json.loads((out / "eval" / "summary.json").read_text())
    m = summary["models"]["openai/spectrum-hf"]
    assert m["rows_errored"] == 0 and m["scans_total"] == 12, m
    for stage, folder in (("sft", "sft"), ("train", "grpo")):  # the libraries' warnings: the run's log, not the output
        said = (out / f"{stage}.log").read_text()
        assert "FutureWarning" not in said and "Loading weights" not in said, said[-2000:]
        assert "training: steps 1-1 started" in said or stage == "sft"
        assert "FutureWarning" in (out / folder / "warnings.log").read_text()  # transformers' deprecations: kept
    record = json.loads((out / "smoke.json").read_text())
    assert set(record["stages"]) == {"sft", "train", "serve-hf", "eval"} and record["requests"] == len(requests)
