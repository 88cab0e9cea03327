"""The GRPO sampler of scan episodes: one prefill per group and, optionally, tool calls that always parse.

``spectrum-rft train --sampler group`` hands TRL 1.16's public ``rollout_func`` hook a
:class:`GroupSampler`. TRL gives it the step's prompts, each repeated ``num_generations`` times in a row
(its ``RepeatSampler``); the sampler renders each distinct prompt once with the chat template and the
env's tools, prefills it once, copies the prompt's KV cache to the G completions
(``DynamicCache.batch_repeat_interleave``) and samples them together with ``model.generate`` (the
trainer's own temperature, top-p, top-k). What it returns (``prompt_ids``, ``completion_ids``, the
sampled tokens' log-probs) is what TRL's learner then scores, exactly as for its own generation.

**Constrained** (``--constrained``): an xgrammar logits processor (xgrammar's Hugging Face
``LogitsProcessor``, the library vLLM itself uses for structured outputs) masks every token that
would leave the grammar of one tool call as the chat template writes it::

    <tool_call>\\n{"name": "submit_report", "arguments": {...}}\\n</tool_call><|im_end|>

The ``arguments`` follow the env's own :func:`spectrum_rft.task.environment.tool_schemas` (one
definition: the array of in-band numbers; bandwidths only on presets that read them), compact JSON
with ``json.dumps``' separators (what the template's ``tojson`` writes, so the call reads as in SFT). The
model still chooses every number and how many. The grammar does not hide what the model must learn to
avoid: a list may run :data:`OVER_CAP` item past the region cap, so a report over the cap is sampled, the
env refuses it and the scan is scored as skipped (0); only then does the grammar close the list.

What the learner trains (``spectrum-rft train --learner``, docs/TRAINING.md): ``masked`` (default) replays
the grammar's masks (:class:`GrammarMasks`) into the learner's log-softmax, so the learner is the policy
that sampled: its log-prob of each sampled token equals this sampler's, and a token the grammar forced
(the tags, the name, a bracket) has log-prob 0 and no gradient. ``unmasked`` trains the model's own
unconstrained log-probs (TRL's learner): forced tokens are trained as if the model had chosen them. The
sampled tokens' log-probs this sampler reports are under the constrained, tempered distribution; the
trainer logs both policies' importance ratios to them.

The episode is one model turn: the first completion is the rollout (a scan episode ends with its first
scored report; a completion that writes no valid call leaves the scan skipped, scored as an empty report).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from spectrum_rft.training.trl_common import kv_cache_arg, kv_cache_of

TOOL_CALL_OPEN = "<tool_call>\n"  # how trl's chatml tool template (qwen2_5_chat_template) opens a call ...
TOOL_CALL_CLOSE = "\n</tool_call>"  # ... and closes it


OVER_CAP = 1  # items a list may run past the env's cap under the grammar (the env refuses them; see below)
MIN_PREAMBLE = 16  # tokens a step's prompts must share before their common preamble is prefilled once
DRAFT = 16  # tokens a greedy reply's draft proposes at most (:meth:`GroupSampler.greedy`)


def _past_cap(params: dict, over: int) -> dict:
    """``params`` (a tool's JSON schema) with every array's ``maxItems`` raised by ``over``."""
    props = {}
    for name, prop in params.get("properties", {}).items():
        if over and isinstance(prop, dict) and "maxItems" in prop:
            prop = {**prop, "maxItems": prop["maxItems"] + over}
        props[name] = prop
    return {**params, "properties": props}


class GrammarError(ValueError):
    """The tool-call grammar of some tools could not be built (a schema the grammar compiler refuses)."""


def tool_call_schema(tools: Sequence[dict], *, over_cap: int = OVER_CAP) -> dict:
    """JSON schema of one call ``{"name": ..., "arguments": {...}}`` of any of ``tools`` (OpenAI function
    schemas, e.g. :func:`spectrum_rft.task.environment.tool_schemas`), whose lists may run ``over_cap``
    items past the tools' ``maxItems`` (the env, not the grammar, refuses a report over the cap)."""
    if over_cap < 0:
        raise ValueError(f"over_cap must be >= 0, got {over_cap}")
    calls = []
    for t in tools:
        fn = t["function"]
        params = _past_cap(fn.get("parameters", {"type": "object", "properties": {}}), over_cap)
        calls.append({"type": "object",
                      "properties": {"name": {"const": fn["name"]},
                                     "arguments": {**params, "additionalProperties": False}},
                      "required": ["name", "arguments"], "additionalProperties": False})
    if not calls:
        raise ValueError("no tools to constrain to")
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def tool_call_grammar(tools: Sequence[dict], *, over_cap: int = OVER_CAP) -> str:
    """The EBNF grammar (xgrammar's dialect, which vLLM's structured outputs take too) of one tool call as
    the chat template writes it, between ``<tool_call>`` tags (lists up to ``over_cap`` items past the cap)."""
    import xgrammar as xgr  # noqa: PLC0415

    call = xgr.Grammar.from_json_schema(json.dumps(tool_call_schema(tools, over_cap=over_cap)), any_whitespace=False,
                                        separators=(", ", ": "))
    grammar = xgr.Grammar.concat(xgr.Grammar.from_ebnf(f"root ::= {json.dumps(TOOL_CALL_OPEN)}"), call,
                                 xgr.Grammar.from_ebnf(f"root ::= {json.dumps(TOOL_CALL_CLOSE)}"))
    return str(grammar)


def stop_ids(tokenizer: Any) -> list[int]:
    """The tokens that end an assistant turn (chatml's ``<|im_end|>``, and the tokenizer's eos)."""
    ids = {tokenizer.eos_token_id}
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return sorted(i for i in ids if i is not None)


def compile_grammar(tokenizer: Any, grammar: str, vocab_size: int) -> Any:
    """xgrammar's compiled ``grammar`` (a :func:`tool_call_grammar`) for ``tokenizer`` (a turn ends at
    :func:`stop_ids`), over the model's ``vocab_size`` logits."""
    import xgrammar as xgr  # noqa: PLC0415

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_ids(tokenizer))
    return xgr.GrammarCompiler(info).compile_grammar(grammar)


class GrammarMasks:
    """The masks a constrained sampler applied, replayed for the learner (``ScoreCentringGRPOTrainer(
    grammar_masks=...)``): for each trained completion token, which tokens the grammar allowed there.

    xgrammar's matcher is deterministic, so feeding it a completion's tokens one by one reproduces the
    bitmask the sampler's logits processor (xgrammar's for transformers, vLLM's structured outputs) applied
    when each token was sampled. Each run of consecutive trained positions is one model turn, sampled under
    the grammar from its start: a turn after a tool result (TRL's env path, ``tool_mask``) starts a fresh
    matcher. A position from a token the grammar refuses on (a turn the grammar did not produce) allows
    every token: such turns are counted in :attr:`refused` and trained as the unconstrained policy."""

    def __init__(self, compiled_grammar: Any, vocab_size: int) -> None:
        self.compiled_grammar = compiled_grammar
        self.vocab_size = vocab_size
        self.refused = 0  # turns with a token the grammar refuses

    @classmethod
    def for_tools(cls, tokenizer: Any, tools: Sequence[dict], vocab_size: int) -> "GrammarMasks":
        """The masks of the tool-call grammar of ``tools`` (what vLLM's structured outputs get in training)."""
        return cls(compile_grammar(tokenizer, tool_call_grammar(tools), vocab_size), vocab_size)

    def __call__(self, completion_ids: Any, mask: Any) -> Any:
        """Allowed tokens ``[N, vocab]`` (bool) at the ``N`` positions where ``mask`` (``[B, T]``: the trained
        positions) is set, in row-major order (the order of ``completion_ids[mask]``)."""
        import torch  # noqa: PLC0415
        import xgrammar as xgr  # noqa: PLC0415

        keep = mask.bool().tolist()
        n = sum(map(sum, keep))
        packed = torch.full((n, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)  # -1: every token allowed
        at = 0
        for ids, row in zip(completion_ids.tolist(), keep):
            matcher, live = None, False
            for tok, k in zip(ids, row):
                if not k:
                    matcher = None  # a tool result (or padding): the next trained token opens a new turn
                    continue
                if matcher is None:
                    matcher, live = xgr.GrammarMatcher(self.compiled_grammar), True
                if live and not matcher.is_terminated():
                    matcher.fill_next_token_bitmask(packed, at)
                    if not matcher.accept_token(tok):
                        packed[at] = -1
                        live = False
                        self.refused += 1
                at += 1
        packed = packed.to(completion_ids.device)
        bits = (packed.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32, device=packed.device)) & 1
        return bits.reshape(n, -1)[:, :self.vocab_size].bool()


def _shared_length(seqs: Sequence[Sequence[int]], limit: int) -> int:
    """How many leading tokens every one of ``seqs`` has in common, at most ``limit``."""
    first = seqs[0]
    return next((i for i in range(max(limit, 0)) if any(s[i] != first[i] for s in seqs[1:])), max(limit, 0))


def _lookup(tokens: list[int], reference: list[int], k: int, longest: int = 3) -> list[int]:
    """Up to ``k`` tokens that followed, in ``reference``, the latest occurrence of the longest tail of
    ``tokens`` (``longest`` tokens down to one) found there; [] when none is."""
    if k <= 0 or not reference:
        return []
    for n in range(min(longest, len(tokens)), 0, -1):
        tail = tokens[-n:]
        for i in range(len(reference) - n - 1, -1, -1):
            if reference[i:i + n] == tail:
                return reference[i + n:i + n + k]
    return []


@dataclass
class SamplerStats:
    """What the sampler ran through the model in its last call (read by tests and benchmarks)."""

    groups: int = 0
    prefill_tokens: int = 0  # prompt tokens run through the model (one prefill per group)
    completion_tokens: int = 0


class GroupSampler:
    """TRL ``rollout_func``: each distinct prompt prefilled once, its G completions sampled together, under
    the tool-call grammar when ``constrained``.

    ``tools`` are the schemas the chat template renders (what the model reads: TRL's rendering of the
    adapter's tool methods, as in SFT and the env path); ``grammar_tools`` the env's own
    :func:`~spectrum_rft.task.environment.tool_schemas` the grammar is built from.

    ``batch_groups``: the groups of one TRL call are sampled as one left-padded batch (every completion's
    prompt prefilled on its own) instead of one group after another, each prefilled once. The same
    distribution; on a GPU, where a decode step costs the same for 8 rows or 16, half the decode steps for
    two groups; on a CPU, G times the prefill work (keep it off there).

    ``share_preamble``: within one call (one training step, one model), the token prefix every distinct prompt
    shares (the system prompt and the tool preamble: ~70 % of a scan episode's prompt) is prefilled once and its
    KV cache copied into each prompt's prefill (:meth:`preamble`), so a prompt's own prefill runs only its scan,
    and the step's groups are sampled as one batch (:meth:`sample_each`: on a CPU a decode step reads every
    weight whether it decodes 8 rows or 16). The same distribution, up to float rounding of a prefill cut in two."""

    def __init__(self, tokenizer: Any, *, tools: Sequence[dict], grammar_tools: Sequence[dict] | None = None,
                 constrained: bool = False, max_new_tokens: int = 160, vocab_size: int | None = None,
                 batch_groups: bool = False, share_preamble: bool = True) -> None:
        self.tokenizer = tokenizer
        self.batch_groups = batch_groups
        self.share_preamble = share_preamble
        self._preamble: tuple[list[int], Any] | None = None  # (its tokens, their KV cache) while one is active
        self._reference: list[int] = []  # the last greedy reply (with the prompt's last tokens): :meth:`greedy`'s drafts
        self._last_prompt: list[int] | None = None  # :meth:`remember`'s previous prompt
        self.tools = list(tools)
        self.constrained = constrained
        self.max_new_tokens = max_new_tokens
        self.stats = SamplerStats()
        self.vocab_size = vocab_size or len(tokenizer)
        self.grammar_tools = list(grammar_tools or tools)  # whose tool-call grammar a constrained sample follows
        self.grammar = tool_call_grammar(self.grammar_tools) if constrained else None
        self.compiled_grammar = compile_grammar(tokenizer, self.grammar, self.vocab_size) if self.grammar else None

    def grammar_masks(self) -> GrammarMasks:
        """The masks this sampler applies, for the learner (constrained samplers only)."""
        if self.compiled_grammar is None:
            raise ValueError("an unconstrained sampler applies no grammar masks")
        return GrammarMasks(self.compiled_grammar, self.vocab_size)

    @property
    def stop_ids(self) -> list[int]:
        """The tokens that end an assistant turn (:func:`stop_ids`)."""
        return stop_ids(self.tokenizer)

    def prompt_ids(self, prompt: list[dict]) -> list[int]:
        """A chat prompt as the model reads it: the chat template with the tools and the generation prompt."""
        out = self.tokenizer.apply_chat_template(prompt, tools=self.tools, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
        return list(out["input_ids"] if isinstance(out, dict) else out)

    def sample(self, model: Any, prompt_ids: list[int], n: int, *, temperature: float = 1.0, top_p: float = 1.0,
               top_k: int | None = None, seed: int | None = None) -> tuple[list[list[int]], list[list[float]]]:
        """``n`` completions of one prompt, prefilled once: their token ids (up to and including the stop
        token) and each sampled token's log-probability under the sampling distribution (tempered, top-p/k,
        grammar). ``temperature`` 0: greedy."""
        import torch  # noqa: PLC0415

        if len(prompt_ids) < 2:
            raise ValueError("a prompt needs at least 2 tokens")
        device = next(model.parameters()).device
        ids = torch.tensor([prompt_ids], device=device)
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            cache = self._prefill(model, list(prompt_ids[:-1]))  # the one prefill of the group
            cache.batch_repeat_interleave(n)
            out = self._generate(model, ids.expand(n, -1), torch.ones(n, ids.shape[1], dtype=torch.long, device=device),
                                 cache, temperature, top_p, top_k)
        return self._completions(out, ids.shape[1])

    @contextlib.contextmanager
    def preamble(self, model: Any, prompts_ids: Sequence[Sequence[int]]) -> Iterator[None]:
        """While inside: the prefix the distinct ``prompts_ids`` share (at least :data:`MIN_PREAMBLE` tokens,
        short of every prompt's last token) prefilled once with ``model``; :meth:`sample` and
        :meth:`sample_each` start each prefill from a copy of its KV cache. Nested, the outer one stays (one step,
        one model); off with ``share_preamble=False`` or fewer than two distinct prompts. The model must not
        change inside (a training step's sampling: the optimiser steps after)."""
        distinct = [list(p) for p in {tuple(p) for p in prompts_ids}]
        if self._preamble is not None or not self.share_preamble or len(distinct) < 2:
            yield
            return
        if not self._hold(model, distinct[0], _shared_length(distinct, len(min(distinct, key=len)) - 1)):
            yield
            return
        try:
            yield
        finally:
            self._preamble = None

    def remember(self, model: Any, prompt_ids: Sequence[int]) -> None:
        """For a model that does not change (a server: ``serve-hf``): the prefix this prompt shares with the one
        before becomes the preamble, prefilled once and kept while later prompts begin with it (an evaluation's
        requests share the system prompt and the tools), so each request's prefill runs its own part only."""
        last, self._last_prompt = self._last_prompt, list(prompt_ids)
        if self._preamble is not None and list(prompt_ids[:len(self._preamble[0])]) == self._preamble[0]:
            return
        if last is not None:
            self._hold(model, prompt_ids, _shared_length([last, prompt_ids], min(len(last), len(prompt_ids) - 2)))

    def _hold(self, model: Any, prompt_ids: Sequence[int], length: int) -> bool:
        """The first ``length`` tokens of ``prompt_ids`` prefilled as the preamble (none under :data:`MIN_PREAMBLE`)."""
        import torch  # noqa: PLC0415

        if length < MIN_PREAMBLE:
            return False
        tokens = list(prompt_ids[:length])
        with torch.no_grad():
            cache = kv_cache_of(model(input_ids=torch.tensor([tokens], device=next(model.parameters()).device),
                                      use_cache=True, logits_to_keep=1))
        self.stats.prefill_tokens += length
        self._preamble = (tokens, cache)
        return True

    def _reused(self, prompts_ids: Sequence[Sequence[int]]) -> tuple[int, Any]:
        """How many leading tokens of every prompt in ``prompts_ids`` the active preamble holds (leaving each
        prompt at least two of its own; 0 under :data:`MIN_PREAMBLE`), and a copy of its KV cache cut to them
        (None at 0)."""
        if self._preamble is None:
            return 0, None
        tokens, cache = self._preamble
        n = _shared_length([tokens, *prompts_ids], min(len(tokens), *(len(p) - 2 for p in prompts_ids)))
        if n < MIN_PREAMBLE:
            return 0, None
        cache = copy.deepcopy(cache)
        if len(tokens) > n:
            cache.crop(n - len(tokens))  # a negative count: the tokens removed from the end
        return n, cache

    def _prefill(self, model: Any, ids: list[int]) -> Any:
        """The KV cache of ``ids`` (one sequence): the active preamble's copy for what it holds of them, plus the rest."""
        import torch  # noqa: PLC0415

        n, cache = self._reused([ids])
        self.stats.prefill_tokens += len(ids) - n
        return kv_cache_of(model(input_ids=torch.tensor([ids[n:]], device=next(model.parameters()).device),
                                 use_cache=True, logits_to_keep=1, **{kv_cache_arg(model): cache}))

    def greedy(self, model: Any, prompt_ids: list[int]) -> list[int]:
        """One greedy completion of one prompt (the own prefix's plays), decoded with drafts: the tokens that
        followed the same last few tokens in this sampler's previous greedy reply (the call's boilerplate, the
        numbers it wrote) are proposed and checked in one forward, and the longest run the model's argmax
        agrees with is kept, so the reply is the model's greedy reply and a forward often adds several tokens
        (decoding one token at a time on a CPU reads every weight per token). Unconstrained samplers only; under
        the grammar: :meth:`sample` at temperature 0."""
        import torch  # noqa: PLC0415

        if self.compiled_grammar is not None:
            return self.sample(model, prompt_ids, 1, temperature=0.0)[0][0]
        device = next(model.parameters()).device
        stops, last = set(self.stop_ids), prompt_ids[-1]
        out: list[int] = []
        context = list(prompt_ids[-4:])
        with torch.no_grad():
            cache = self._prefill(model, list(prompt_ids[:-1]))
            while len(out) < self.max_new_tokens:
                draft = _lookup(context + out, self._reference, min(DRAFT, self.max_new_tokens - len(out) - 1))
                logits = model(input_ids=torch.tensor([[last, *draft]], device=device), use_cache=True,
                               **{kv_cache_arg(model): cache}).logits
                best = logits[0].argmax(-1).tolist()
                n = next((i for i, t in enumerate(draft) if best[i] != t), len(draft))
                if n < len(draft):
                    cache.crop(n - len(draft))  # the refused draft tokens leave the cache
                new = draft[:n] + [best[n]]
                stop = next((i for i, t in enumerate(new) if t in stops), None)
                out += new if stop is None else new[:stop + 1]
                last = new[-1]
                if stop is not None:
                    break
        out = out[:self.max_new_tokens]
        self._reference = context + out
        self.stats.completion_tokens += len(out)
        return out

    def sample_each(self, model: Any, prompts_ids: list[list[int]], n: int = 1, *, temperature: float = 0.0,
                    top_p: float = 1.0, top_k: int | None = None,
                    seed: int | None = None) -> tuple[list[list[int]], list[list[float]]]:
        """``n`` completions of each prompt (in order: the first prompt's ``n``, then the next's), as one batch:
        the own prefix's plays (one scan of every row, greedy), a step's groups, an evaluation's rows. Under an
        active :meth:`preamble` each prompt is the part the preamble holds, padding, then its own part, so every
        prompt ends in the last column; the preamble's cache is copied, each prompt's own part prefilled once and
        its cache repeated ``n`` times. Without one: :meth:`sample_prompts` (``n`` = 1, left-padded) or
        :meth:`sample` prompt by prompt. Completions and log-probs as :meth:`sample`'s."""
        import torch  # noqa: PLC0415

        shared, cache = self._reused(prompts_ids)
        if cache is None:
            if n == 1:
                return self.sample_prompts(model, prompts_ids, temperature=temperature, top_p=top_p, top_k=top_k,
                                           seed=seed)
            comps, lps = [], []
            for i, p in enumerate(prompts_ids):
                c, lp = self.sample(model, p, n, temperature=temperature, top_p=top_p, top_k=top_k,
                                    seed=None if seed is None else seed + i)
                comps += c
                lps += lp
            return comps, lps
        device = next(model.parameters()).device
        head, own = list(prompts_ids[0][:shared]), [list(p[shared:]) for p in prompts_ids]
        width, pad = max(len(o) for o in own), self.tokenizer.pad_token_id
        ids = torch.tensor([head + [pad] * (width - len(o)) + o for o in own], device=device)
        mask = torch.tensor([[1] * shared + [0] * (width - len(o)) + [1] * len(o) for o in own], device=device)
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            cache.batch_repeat_interleave(len(own))
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # the padding takes no position
            model(input_ids=ids[:, shared:-1], attention_mask=mask[:, :-1], position_ids=positions[:, shared:-1],
                  use_cache=True, logits_to_keep=1, **{kv_cache_arg(model): cache})
            if n > 1:
                cache.batch_repeat_interleave(n)
                ids, mask = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0)
            out = self._generate(model, ids, mask, cache, temperature, top_p, top_k)
        self.stats.prefill_tokens += sum(len(o) - 1 for o in own)
        return self._completions(out, ids.shape[1])

    def sample_prompts(self, model: Any, prompts_ids: list[list[int]], *, temperature: float = 1.0, top_p: float = 1.0,
                       top_k: int | None = None, seed: int | None = None) -> tuple[list[list[int]], list[list[float]]]:
        """One completion of each of several prompts, sampled as one left-padded batch (evaluation)."""
        import torch  # noqa: PLC0415

        device = next(model.parameters()).device
        width = max(len(p) for p in prompts_ids)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts_ids], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts_ids], device=device)
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            out = self._generate(model, ids, mask, None, temperature, top_p, top_k)
        self.stats.prefill_tokens += sum(len(p) for p in prompts_ids)
        return self._completions(out, width)

    def _generate(self, model: Any, ids: Any, mask: Any, cache: Any, temperature: float, top_p: float,
                  top_k: int | None) -> Any:
        from transformers import GenerationConfig, LogitsProcessorList  # noqa: PLC0415

        processors = LogitsProcessorList()
        if self.compiled_grammar is not None:
            from xgrammar.contrib.hf import LogitsProcessor  # noqa: PLC0415

            processors.append(LogitsProcessor(self.compiled_grammar))  # one per generate() call (xgrammar's rule)
        sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": top_k or None} \
            if temperature > 0 else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        config = GenerationConfig(**sampling, max_new_tokens=self.max_new_tokens, eos_token_id=self.stop_ids,
                                  pad_token_id=self.tokenizer.pad_token_id, output_scores=True,
                                  return_dict_in_generate=True)
        extra = {kv_cache_arg(model): cache} if cache is not None else {}
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config, logits_processor=processors,
                              **extra)

    def _completions(self, out: Any, prompt_len: int) -> tuple[list[list[int]], list[list[float]]]:
        import torch  # noqa: PLC0415

        new = out.sequences[:, prompt_len:]
        taken = torch.stack([torch.log_softmax(s.float(), dim=-1).gather(-1, new[:, t:t + 1]).squeeze(-1)
                             for t, s in enumerate(out.scores)], dim=1)  # (n, T): the sampled tokens only
        stops = set(self.stop_ids)
        completions, logprobs = [], []
        for row, lp in zip(new.tolist(), taken.tolist()):
            end = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
            completions.append(row[:end])
            logprobs.append(lp[:end])
        self.stats.completion_tokens += sum(len(c) for c in completions)
        return completions, logprobs

    def __call__(self, prompts: list[list[dict]], trainer: Any) -> dict:
        model = trainer.accelerator.unwrap_model(trainer.model)
        args = trainer.args
        self.stats = SamplerStats()
        groups: list[tuple[list[int], int]] = []  # (prompt ids, completions) of each run of equal prompts
        i = 0
        while i < len(prompts):
            j = i + 1
            while j < len(prompts) and prompts[j] == prompts[i]:
                j += 1
            groups.append((self.prompt_ids(prompts[i]), j - i))
            i = j
        prompt_ids = [ids for ids, n in groups for _ in range(n)]
        sampling = {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k}
        if self.batch_groups and len(groups) > 1:
            completion_ids, logprobs = self.sample_prompts(model, prompt_ids, **sampling)
        else:
            completion_ids, logprobs = [], []
            with self.preamble(model, [ids for ids, _ in groups]):
                if self._preamble is not None and len({n for _, n in groups}) == 1:
                    # the groups as one batch: the shared preamble once, each prompt's own part once
                    completion_ids, logprobs = self.sample_each(model, [ids for ids, _ in groups], groups[0][1],
                                                                **sampling)
                else:
                    for ids, n in groups:
                        comps, lps = self.sample(model, ids, n, **sampling)
                        completion_ids += comps
                        logprobs += lps
        self.stats.groups += len(groups)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}
