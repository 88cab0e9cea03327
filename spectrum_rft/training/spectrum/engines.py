"""Model engines: who computes the completions of ``scan-eval`` and ``serve-hf``, one class per backend.

An engine answers one question: given token prompts (rendered by the caller with the checkpoint's own chat
template), the completion of each (its tokens, the turn's stop token included when it ended, and whether it
ended), greedy at temperature 0, and, given ``tools``, under their tool-call grammar
(:func:`~spectrum_rft.training.spectrum.sampler.tool_call_grammar`: the grammar constrained training samples
with). Rendering, parsing (TRL's ``parse_response``) and judging stay with the callers, so engines differ only in
who computed the logits. Built-in (:data:`ENGINES`):

* ``transformers`` (:class:`TransformersEngine`): the checkpoint in float32 sampled by the sampler GRPO trains
  with (:class:`~spectrum_rft.training.spectrum.sampler.GroupSampler`): batches from a prefix the prompts share,
  prefilled once (:meth:`Engine.shared_prefix`); as a server's engine (``EngineOptions.server``), a greedy request
  decoded with drafts from the prefix it shares with the request before.
* ``vllm`` (:class:`~spectrum_rft.training.spectrum.vllm_engine.VllmEngine`): vLLM's offline engine, float32,
  the same grammar through vLLM's structured outputs; not a dependency (:func:`~spectrum_rft.training.spectrum.
  vllm_engine.vllm_missing` says how to get it).
* ``llama.cpp`` (:class:`~spectrum_rft.training.spectrum.llamacpp_engine.LlamaCppEngine`): the directory's GGUF
  weights in llama-cpp-python (the ``local`` extra), decoded by our own loop with the same grammar mask.

A new backend is one class with :meth:`Engine.complete` (and :meth:`Engine.shared_prefix`, a no-op where the
backend caches prefixes itself) registered with :func:`register_engine`: ``--engine NAME`` of both commands
then offers it (``tests/test_engines.py`` runs a test-only one through both), and so does the evaluator
(``spectrum-rft eval --model hf:DIR@NAME`` serves DIR with ``serve-hf --engine NAME`` for the run). The
evaluator's ``local`` model is llama.cpp's own OpenAI-compatible server (:mod:`spectrum_rft.tools.local_llm`),
which renders and parses with llama.cpp's chat format: a different model of the same weights, kept as the
product's reference small LLM; ``hf:smollm2@llama.cpp`` is those weights through this seam.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol, Sequence

from spectrum_rft.training.spectrum.llamacpp_engine import LlamaCppEngine, llamacpp_missing
from spectrum_rft.training.spectrum.sampler import GrammarError
from spectrum_rft.training.spectrum.vllm_engine import EVAL_MEMORY, VllmEngine, vllm_missing

Completion = tuple[list[int], bool]  # its tokens (the stop token included when it ended), whether it ended its turn


class Engine(Protocol):
    """What ``scan-eval`` and ``serve-hf`` ask of a backend."""

    name: str  # the backend (its registered name)

    @property
    def label(self) -> str:
        """Where it ran, for the records (the transformers engine's torch device; ``"vllm"``): read only."""

    def complete(self, prompts: Sequence[Sequence[int]], *, tools: Sequence[dict] | None = None,
                 temperature: float = 0.0, max_new_tokens: int = 256, seed: int = 0) -> list[Completion]:
        """One completion of each prompt; with ``tools``, under their tool-call grammar (an unbuildable one:
        :class:`GrammarError`); ``temperature`` 0 is greedy, otherwise sampled (top-p 1, no top-k) from
        ``seed``."""

    def shared_prefix(self, prompts: Sequence[Sequence[int]], *, tools: Sequence[dict] | None = None) -> ContextManager[None]:
        """While inside, completions of prompts that begin with the prefix these share may start from it
        (computed once); the completions are the same either way, up to float rounding."""


@dataclass(frozen=True)
class EngineOptions:
    """How an engine runs. ``threads``: torch threads (0: torch's default); ``device``: the transformers engine's
    torch device (None: CPU); ``vllm_memory``: the share of memory vLLM reserves; ``server``: the engine answers
    a server's requests one at a time (the transformers engine then decodes a greedy request with drafts from the
    prefix it shares with the request before)."""

    threads: int = 0
    device: Any = None
    vllm_memory: float = EVAL_MEMORY
    server: bool = False


@dataclass(frozen=True)
class EngineKind:
    """A registered backend: ``build(model_dir, tokenizer, options)`` and ``missing()`` (None when it can run
    here, else one line that says how to get it; asked before any model is loaded)."""

    build: Callable[[Path, Any, EngineOptions], Engine]
    missing: Callable[[], str | None] = lambda: None


class TransformersEngine:
    """A checkpoint in transformers (float32), sampled by :class:`GroupSampler`: one sampler per tool list (its
    grammar compiled once for the model's vocabulary), none for unconstrained completions."""

    name = "transformers"

    def __init__(self, model_dir: str | Path, tokenizer: Any, options: EngineOptions = EngineOptions(), *,
                 model: Any = None) -> None:
        import torch  # noqa: PLC0415

        from spectrum_rft.training.trl_common import load_model  # noqa: PLC0415

        if options.threads:
            torch.set_num_threads(options.threads)
        self.model = model if model is not None else load_model(Path(model_dir))
        if options.device is not None:
            self.model = self.model.to(options.device)
        self.model.eval()
        self.tok, self.server = tokenizer, options.server
        self.config = self.model.config
        self._samplers: dict[str | None, Any] = {}

    @property
    def label(self) -> str:
        return str(next(self.model.parameters()).device)

    def sampler(self, tools: Sequence[dict] | None = None) -> Any:
        """The :class:`GroupSampler` of ``tools`` (None: unconstrained), built once."""
        from spectrum_rft.training.spectrum.sampler import GroupSampler  # noqa: PLC0415

        key = None if tools is None else json.dumps(list(tools), sort_keys=True)
        if key not in self._samplers:
            try:
                self._samplers[key] = GroupSampler(self.tok, tools=[], grammar_tools=list(tools or []),
                                                   constrained=tools is not None, vocab_size=self.config.vocab_size)
            except Exception as e:  # noqa: BLE001 (a schema the grammar compiler refuses is the request's problem)
                raise GrammarError(f"cannot build the tool-call grammar of these tools: {e}") from e
        return self._samplers[key]

    def complete(self, prompts: Sequence[Sequence[int]], *, tools: Sequence[dict] | None = None,
                 temperature: float = 0.0, max_new_tokens: int = 256, seed: int = 0) -> list[Completion]:
        sampler = self.sampler(tools)
        sampler.max_new_tokens = max_new_tokens
        stops = set(sampler.stop_ids)
        if self.server and tools is None and temperature == 0 and len(prompts) == 1:
            ids = list(prompts[0])  # a server's greedy request: drafted, from the prefix it shares with the last
            sampler.remember(self.model, ids)
            new = sampler.greedy(self.model, ids)
            return [(new, bool(new) and new[-1] in stops)]
        comps = sampler.sample_each(self.model, [list(p) for p in prompts], temperature=temperature, seed=seed)[0]
        return [(c, bool(c) and c[-1] in stops) for c in comps]

    def shared_prefix(self, prompts: Sequence[Sequence[int]], *, tools: Sequence[dict] | None = None) -> ContextManager[None]:
        return self.sampler(tools).preamble(self.model, prompts)


ENGINES: dict[str, EngineKind] = {
    "transformers": EngineKind(lambda d, tok, o: TransformersEngine(d, tok, o)),
    "vllm": EngineKind(lambda d, tok, o: VllmEngine(d, tok, memory_fraction=o.vllm_memory), vllm_missing),
    "llama.cpp": EngineKind(lambda d, tok, o: LlamaCppEngine(d, tok, threads=o.threads), llamacpp_missing),
}
BUILT_IN = tuple(ENGINES)


def add_engine_flag(ap: Any) -> None:
    """``--engine`` on an argparse parser (scan-eval and serve-hf): the registered engines' names."""
    # no argparse choices: an unknown name is refused by engine_missing in one line (the commands check it first),
    # not by a usage block
    ap.add_argument("--engine", default="transformers", metavar="{" + ",".join(ENGINES) + "}",
                    help="who computes the completions: transformers (float32, the sampler GRPO trains with), vllm "
                         "(vLLM's offline engine, float32, the same grammar: the same greedy completions; vLLM must be "
                         "installed: docs/TRAINING.md), llama.cpp (the model directory's GGUF weights, the same "
                         "grammar; the local extra), or an engine registered with engines.register_engine")


def engine_missing(name: str) -> str | None:
    """None when engine ``name`` can run here; else one line that says why not (unknown, or not installed)."""
    try:
        return engine_kind(name).missing()
    except ValueError as e:  # unknown: engine_kind's one line
        return str(e)


def register_engine(name: str, kind: EngineKind) -> None:
    """Add a backend (a plugin, a test-only engine): ``--engine NAME`` of ``scan-eval`` and ``serve-hf`` builds it
    with ``kind.build`` (parsers built after this call list it). A built-in name cannot be replaced."""
    if name in BUILT_IN:
        raise ValueError(f"engine {name!r} is built in")
    ENGINES[name] = kind


def engine_kind(name: str) -> EngineKind:
    """The registered backend ``name``; an unknown name is an error in one line."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; one of {', '.join(ENGINES)}")
    return ENGINES[name]


def make_engine(name: str, model_dir: str | Path, tokenizer: Any, options: EngineOptions = EngineOptions()) -> Engine:
    """Backend ``name`` over ``model_dir`` (its tokenizer given: the caller renders with it)."""
    return engine_kind(name).build(Path(model_dir), tokenizer, options)
