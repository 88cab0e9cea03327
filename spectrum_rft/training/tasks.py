"""The home-made trainer's task: GSM8K (exact match, :mod:`.gsm8k`). The spectrum task trains on TRL
(:mod:`.trl_run`); this trainer stays for the GSM8K score-centring card until that moves to TRL too.

A task gives the prompts of a step (``next_groups``), scores a group of completions (``score_group``),
advances its own state (``advance``), evaluates a greedy policy (``evaluate``) and describes its scorer
for the evaluator identity (``scorer_sources``, ``prompt_template``, ``parser_rule``, ``eval_items``).
A completion is anything with ``text``, ``ids``, ``reward`` and ``info`` (the trainer's ``Rollout``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from spectrum_rft.training import gsm8k as gsm
from spectrum_rft.training.config import TrainConfig
from spectrum_rft.training.provenance import manifest_sha256, sha256_file


class Completion(Protocol):
    """What a task reads and writes on a sampled completion."""

    ids: list[int]
    text: str
    reward: float
    info: dict


Policy = Callable[[list[list[int]]], Sequence[Completion]]  # prompt token ids -> one completion each


def chat_ids(tok, messages: list[dict]) -> list[int]:
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer transformers
        ids = ids["input_ids"]
    return list(ids)


class Gsm8kTask:
    name = "gsm8k"
    metric = "accuracy"

    def __init__(self, cfg: TrainConfig, tok):
        self.cfg, self.tok = cfg, tok
        # --data DIR: a local copy (train.jsonl, test.jsonl); default (None): the Hugging Face dataset openai/gsm8k
        self.data_dir = Path(cfg.data).expanduser() if cfg.data else None
        self.train = gsm.load_split("train", self.data_dir)
        self.test = gsm.load_split("test", self.data_dir, limit=cfg.eval_n)
        self.order = np.random.default_rng(cfg.seed).permutation(len(self.train))
        self._next = 0

    def train_provenance(self) -> dict:
        """The training data's record: its source, a content hash of the items (whatever the source) and,
        from a local copy, the sha256 of ``train.jsonl``."""
        out = {"data_source": gsm.source_name(self.data_dir),
               "train_items_sha256": manifest_sha256([{"id": it["id"], "sha256": gsm.item_sha256(it)}
                                                      for it in self.train])}
        if self.data_dir is not None:
            out["train_file_sha256"] = sha256_file(self.data_dir / "train.jsonl")
        return out

    def prompt(self, item: dict) -> list[int]:
        return chat_ids(self.tok, [{"role": "user", "content": gsm.user_message(item)}])

    def next_groups(self, P: int) -> list[dict]:
        """P training items (a fixed, seeded data order shared by every arm of the same seed)."""
        out = []
        for _ in range(P):
            out.append(self.train[int(self.order[self._next % len(self.order)])])
            self._next += 1
        return [{"id": it["id"], "prompt": self.prompt(it), "item": it} for it in out]

    def score_group(self, group: dict, rollouts: Sequence[Completion]) -> None:
        for r in rollouts:
            r.reward, pred = gsm.score(r.text, group["item"])
            r.info = {"pred": pred}

    def advance(self, group: dict, rollouts: Sequence[Completion]) -> None:
        pass

    def scorer_sources(self) -> list[str]:
        return ["spectrum_rft/training/gsm8k.py"]

    def prompt_template(self) -> str:
        return gsm.PROMPT_TEMPLATE

    def parser_rule(self) -> str:
        return gsm.PARSER_RULE

    def eval_items(self) -> list[dict]:
        return [{"id": it["id"], "sha256": gsm.item_sha256(it)} for it in self.test]

    def evaluate(self, policy: Policy) -> tuple[float, list[dict]]:
        prompts = [self.prompt(it) for it in self.test]
        rolls = policy(prompts)
        preds = []
        for it, r in zip(self.test, rolls):
            reward, pred = gsm.score(r.text, it)
            preds.append({"id": it["id"], "gold": gsm.gold_answer(it), "pred": pred, "correct": bool(reward),
                          "n_tokens": len(r.ids), "completion": r.text})
        acc = sum(p["correct"] for p in preds) / max(len(preds), 1)
        return acc, preds
