"""The trainer's two tasks: GSM8K (exact match, :mod:`.gsm8k`) and our environment trained per scan.

A task gives the prompts of a step (``next_groups``), scores a group of completions (``score_group``),
advances its own state (``advance``), evaluates a greedy policy (``evaluate``) and describes its scorer
for the evaluator identity (``scorer_sources``, ``prompt_template``, ``parser_rule``, ``eval_items``).
A completion is anything with ``text``, ``ids``, ``reward`` and ``info`` (the trainer's ``Rollout``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from spectrum_rft.training import gsm8k as gsm
from spectrum_rft.training.config import TrainConfig


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
        self.data_dir = Path(cfg.data).expanduser() if cfg.data else gsm.default_data_dir()
        self.train = gsm.load_items(self.data_dir, "train")
        self.test = gsm.load_items(self.data_dir, "test", limit=cfg.eval_n)
        self.order = np.random.default_rng(cfg.seed).permutation(len(self.train))
        self._next = 0

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


_NUM_LIST = re.compile(r"\[([^\[\]]*)\]")
_FLOAT = re.compile(r"-?\d+(?:\.\d+)?")


def parse_centres(text: str) -> list[float] | None:
    """The report in a completion: the numbers of the last ``[...]`` list, else None (no report)."""
    lists = _NUM_LIST.findall(text or "")
    if not lists:
        return None
    return [float(x) for x in _FLOAT.findall(lists[-1])]


SPECTRUM_FORMAT = ("\nAnswer with only the JSON list of the centre frequencies (MHz) of all occupied regions, "
                   "e.g. [41.5, 97.0].")


class SpectrumTask:
    """Our environment (scaffold memory) trained per scan: a group is G completions of one scan prompt,
    each scored by a copy of the env at that point; the episode advances with the first completion (an
    i.i.d. sample of the policy)."""

    name = "spectrum"
    metric = "score"

    def __init__(self, cfg: TrainConfig, tok):
        from spectrum_rft.task.environment import EnvConfig, SpectrumEnv, seed_for_row  # noqa: PLC0415

        self.cfg, self.tok = cfg, tok
        self.env_cfg = EnvConfig(preset=cfg.spectrum_preset, memory_mode="scaffold", reward=cfg.spectrum_reward)
        self._Env, self._seed_for_row = SpectrumEnv, seed_for_row
        self._row = 0
        self.episodes = [self._new_episode() for _ in range(cfg.prompts)]
        self.eval_rows = [f"spectrum-eval-{i}" for i in range(cfg.eval_n)]

    def _new_episode(self) -> dict:
        row = f"spectrum-train-s{self.cfg.seed}-{self._row}"
        self._row += 1
        env = self._Env(self.env_cfg)
        env.reset(self._seed_for_row(row))
        return {"row": row, "env": env}

    def prompt_for(self, env) -> list[int]:
        obs = env.observation()
        return chat_ids(self.tok, [{"role": "system", "content": env.system_prompt()},
                                   {"role": "user", "content": obs["prompt"] + SPECTRUM_FORMAT}])

    def next_groups(self, P: int) -> list[dict]:
        return [{"id": f"{ep['row']}#scan{ep['env'].scan_index + 1}", "prompt": self.prompt_for(ep["env"]),
                 "episode": ep} for ep in self.episodes[:P]]

    @staticmethod
    def _play(env, text: str) -> float:
        centres = parse_centres(text)
        if centres is None:
            env.skip("no_report")
            return 0.0
        _, reward, _, _, info = env.step({"center_freqs": centres})
        if not info["advanced"]:
            env.skip("invalid_report")
            return 0.0
        return float(reward)

    def score_group(self, group: dict, rollouts: Sequence[Completion]) -> None:
        env = group["episode"]["env"]
        for r in rollouts:
            r.reward = self._play(copy.deepcopy(env), r.text)
            r.info = {"report": parse_centres(r.text)}

    def advance(self, group: dict, rollouts: Sequence[Completion]) -> None:
        ep = group["episode"]
        self._play(ep["env"], rollouts[0].text)
        if ep["env"].done:
            i = self.episodes.index(ep)
            self.episodes[i] = self._new_episode()

    def scorer_sources(self) -> list[str]:
        return ["spectrum_rft/task/environment.py", "spectrum_rft/task/reward.py", "spectrum_rft/training/tasks.py"]

    def prompt_template(self) -> str:
        return ("chat template of the model: system = env.system_prompt(), user = scan prompt + "
                + repr(SPECTRUM_FORMAT) + f"; env {json.dumps(self.env_cfg.to_dict(), sort_keys=True)}; "
                f"score = mean reward over the first {self.cfg.spectrum_eval_scans or 'all'} scans of each episode")

    def parser_rule(self) -> str:
        return "numbers of the last [...] list in the completion -> center_freqs; none -> skipped scan (empty report)"

    def eval_items(self) -> list[dict]:
        out = []
        for row in self.eval_rows:
            env = self._Env(self.env_cfg)
            seed = self._seed_for_row(row)
            env.reset(seed)
            key = json.dumps({"row": row, "seed": seed, "band": env.band_fingerprint()}, sort_keys=True)
            out.append({"id": row, "seed": seed, "sha256": hashlib.sha256(key.encode()).hexdigest()})
        return out

    def evaluate(self, policy: Policy) -> tuple[float, list[dict]]:
        envs = []
        for row in self.eval_rows:
            env = self._Env(self.env_cfg)
            env.reset(self._seed_for_row(row))
            envs.append(env)
        reports: list[list] = [[] for _ in envs]
        n_scans = min(self.cfg.spectrum_eval_scans or envs[0].n_scans, envs[0].n_scans) if envs else 0
        while True:
            live = [i for i, e in enumerate(envs) if not e.done and e.scan_index < n_scans]
            if not live:
                break
            rolls = policy([self.prompt_for(envs[i]) for i in live])
            for i, r in zip(live, rolls):
                reports[i].append(parse_centres(r.text))
                self._play(envs[i], r.text)
        preds = []
        for row, env, rep in zip(self.eval_rows, envs, reports):
            m = env.metrics()
            played = m["per_scan_reward"][:n_scans]
            preds.append({"id": row, "score": sum(played) / max(len(played), 1), "per_scan_reward": played,
                          "episode_score": m["score"] if n_scans == env.n_scans else None,
                          "reports": rep, "memory_gain": m["memory_gain"], "faults": m["faults"]})
        return (sum(p["score"] for p in preds) / max(len(preds), 1)), preds
