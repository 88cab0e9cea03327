"""The tasks: one dataset row of spectrum-rft per task, from the project's own row rule.

``make_rows`` (``spectrum_rft.rollouts.dataset``) builds the rows exactly as the evaluator's dataset does
(the row id, the system prompt, the env context with ``seed_for_row(row_id, salt)``), so every rollout
of a task - and the evaluator's rollouts of the same row - face one band and one scan sequence.

The reward is the env's score, read from the env's own record that the harness leaves in
``trace.info["spectrum"]`` (:meth:`SpectrumEnv.result`); nothing is parsed out of model text. The
diagnostics are metrics: recorded with the trace, never summed into the reward.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf

from spectrum_rft.rollouts.dataset import FIRST_USER_MESSAGE, make_rows
from spectrum_rft.task.reward import metric_names

INFO_KEY = "spectrum"  # trace.info[INFO_KEY]: the env's result (metrics + per-scan records)
LOGGED_METRICS = metric_names("memory_gain", "dormant_recall", "carry_rate", "scans_skipped", "early_mean", "late_mean")


class SpectrumData(vf.TaskData):
    """One row: its id (the band seed comes from it) and the env context it carries."""

    environment_context: dict[str, Any]
    """``make_rows``' ``environment_context``: preset, memory mode, reward, prompt, salt, seed, ..."""


def env_result(trace: vf.Trace) -> dict:
    """The env's record of this rollout (empty when the rollout never started its env)."""
    result = trace.info.get(INFO_KEY)
    return result if isinstance(result, dict) else {}


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


class SpectrumTask(vf.Task[SpectrumData, vf.State, vf.TaskConfig]):
    """A row's rollout is played by :class:`spectrum_memory.harness.SpectrumHarness`; scored here."""

    @property
    def key(self) -> str:
        return str(self.data.id)

    @vf.reward(weight=1.0)
    async def spectrum_score(self, trace: vf.Trace) -> float:
        """The env's episode score (every scan in the mean, skipped ones as empty reports)."""
        return _number(env_result(trace).get("score"))

    @vf.metric
    async def diagnostics(self, trace: vf.Trace) -> dict[str, float]:
        """memory_gain, dormant_recall, carry_rate, scans_skipped (and the halves): logged, weight zero.
        A diagnostic the env reports as undefined (None) is logged as 0."""
        result = env_result(trace)
        return {name: _number(result.get(name)) for name in LOGGED_METRICS}


class SpectrumTasksetConfig(vf.TasksetConfig):
    """The dataset knobs (``--env.taskset.<name>``), those of ``make_spectrum_dataset.py``."""

    prompt: str = "explicit"
    memory_mode: str | None = None  # default: the prompt's (scaffold; notepad for notepad prompts)
    preset: str = "default"
    reward: str = "default"
    rows: int = 16
    salt: str = ""
    epochs: int = 1
    think: bool = False
    prefix: str = "spectrum"  # row ids are <prefix>-r0000...; `spectrum-rft eval` uses "eval"
    max_calls_per_scan: int | None = None  # model calls per scan before it is skipped (env default: 4)


class SpectrumTaskset(vf.Taskset[SpectrumTask, SpectrumTasksetConfig]):
    def load(self) -> list[SpectrumTask]:
        c = self.config
        if c.salt == "process":
            raise ValueError("salt 'process' gives each process its own bands; use a fixed salt (or --epochs)")
        rows = make_rows(c.rows, prompt=c.prompt, memory_mode=c.memory_mode, preset=c.preset, reward=c.reward,
                         think=c.think, epochs=c.epochs, salt=c.salt, prefix=c.prefix)
        tasks = []
        for r in rows:
            ctx = dict(r["environment_context"])
            if c.max_calls_per_scan is not None:
                ctx["max_calls_per_scan"] = c.max_calls_per_scan
            data = SpectrumData(id=r["id"], name=r["id"], prompt=FIRST_USER_MESSAGE, system_prompt=r["system_prompt"],
                                environment_context=ctx)
            tasks.append(SpectrumTask(data, c.task))
        return tasks
