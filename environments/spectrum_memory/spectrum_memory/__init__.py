"""spectrum-rft's memory task as a verifiers (0.4.0, ``verifiers.v1``) environment.

    vf-eval spectrum-memory -m <model> --client.base-url http://127.0.0.1:8000/v1 -n 4 -r 2

The package exports what verifiers' loaders look for (one ``Taskset``, one ``Harness``, one ``Env``
subclass in ``__all__``) and :func:`load_environment`, the Python entry point.
"""

from __future__ import annotations

from typing import Any

import verifiers.v1 as vf

from spectrum_memory.harness import SpectrumHarness, SpectrumHarnessConfig
from spectrum_memory.taskset import SpectrumData, SpectrumTask, SpectrumTaskset, SpectrumTasksetConfig

ENV_ID = "spectrum-memory"


class SpectrumMemoryEnvConfig(vf.EnvConfig):
    """One seat, ``agent``: the model under evaluation, played by :class:`SpectrumHarness` in-process (a
    subprocess runtime: the harness runs no program, so nothing needs a container)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


class SpectrumMemoryEnv(vf.Env[SpectrumMemoryEnvConfig]):
    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)


def load_environment(*, prompt: str = "explicit", memory_mode: str | None = None, preset: str = "default",
                     reward: str = "default", rows: int = 16, salt: str = "", epochs: int = 1,
                     **taskset_kwargs: Any) -> SpectrumMemoryEnv:
    """The environment over ``rows`` x ``epochs`` dataset rows (the knobs of ``make_spectrum_dataset.py``;
    ``taskset_kwargs``: ``think``, ``prefix``, ``max_calls_per_scan``)."""
    taskset = SpectrumTasksetConfig(id=ENV_ID, prompt=prompt, memory_mode=memory_mode, preset=preset, reward=reward,
                                    rows=rows, salt=salt, epochs=epochs, **taskset_kwargs)
    env = vf.load_environment(SpectrumMemoryEnvConfig(taskset=taskset))
    assert isinstance(env, SpectrumMemoryEnv)
    return env


__all__ = ["SpectrumData", "SpectrumHarness", "SpectrumHarnessConfig", "SpectrumMemoryEnv", "SpectrumMemoryEnvConfig",
           "SpectrumTask", "SpectrumTaskset", "SpectrumTasksetConfig", "load_environment"]
