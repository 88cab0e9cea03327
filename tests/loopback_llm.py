"""A real OpenAI-compatible chat-completions server on 127.0.0.1, scriptable per request.

Used by the rollout-path tests (fault injection) and by ``bench/bench_turn.py`` (an instantly answering
model). Nothing is mocked on the client side: litellm talks HTTP to it like to any hosted model::

    server = LoopbackLLM(responder=policy_responder("accumulate")).start()
    params = {"model": "openai/loopback", "api_base": server.base_url}   # needs OPENAI_API_KEY=dummy
    ...
    server.stop()

A *responder* is ``responder(request_json) -> (status, body, delay)``:

* ``status``: the HTTP status to send;
* ``body``: a dict (sent as JSON), ``str``/``bytes`` (sent verbatim: malformed JSON, HTML error pages), or
  ``None`` (the connection is closed without any response: a connection error);
* ``delay``: seconds to wait before answering (longer than the client's timeout = a timeout). A waiting
  request is released when the server stops, so a hang of minutes costs nothing after the test.
* a :class:`Trickle` body: the headers at once, then the body a byte at a time, ``every`` seconds apart (a
  reply that keeps a per-read timeout happy and never ends in time).

Helpers build the usual bodies (:func:`chat_response`, :func:`tool_call`) and a responder that plays a
scripted baseline policy (:func:`policy_responder`). ``python tests/loopback_llm.py --port 0 --policy
accumulate`` runs the server as its own process and prints ``PORT <n>`` once it listens; :func:`served_apart`
starts it so from another venv's tests (the verifiers and OpenEnv environments', whose parity tests need the
main venv's litellm for the policy).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

Reply = tuple[int, Any, float]
Responder = Callable[[dict], Reply]

_SCAN = re.compile(r"^Scan (\d+)/(\d+) \| band ", re.M)


# ------------------------------------------------------------------------------------------------
# Bodies
# ------------------------------------------------------------------------------------------------


def tool_call(name: str, arguments: Any, call_id: str | None = None) -> dict:
    """One OpenAI tool call; ``arguments`` that are not a string are JSON-encoded."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{uuid.uuid4().hex[:12]}", "type": "function",
            "function": {"name": name, "arguments": args}}


def chat_response(content: str | None = "", tool_calls: list[dict] | None = None,
                  finish_reason: str | None = None, model: str = "loopback", choices: list | None = None) -> dict:
    """A chat.completion body. ``choices=[]`` gives the empty-choices fault."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if choices is None:
        choices = [{"index": 0, "message": message,
                    "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}]
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices,
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


class Trickle:
    """A body sent a byte at a time, ``every`` seconds apart (headers first, with the full length)."""

    def __init__(self, body: dict, every: float = 0.5) -> None:
        self.data, self.every = json.dumps(body).encode(), every


def ok(body: dict, delay: float = 0.0) -> Reply:
    return 200, body, delay


# ------------------------------------------------------------------------------------------------
# Reading requests
# ------------------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def scan_number(request: dict) -> int | None:
    """The number (1-based) of the last scan shown in the request, or None."""
    for m in reversed(request.get("messages") or []):
        if m.get("role") in ("user", "tool"):
            hit = _SCAN.search(_text(m.get("content")))
            if hit:
                return int(hit.group(1))
    return None


def calls_this_scan(request: dict) -> int:
    """How many assistant messages follow the last scan message (the model calls already made on it)."""
    n = 0
    for m in reversed(request.get("messages") or []):
        if m.get("role") in ("user", "tool") and _SCAN.search(_text(m.get("content"))):
            return n
        if m.get("role") == "assistant":
            n += 1
    return n


# ------------------------------------------------------------------------------------------------
# Responders
# ------------------------------------------------------------------------------------------------


def policy_responder(policy: str = "accumulate", text: str = "", row: dict | None = None) -> Responder:
    """Answer like the scripted baseline ``policy`` of :mod:`spectrum_rft.baselines.policy_models` (same decisions
    as the ``spectrum/<policy>`` litellm model), optionally with some ``text`` in the assistant message.
    The privileged oracle needs ``row`` (``{"row_id", "dataset_info"}``: what a ``spectrum/`` model gets in
    its litellm metadata; an HTTP model never gets it)."""
    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from spectrum_rft.baselines import policy_models as spectrum_models  # noqa: PLC0415

    def respond(request: dict) -> Reply:
        said, calls = spectrum_models.decide(policy, request.get("messages") or [], request.get("tools"), row=row)
        tcs = [tool_call(c["name"], c["arguments"]) for c in calls]
        return ok(chat_response(text or said, tcs))

    return respond


def junk_responder(policy: str = "accumulate") -> Responder:
    """A model that misbehaves in every way the env must refuse, deterministically from what it is sent
    (the same answer to the same request on every path): on each scan its first call is a junk report,
    the second an unknown tool, the third a reply without tool calls; the fourth is ``policy``'s report on
    odd scans and junk again on even ones (so the call budget closes those scans as skipped)."""
    good = policy_responder(policy)

    def respond(request: dict) -> Reply:
        scan, k = scan_number(request) or 0, calls_this_scan(request)
        if k == 0:
            return ok(chat_response("", [tool_call("submit_report", {"center_freqs": "everywhere"})]))
        if k == 1:
            return ok(chat_response("", [tool_call("scan_again", {"band": "all"})]))
        if k == 2:
            return ok(chat_response("I would rather not say."))
        if scan % 2:
            return good(request)
        return ok(chat_response("", [tool_call("submit_report", {"freqs": [1, 2, 3]})]))

    return respond


def fault_responder(policy: str = "accumulate") -> Responder:
    """A model behind a flaky host, deterministically from what it is sent: every request while scan 3 is
    open gets an HTTP 500, every one while scan 5 is open a 200 without choices (so both scans are skipped
    once the tries run out), the other scans ``policy``'s report."""
    good = policy_responder(policy)

    def respond(request: dict) -> Reply:
        scan = scan_number(request)
        if scan == 3:
            return 500, {"error": {"message": "upstream overloaded", "type": "server_error"}}, 0.0
        if scan == 5:
            return ok(chat_response(choices=[]))
        return good(request)

    return respond


def dead_responder() -> Responder:
    """A host that answers every request with an HTTP 500: the model never answers."""
    return lambda request: (500, {"error": {"message": "upstream is down", "type": "server_error"}}, 0.0)


def sequence(*responders: Responder) -> Responder:
    """The i-th request goes to ``responders[i]``; the last one answers every later request."""
    lock = threading.Lock()
    count = [0]

    def respond(request: dict) -> Reply:
        with lock:
            i = min(count[0], len(responders) - 1)
            count[0] += 1
        return responders[i](request)

    return respond


# ------------------------------------------------------------------------------------------------
# The server
# ------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses connections, like with a real host
    server: "_Server"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # /v1/models, health checks
        self._send(200, {"object": "list", "data": [{"id": "loopback", "object": "model"}]})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
            return
        owner: LoopbackLLM = self.server.owner
        owner._note(request)
        owner.authorizations.add(self.headers.get("Authorization") or "")
        owner.headers_seen.add(self.headers.get("X-Api-Token") or "")
        try:
            status, body, delay = owner.responder(request)
        except Exception as e:  # a broken test responder must not look like a healthy server
            owner.errors.append(e)
            status, body, delay = 500, {"error": {"message": f"responder failed: {e!r}"}}, 0.0
        if delay and owner._stopping.wait(delay):
            self.close_connection = True  # the server is stopping: drop the hung request
            return
        if body is None:
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return
        self._send(status, body)

    def _send(self, status: int, body: Any) -> None:
        if isinstance(body, Trickle):
            self._trickle(status, body)
            return
        data = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else
                                                     json.dumps(body).encode())
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout) and closed the socket
            self.close_connection = True


    def _trickle(self, status: int, body: Trickle) -> None:
        stopping = self.server.owner._stopping
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body.data)))
            self.end_headers()
            self.wfile.flush()
            for i in range(len(body.data)):
                self.wfile.write(body.data[i:i + 1])
                self.wfile.flush()
                if stopping.wait(body.every):
                    break
        except OSError:  # the client gave up and closed the socket
            pass
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    owner: "LoopbackLLM"

    def handle_error(self, request: Any, client_address: Any) -> None:  # closed sockets are expected
        pass


class LoopbackLLM:
    """The server. ``responder`` may be replaced at any time (``server.responder = ...``)."""

    def __init__(self, responder: Responder | None = None, host: str = "127.0.0.1", port: int = 0,
                 record: bool = True):
        self.responder: Responder = responder or policy_responder()
        self.host, self.port = host, port
        self.record = record
        self.requests: list[dict] = []
        self.errors: list[BaseException] = []  # exceptions raised by the responder (answered with a 500)
        self.authorizations: set[str] = set()  # the Authorization headers the requests carried
        self.headers_seen: set[str] = set()  # their X-Api-Token headers (a credential sent as a header)
        self.count = 0
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # releases requests that are waiting out a delay

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``.../v1``) to pass as litellm's ``api_base``."""
        return f"http://{self.host}:{self.port}/v1"

    def completion_params(self, model: str = "loopback", **extra: Any) -> dict:
        """litellm completion params for this server (the API key comes from ``OPENAI_API_KEY``)."""
        return {"model": f"openai/{model}", "api_base": self.base_url, **extra}

    def _note(self, request: dict) -> None:
        with self._lock:
            self.count += 1
            if self.record:
                self.requests.append(request)

    def start(self) -> "LoopbackLLM":
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _Server((self.host, self.port), _Handler)
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"loopback-llm-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> "LoopbackLLM":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# the fault models of the parity tests: the accumulate policy as it is, or misbehaving (main()'s flags)
FAULT_MODELS: dict[str, list[str]] = {"accumulate": [], "junk": ["--junk"], "faults": ["--faults"], "dead": ["--dead"]}
MAIN_PYTHON = "SPECTRUM_MAIN_PYTHON"  # the main venv's python, named by the other venvs' test scripts


def main_python() -> str | None:
    """The main venv's python (``$SPECTRUM_MAIN_PYTHON``), None when it is not set; an error if it is missing."""
    py = os.environ.get(MAIN_PYTHON)
    if py and not Path(py).exists():
        raise FileNotFoundError(f"{MAIN_PYTHON}={py} does not exist")
    return py or None


@contextmanager
def served_apart(python: str, kind: str = "accumulate") -> Iterator[str]:
    """This server in a process of its own, run by ``python`` (a venv with the project and litellm), serving
    the accumulate policy as fault model ``kind`` (:data:`FAULT_MODELS`); yields its base URL."""
    args = [python, __file__, "--port", "0", "--policy", "accumulate", *FAULT_MODELS[kind]]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
                            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    try:
        line = proc.stdout.readline() if proc.stdout is not None else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the loopback model did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Serve a scripted policy as an OpenAI-compatible chat API.")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--policy", default="accumulate")
    ap.add_argument("--junk", action="store_true", help="misbehave first on every scan (junk_responder)")
    ap.add_argument("--faults", action="store_true", help="HTTP 500s on scan 3, empty replies on scan 5 (fault_responder)")
    ap.add_argument("--dead", action="store_true", help="HTTP 500 for every request (dead_responder)")
    a = ap.parse_args(argv)
    responder = (dead_responder() if a.dead else fault_responder(a.policy) if a.faults else
                 junk_responder(a.policy) if a.junk else policy_responder(a.policy))
    server = LoopbackLLM(responder, port=a.port, record=False).start()
    print(f"PORT {server.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
