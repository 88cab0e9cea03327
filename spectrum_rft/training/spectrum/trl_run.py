"""``spectrum-rft sft`` and ``spectrum-rft train --task spectrum``: the spectrum task trained with TRL.

* ``sft``: a warm start. :func:`spectrum_rft.training.spectrum.trl_data.sft_conversation` plays rows with the
  memoryless policy through the TRL adapter, and TRL's ``SFTTrainer`` (LoRA, loss on the assistant turns
  only) learns them: the task and the tool-call format, no memory. The merged model is saved to
  ``OUT/model`` (with the tool chat template), ready for ``train --model OUT/model``.
* ``train``: TRL's ``GRPOTrainer(environment_factory=tool_env_class(mode, preset))`` with LoRA; the reward is the
  env's own score (:func:`spectrum_rft.training.spectrum.trl_env.spectrum_reward`).

Both take a TOML config file (``--config FILE``: keys are the flags' names with ``_``) and flags, flags
winning. CPU by default (a smoke run); on GPUs the same command runs under ``accelerate launch`` (see
``configs/`` and docs/TRAINING.md), with ``--use-vllm`` for colocated vLLM generation.

A run directory holds ``config.json`` (effective config), ``code_revision.json``, ``metrics.jsonl`` (TRL's
log, one line per step), ``rollouts.jsonl`` (train: one line per completion: step, row id, scan, band
fingerprint, score and memory metrics: beyond_current, echo_copy, echo_kept, peaks_added (current peaks the
report added to the echo), report_size, refusals; the completion's text and parsed calls), ``adapter/`` (LoRA) and
``model/`` (merged, with tokenizer).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spectrum_rft.task.arms import ARMS
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.instructions import tool_schemas
from spectrum_rft.task.memory import NO_MEMORY
from spectrum_rft.task.presets import get_preset
from spectrum_rft.training.provenance import append_jsonl, code_revision, write_json
from spectrum_rft.training.trl_common import (GrpoRunConfig, RunConfig, grpo_args, load_model, load_tokenizer,
                                              log_callback, lora_config, parse_or_say, portable_path, quiet, save_model,
                                              start_process, start_record, sync_vllm_in_place)
from spectrum_rft.training.spectrum.sampler import GrammarMasks, tool_call_grammar
from spectrum_rft.training.spectrum.trl_data import (OwnPrefixSampler, episode_for, grpo_rows, scan_sampler,
                                                      sft_conversation)
from spectrum_rft.training.spectrum.trl_env import (ECHO_HISTORIES, POLICY_HISTORY, ROW_KEYS, SCRIPTED_HISTORIES, judge,
                                                     message_calls, spectrum_reward, tool_env_class)


@dataclass
class Common(RunConfig):
    """The spectrum task's knobs of ``sft`` and ``train`` (beyond :class:`RunConfig`'s)."""

    arm: str = "weak-scaffold"  # the experiment arm: prompt variant + memory mode (spectrum_rft.task.arms)
    memory_mode: str = ""  # overrides the arm's memory mode ("" = the arm's)
    preset: str = "default"  # the band preset (spectrum_rft.task.presets)
    reward: str = "default"  # the reward (default: the audited one; spectrum_rft.task.reward)
    episode: str = ""  # scan | full ("" = scan for the ICL-off modes, full for icl)
    salt: str = "trl"  # band salt of the training rows (held-out rows use another)
    echo_history: str = "accumulate"  # who plays a scan episode's earlier scans (trl_env.ECHO_HISTORIES); train --sampler group: policy, the trained model itself
    lora_layers: int = 0  # LoRA on the top N decoder layers only (0: all); backward then stops below them

    def check(self) -> None:
        super().check()
        if self.arm not in ARMS:
            raise ValueError(f"unknown arm {self.arm!r}; choose one of {', '.join(ARMS)}")
        env = EnvConfig(preset=self.preset, memory_mode=self.mode, reward=self.reward, prompt=ARMS[self.arm].prompt)
        # the run record keeps the versions (``default`` -> ``default-v2`` / ``match_iou``), as rows do
        self.preset, self.reward = env.preset, env.reward
        episode_for(self.mode, self.episode or None)
        if self.echo_history not in ECHO_HISTORIES:
            raise ValueError(f"unknown echo_history {self.echo_history!r}; choose one of {', '.join(ECHO_HISTORIES)}")
        if self.lora_layers < 0:
            raise ValueError("lora_layers must be >= 0")

    @property
    def mode(self) -> str:
        return self.memory_mode or ARMS[self.arm].memory_mode


@dataclass
class SftConfig(Common):
    memory_mode: str = NO_MEMORY  # the conversations' memory mode; none: no echo line, so the warm start teaches neither using nor ignoring one
    rows: int = 256  # conversations (each a fresh band)
    epochs: int = 1  # passes over the conversations
    batch_size: int = 8  # conversations per optimiser step
    max_length: int = 1024  # tokens per conversation (longer ones are cut)
    lr: float = 5e-4
    salt: str = "sft"
    eval_scans: int = 0  # after training: the model on N held-out scan episodes (spectrum-rft scan-eval), T=1 and 0.7
    eval_constrained: bool = False  # ... sampled under the tool-call grammar (default: free, the format's own rate)
    save_every: int = 0  # the LoRA adapter (and optimiser state) every N steps under OUT/trl/checkpoint-N, each kept (0: none)
    from_adapter: str = ""  # no training: OUT/model rebuilt from --model and this recorded LoRA adapter (a warm start restored)
    init_adapter: str = ""  # train on from this recorded LoRA adapter (a second SFT stage; its rank and layers, not --lora-rank's)
    target_policy: str = "memoryless"  # who writes the targets: memoryless, or explore-P (plus one echoed non-peak centre in P % of scans)

    def check(self) -> None:
        super().check()
        from spectrum_rft.baselines.policies import make_policy  # noqa: PLC0415

        make_policy(self.target_policy)  # an unknown name fails here, not after the rows are built
        if self.init_adapter:
            if self.from_adapter:
                raise ValueError("--init-adapter trains on from an adapter, --from-adapter only rebuilds one: pass one")
            if not (Path(self.init_adapter) / "adapter_config.json").is_file():
                raise ValueError(f"--init-adapter {self.init_adapter}: no LoRA adapter there (adapter_config.json)")
        for name in ("rows", "epochs", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.eval_scans < 0 or self.save_every < 0:
            raise ValueError("eval_scans and save_every must be >= 0")
        if self.echo_history == POLICY_HISTORY:
            raise ValueError(f"echo_history {POLICY_HISTORY!r} is a GRPO sampler's (the trained model plays the prefix); "
                             f"SFT conversations take a scripted one: {', '.join(SCRIPTED_HISTORIES)}")


SAMPLERS = ("trl", "group")
LEARNERS = ("masked", "unmasked")  # with --constrained: what the learner trains (docs/TRAINING.md)
COMPLETION_CHARS = 2000  # a completion's text kept in rollouts.jsonl (bounded: a runaway reply stays readable)


@dataclass
class GrpoConfig(Common, GrpoRunConfig):
    max_completion_length: int = 160  # tokens, tool results included (TRL's budget)
    beta: float = 0.0  # KL coefficient (TRL's default: none)
    sampler: str = "trl"  # trl: TRL's generation + the TRL environment (retries within the call budget); group: one prefill per group, one model turn per scan episode (spectrum_rft.training.spectrum.sampler)
    constrained: bool = False  # tool calls sampled under the grammar of the env's tool_schemas() (always well formed)
    batch_groups: bool = False  # --sampler group: a step's groups sampled as one batch (GPUs: half the decode steps for two groups; CPUs: each prompt prefilled G times)
    shared_prefix: bool = False  # learner: each group's prompt run once, its KV cache shared by the G completions (sc_grpo.completion_logits); loss pg = TRL's dapo on-policy
    share_preamble: bool = True  # --sampler group: a step's common prompt preamble (system prompt, tools) prefilled once, each prompt's prefill starting from its KV cache
    fast_prefix: bool = True  # --echo-history policy: the rows that play an earlier scan play it as one batch, a row alone a drafted greedy reply (the same replies, fewer forwards)
    learner: str = "masked"  # with --constrained: masked (the grammar's masks in the learner's log-softmax: the policy that sampled is trained, forced tokens carry no gradient; with vLLM a truncated importance weight to vLLM's log-probs) or unmasked (the model's own log-probs, TRL's learner); docs/TRAINING.md

    def check(self) -> None:
        super().check()
        if self.max_completion_length < 1:
            raise ValueError("max_completion_length must be >= 1")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; choose one of {', '.join(SAMPLERS)}")
        if self.sampler == "group":
            if self.use_vllm:
                raise ValueError("--sampler group generates with transformers; with --use-vllm keep --sampler trl "
                                 "(--constrained then uses vLLM's structured outputs)")
            if episode_for(self.mode, self.episode or None) != "scan":
                raise ValueError("--sampler group plays one model turn per rollout: scan episodes only")
        elif self.echo_history == POLICY_HISTORY:
            raise ValueError(f"--echo-history {POLICY_HISTORY} has the group sampler play each prefix with the model: "
                             "pass --sampler group")
        if self.shared_prefix and self.beta:
            raise ValueError("--shared-prefix computes the policy-gradient loss only (no KL term): keep --beta 0")
        if self.shared_prefix and self.use_vllm:
            raise ValueError("--shared-prefix has no importance-sampling correction for vLLM's sampler: with --use-vllm "
                             "keep TRL's own learner")
        if self.batch_groups and self.sampler != "group":
            raise ValueError("--batch-groups batches the group sampler's groups: pass --sampler group")
        if self.learner not in LEARNERS:
            raise ValueError(f"unknown learner {self.learner!r}; choose one of {', '.join(LEARNERS)}")
        if self.constrained and self.learner == "masked":
            if self.beta:
                raise ValueError("--learner masked computes the policy-gradient loss only (no KL term): keep --beta 0, "
                                 "or pass --learner unmasked")
        if self.constrained and self.sampler != "group" and not self.use_vllm:
            raise ValueError("--constrained needs --sampler group (transformers) or --use-vllm (vLLM's structured "
                             "outputs)")


# --------------------------------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------------------------------


def _setup(cfg: Common, resume: bool = False) -> tuple[Path, Path | str, tuple[Path, int] | None]:
    """The run directory, the model (a local directory, or a hub id), and (``resume``) the checkpoint to go on
    from; the main process writes the config and code revision and resets (or, resuming, cuts back) the record."""
    from spectrum_rft.training.models import resolve_model_dir  # noqa: PLC0415

    state = start_process(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = start_record(out, resume, state.is_main_process)
    model_dir, prov = resolve_model_dir(cfg.model, cfg.cache_dir)
    if state.is_main_process:
        write_json(out / "config.json", {**asdict(cfg), "prompt": ARMS[cfg.arm].prompt, "memory_mode": cfg.mode,
                                         "model_dir": portable_path(model_dir), "model_provenance": prov,
                                         "processes": state.num_processes})
        write_json(out / "code_revision.json", code_revision())
    state.wait_for_everyone()
    return out, model_dir, ckpt


def _lora(cfg: Common, model):
    return lora_config(cfg.lora_rank, cfg.lora_alpha, top_layers=cfg.lora_layers, n_layers=model.config.num_hidden_layers)


# --------------------------------------------------------------------------------------------------
# sft
# --------------------------------------------------------------------------------------------------


def sft_rows(cfg: SftConfig) -> list[dict]:
    """The rows an SFT run plays (its bands: seeded by ``cfg.salt``)."""
    return grpo_rows(cfg.rows, prompt=ARMS[cfg.arm].prompt, memory_mode=cfg.mode, preset=cfg.preset,
                     reward=cfg.reward, salt=cfg.salt, prefix="sft", episode=cfg.episode or None,
                     echo_history=cfg.echo_history)


def write_bands(path: Path, rows: list[dict]) -> None:
    """``bands.jsonl``: each row's id and environment context (its band, by the seed rule), so a held-out
    evaluation can prove by fingerprint that it plays none of them (``memory-report --whole-exclude``)."""
    path.write_text("".join(json.dumps({"id": r["row_id"], "environment_context": r["environment_context"]}) + "\n"
                            for r in rows))


def run_sft(cfg: SftConfig) -> dict:
    out, model_dir, _ = _setup(cfg)
    if cfg.from_adapter:
        from spectrum_rft.training.trl_common import merge_adapter  # noqa: PLC0415

        merge_adapter(model_dir, cfg.from_adapter, out)
        summary: dict[str, Any] = {"rebuilt_from_adapter": portable_path(cfg.from_adapter)}  # summary.json
        write_json(out / "summary.json", summary)
        return {**summary, "main_process": True}
    from datasets import Dataset  # noqa: PLC0415
    from trl import SFTConfig, SFTTrainer  # noqa: PLC0415

    from accelerate import PartialState  # noqa: PLC0415

    rows = sft_rows(cfg)
    if PartialState().is_main_process:
        write_bands(out / "bands.jsonl", rows)
    convs = [sft_conversation(r, cfg.target_policy) for r in rows]
    scores = [c.pop("score") for c in convs]
    for c in convs:
        c.pop("row_id")
    tok = load_tokenizer(model_dir)
    args = SFTConfig(output_dir=str(out / "trl"), use_cpu=cfg.use_cpu, num_train_epochs=cfg.epochs,
                     per_device_train_batch_size=cfg.batch_size, learning_rate=cfg.lr, assistant_only_loss=True,
                     max_length=cfg.max_length, logging_steps=1, report_to=[], seed=cfg.seed,
                     # --save-every N: the LoRA adapter every N steps, each kept (OUT/trl/checkpoint-N): a curve
                     # of checkpoints that `sft --from-adapter` turns into models
                     save_strategy="steps" if cfg.save_every else "no", save_steps=cfg.save_every or 1,
                     bf16=cfg.bf16, gradient_checkpointing=cfg.gradient_checkpointing, disable_tqdm=True)
    model = load_model(model_dir)
    if cfg.init_adapter:  # a second stage: the recorded adapter goes on training (its own LoRA shape)
        from peft import PeftModel  # noqa: PLC0415

        model, lora = PeftModel.from_pretrained(model, cfg.init_adapter, is_trainable=True), None
    else:
        lora = _lora(cfg, model)
    trainer = quiet(SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(convs),
                               processing_class=tok, peft_config=lora, callbacks=[log_callback(out / "metrics.jsonl")]))
    t0 = time.time()
    trainer.train()
    save_model(trainer, tok, out)
    summary = {"rows": len(convs), "policy_score": sum(scores) / len(scores), "train_s": round(time.time() - t0, 1),
               "steps": trainer.state.global_step,
               "final_loss": next((h["loss"] for h in reversed(trainer.state.log_history) if "loss" in h), None)}
    if cfg.eval_scans and trainer.accelerator.is_main_process:
        from spectrum_rft.training.spectrum.scan_eval import evaluate  # noqa: PLC0415

        summary["scan_eval"] = []
        for t in (1.0, 0.7):
            r = evaluate(out / "model", arm=cfg.arm, scans=cfg.eval_scans, temperature=t,  # the arm GRPO will train
                         constrained=cfg.eval_constrained)
            write_json(out / f"scan_eval_T{t:g}.json", r)
            summary["scan_eval"].append({k: r[k] for k in ("temperature", "constrained", "scans", "valid", "score",
                                                           "gain_vs_memoryless", "gain_valid")})
    if trainer.accelerator.is_main_process:
        write_json(out / "summary.json", summary)
    return {**summary, "main_process": trainer.accelerator.is_main_process}


def sft_main(argv: list[str] | None = None) -> int:
    cfg = parse_or_say(SftConfig, argv, "spectrum-rft sft",
                       "Warm start with TRL's SFTTrainer on memoryless trajectories (the GRPO chat/tool format).")
    if cfg is None:
        return 2
    s = run_sft(cfg)
    if "rebuilt_from_adapter" in s:
        print(f"sft: {cfg.out}/model rebuilt from {cfg.model} + the adapter {cfg.from_adapter} (no training)")
        return 0
    if s["main_process"]:
        print(f"sft: {s['rows']} conversations (targets: {cfg.target_policy}, score {s['policy_score']:.3f}), {s['steps']} steps, "
              f"final loss {s['final_loss']}, {s['train_s']} s -> {cfg.out}/model")
        for e in s.get("scan_eval", []):
            print(f"  scan-eval T={e['temperature']:g}{' constrained' if e['constrained'] else ''}: {e['scans']} scans, "
                  f"valid {e['valid']:.3f}, score {e['score']:.3f}")
    return 0


# --------------------------------------------------------------------------------------------------
# train (GRPO)
# --------------------------------------------------------------------------------------------------


def make_reward(path: Path, tokenizer: Any):
    """The reward function TRL calls: :func:`spectrum_reward`, plus one ``rollouts.jsonl`` line per
    completion (the run's record of what each candidate wrote, as text (bounded) and as the calls TRL
    parsed, and what it scored, on which band). With a TRL
    environment (``environments``) the envs have judged the calls already; without one (``--sampler
    group``) each completion is judged here by a fresh env of its row (:func:`judge`)."""

    def spectrum(environments=None, completions=None, completion_ids=None, trainer_state=None, log_metric=None,
                 log_extra=None, **columns: Any) -> list[float]:
        step = trainer_state.global_step if trainer_state is not None else None
        completions = completions or []
        rows: list[dict] | None = None
        if environments is None:
            # every column reset reads: without echo_history the judge's prefix (and so the echo its metrics compare
            # with: echo_copy, echo_kept, carry_rate) would not be the one the model was shown
            rows = [{k: columns[k][i] for k in ROW_KEYS if k in columns} for i in range(len(completions))]
            environments = [judge(row, next((m for m in c if m.get("role") == "assistant"), None)
                                  if isinstance(c, list) else None) for row, c in zip(rows, completions)]

        def record(ms: list[dict]) -> None:
            for i, m in enumerate(ms):
                c = completions[i] if i < len(completions) else []
                ids = completion_ids[i] if completion_ids is not None and i < len(completion_ids) else []
                append_jsonl(path, {"step": step, "row_id": m["row_id"], "scan": m["scan"], "reward": float(m["score"]),
                                    **{k: m.get(k) for k in ("band_fingerprint", "score", "late_mean", "early_mean",
                                                             "carry_rate", "echo_copy", "dormant_recall", "scans_skipped",
                                                             "memoryless_reward", "gain_vs_memoryless",
                                                             "beyond_current", "echo_kept", "peaks_added",
                                                             "refusals", "report_size", "faults")},
                                    **({"prefix_reports": rows[i]["prefix_reports"]}
                                       if rows is not None and "prefix_reports" in rows[i] else {}),
                                    "calls": [x for m in c for x in message_calls(m)] if isinstance(c, list) else [],
                                    "completion": tokenizer.decode(ids, skip_special_tokens=False)[:COMPLETION_CHARS]})

        return spectrum_reward(environments, log_metric=log_metric, log_extra=log_extra, on_metrics=record)

    return spectrum


def training_rows(cfg: GrpoConfig, processes: int = 1) -> list[dict]:
    """The rows a run trains on: every step consumes prompts x processes rows, so there are enough fresh bands
    that no row is ever replayed (what a run's record is re-judged against: scripts/rejudge_rollouts.py)."""
    return grpo_rows(cfg.steps * cfg.prompts * processes, prompt=ARMS[cfg.arm].prompt, memory_mode=cfg.mode,
                     preset=cfg.preset, reward=cfg.reward, salt=cfg.salt, prefix=f"grpo-s{cfg.seed}",
                     episode=episode_for(cfg.mode, cfg.episode or None), scan_in_prompt=cfg.sampler == "group",
                     echo_history=cfg.echo_history)


def run_train(cfg: GrpoConfig, callbacks: list | None = None) -> dict:
    out, model_dir, ckpt = _setup(cfg, cfg.resume)
    from datasets import Dataset  # noqa: PLC0415
    from trl import GRPOTrainer  # noqa: PLC0415

    episode = episode_for(cfg.mode, cfg.episode or None)
    from accelerate import PartialState  # noqa: PLC0415

    rows = training_rows(cfg, PartialState(cpu=cfg.use_cpu).num_processes)
    calls = EnvConfig().max_calls_per_scan * (1 if episode == "scan" else get_preset(cfg.preset).n_scans)
    tok = load_tokenizer(model_dir)
    micro = cfg.micro_batch or cfg.prompts * cfg.group
    masked = cfg.constrained and cfg.learner == "masked"
    # vLLM under the grammar: TRL's correction compares vLLM's processed (grammar-masked, tempered) log-probs with
    # the unconstrained policy's and masks every constrained sequence away (ratios ~1e-10: no gradient), so it is
    # off. The masked learner gets our truncated importance weight against vLLM's log-probs instead (like with
    # like); the unmasked one trains as on the transformers path, as if it had sampled
    vllm_is = {"vllm_importance_sampling_correction": False} if cfg.constrained and cfg.use_vllm else {}
    args = grpo_args(cfg, out, micro_batch=micro, accumulation=cfg.prompts * cfg.group // micro,
                     max_completion_length=cfg.max_completion_length, beta=cfg.beta, max_tool_calling_iterations=calls,
                     generation_kwargs=({"structured_outputs": {"grammar": tool_call_grammar(tool_schemas(cfg.mode, cfg.preset))}}
                                        if cfg.constrained and cfg.use_vllm else None), **vllm_is)
    model = load_model(model_dir)
    learner: dict[str, Any] = {}
    if cfg.sampler == "group":
        sampler = scan_sampler(tok, cfg.mode, preset=cfg.preset, constrained=cfg.constrained,
                               max_new_tokens=cfg.max_completion_length, vocab_size=model.config.vocab_size,
                               batch_groups=cfg.batch_groups, share_preamble=cfg.share_preamble)
        generation: dict[str, Any] = {"rollout_func": OwnPrefixSampler(sampler, rows, tok, fast=cfg.fast_prefix)
                      if cfg.echo_history == POLICY_HISTORY else sampler}
        if masked:
            learner["grammar_masks"] = sampler.grammar_masks()
    else:
        generation = {"environment_factory": tool_env_class(cfg.mode, cfg.preset)}
        if masked:  # vLLM's structured outputs: the same grammar, replayed per model turn
            learner.update(grammar_masks=GrammarMasks.for_tools(tok, tool_schemas(cfg.mode, cfg.preset),
                                                                model.config.vocab_size), loss_kind="tis")
    trainer_class: type[GRPOTrainer]
    if cfg.shared_prefix or learner:  # TRL's on-policy dapo loss (ratio 1: -A log p / tokens), ours
        from spectrum_rft.training.sc_grpo import ScoreCentringGRPOTrainer  # noqa: PLC0415

        trainer_class, learner = ScoreCentringGRPOTrainer, {"loss_kind": "pg", "shared_prefix": cfg.shared_prefix,
                                                            **learner}
    else:
        trainer_class, learner = GRPOTrainer, {}
    trainer = quiet(trainer_class(model=model, args=args, train_dataset=Dataset.from_list(rows),
                                  reward_funcs=[make_reward(out / "rollouts.jsonl", tok)], processing_class=tok,
                                  peft_config=_lora(cfg, model),
                                  callbacks=[log_callback(out / "metrics.jsonl"), *(callbacks or [])],
                                  **generation, **learner))
    sync_vllm_in_place(trainer)
    t0 = time.time()
    trainer.train(resume_from_checkpoint=str(ckpt[0]) if ckpt else None)
    save_model(trainer, tok, out)
    summary = {"steps": trainer.state.global_step, "rows": len(rows), "episode": episode,
               "resumed_from_step": ckpt[1] if ckpt else None,
               "train_s": round(time.time() - t0, 1)}
    if trainer.accelerator.is_main_process:
        write_json(out / "summary.json", summary)
    return {**summary, "main_process": trainer.accelerator.is_main_process,
            "parameters": sum(p.numel() for p in model.parameters())}


def train_main(argv: list[str] | None = None) -> int:
    cfg = parse_or_say(GrpoConfig, argv, "spectrum-rft train",
                       "GRPO on the spectrum task with TRL's GRPOTrainer (the env's score is the reward). "
                       "The GSM8K score-centring card: spectrum-rft train --task gsm8k --help.")
    if cfg is None:
        return 2
    s = run_train(cfg)
    if s["main_process"]:
        print(f"train: {s['steps']} GRPO steps on {s['rows']} rows ({s['episode']} episodes), {s['train_s']} s -> "
              f"{cfg.out}/model")
    return 0
