"""How much context one episode of an arm needs: what ``--max-context-length`` (and ``--batch-size``, the tokens
one packed training batch holds) must hold, computed before any request.

The episode is played, not guessed: a dataset row of the launch (its preset, prompt and memory mode) is played
in this process through the project's one episode driver (:func:`spectrum_rft.rollouts.driver.drive_now`) by
the scripted policy that writes the longest reports the preset allows (``carpet-<max_regions>``: a full
report each scan, so the scaffold echo and the ICL history are as long as they get). At every model call the
driver sends the memory mode's window (:func:`spectrum_rft.task.window.window`: the ICL-off window, or the
whole history for ``icl``); the need is the largest window plus the tool schemas, in the project's one token
estimate (:func:`spectrum_rft.task.window.approx_tokens`, 4 characters a token), plus the model's output
(``max_output_tokens``: the completion shares the context), plus, for the notepad modes, the notepad at its
cap twice (written in a call and read back, or shown in the scan and replaced in the report).

It is an estimate (the platform's tokenizer is not here): a context below it cannot hold the episode and is
refused; one just above it may still be tight (digits often tokenize one a token), which the dry run says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class ContextNeed:
    prompt_tokens: int  # the largest window the model is sent, tool schemas included
    notepad_tokens: int  # the notepad at its cap, twice (notepad modes only)
    output_tokens: int  # max_output_tokens
    model_calls: int
    memory_mode: str = ""

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.notepad_tokens + self.output_tokens

    def describe(self) -> str:
        """The need in words, one line (the dry run's context line and the refusal of a too-short context)."""
        parts = [f"{self.prompt_tokens} of window and tools"]
        parts += [f"{self.notepad_tokens} of notepad"] if self.notepad_tokens else []
        return (f"a windowed {self.memory_mode} episode needs ~{self.total} tokens ("
                + " + ".join([*parts, f"{self.output_tokens} of output"]) + "; 4 characters a token)")


def episode_need(row: dict, max_output_tokens: int) -> ContextNeed:
    """The context one episode of ``row`` (EvaluationRow JSON) needs (the module docstring says how)."""
    from spectrum_rft.baselines.policies import ScriptedModel  # noqa: PLC0415
    from spectrum_rft.rollouts.driver import drive_now  # noqa: PLC0415
    from spectrum_rft.rollouts.episode import InProcessEpisode  # noqa: PLC0415
    from spectrum_rft.task.presets import get_preset  # noqa: PLC0415
    from spectrum_rft.task.rows import row_config  # noqa: PLC0415
    from spectrum_rft.task.window import approx_tokens  # noqa: PLC0415

    meta = row["input_metadata"]
    config = row_config(meta["dataset_info"])
    policy = ScriptedModel(f"carpet-{get_preset(config.preset).max_regions}", 0)
    peak, calls = [0], [0]

    async def measured(messages, tools, ep, stats):  # noqa: ANN001, ANN202 (the driver's model shape)
        peak[0] = max(peak[0], sum(map(approx_tokens, messages)) + len(json.dumps(tools)) // 4)
        calls[0] += 1
        return await policy(messages, tools, ep, stats)

    episode = InProcessEpisode.for_row(meta["row_id"], meta["dataset_info"])
    drive_now(episode, measured, transcript=[dict(m) for m in row["messages"]])
    mode = config.memory
    notepad = 2 * (config.notepad_chars // 4) if (mode.notepad_tools or mode.notepad_in_scan) else 0
    return ContextNeed(prompt_tokens=peak[0], notepad_tokens=notepad, output_tokens=max_output_tokens,
                       model_calls=calls[0], memory_mode=config.memory_mode)
