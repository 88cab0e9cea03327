"""Datasets for TRL: GRPO prompt rows for :mod:`.trl_env`, and SFT conversations of a scripted policy
played through the same adapter, in exactly the chat/tool format GRPO generates in.

Two episode shapes (``episode``):

* ``full``: one row = one whole episode; TRL keeps the conversation, so every earlier scan stays in the
  model's context. Right for memory mode ``icl``; for the ICL-off modes (none, scaffold, scrambled,
  notepad) it would leak the history the mode is meant to hide, so it is refused for them.
* ``scan``: one row = one scan of an episode (``scan`` k, drawn per row from its id): the adapter plays
  scans 1..k-1 with the row's ``echo_history`` policy (``accumulate`` by default: the echo then carries
  every peak seen so far, as a model that keeps its echo would see it; ``memoryless``: the previous scan's
  peaks only) and the model sees scan k alone, with the mode's memory in the scan text (the scaffold's echo
  of the previous report, or the scrambled control's random echo of the same count). The ICL-off window of
  the evaluator, one scan at a time.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from spectrum_rft.baselines.policies import ScriptedModel
from spectrum_rft.rollouts.dataset import make_rows
from spectrum_rft.rollouts.driver import drive_now
from spectrum_rft.task.memory import memory_mode as get_memory_mode
from spectrum_rft.task.presets import get_preset
from spectrum_rft.task.seeding import seed_for_row
from spectrum_rft.training.spectrum.trl_env import (ECHO_HISTORIES, POLICY_HISTORY, message_calls, scan_prompt,
                                                     tool_env_class, tool_env_for, tool_names)

EPISODES = ("scan", "full")
FINAL_REPLY = "Done."  # what the SFT data answers after the rollout's last tool result


def episode_for(memory_mode: str, episode: str | None) -> str:
    """The episode shape of a memory mode (``None``: scan for the ICL-off modes, full for icl); refuses
    the shapes that would change what the mode means. Full episodes: the modes that keep the history (icl),
    and those whose model writes a notepad shown with every scan (icl_notepad: a scan alone cannot train it;
    TRL's context then also holds the earlier scans)."""
    mode = get_memory_mode(memory_mode)
    if episode is None:
        episode = "scan" if mode.memory_in_scan_text else "full"
    if episode not in EPISODES:
        raise ValueError(f"unknown episode shape {episode!r}; choose one of {', '.join(EPISODES)}")
    if episode == "scan" and not mode.memory_in_scan_text:
        raise ValueError(f"memory mode {memory_mode!r} cannot be trained one scan at a time (its memory does not "
                         f"travel in the scan text); use --episode full")
    if episode == "full" and not (mode.history or mode.notepad_in_scan):
        raise ValueError(f"memory mode {memory_mode!r} hides earlier scans, but TRL keeps the whole conversation "
                         f"in context: a full episode would leak them. Use --episode scan")
    return episode


def scan_of_row(row_id: str, salt: str, n_scans: int) -> int:
    """The scan (1..n_scans) a scan-episode row plays: a stable hash of its id, independent of its band."""
    return 1 + seed_for_row(f"{row_id}#scan", salt) % n_scans


def grpo_rows(n: int, *, prompt: str, memory_mode: str, preset: str = "default", reward: str = "default",
              salt: str = "", prefix: str = "trl", episode: str | None = None, scan_in_prompt: bool = False,
              echo_history: str = "accumulate") -> list[dict]:
    """``n`` rows, each a fresh band: ``prompt`` (system message + an empty user message that TRL completes
    with ``reset``'s scan text; ``scan_in_prompt``: the scan text already in it, for a sampler without a
    TRL environment), ``row_id``, ``scan`` (0: the whole episode), ``echo_history`` (who plays a scan
    episode's earlier scans: :data:`.trl_env.ECHO_HISTORIES`), ``environment_context``. With ``policy`` the
    prompt holds the episode's first scan: :class:`OwnPrefixSampler` plays on from there with the model and
    shows it scan ``scan``."""
    if echo_history not in ECHO_HISTORIES:
        raise ValueError(f"unknown echo_history {echo_history!r}; choose one of {', '.join(ECHO_HISTORIES)}")
    episode = episode_for(memory_mode, episode)
    n_scans = get_preset(preset).n_scans
    out = []
    for r in make_rows(n, prompt=prompt, memory_mode=memory_mode, preset=preset, reward=reward, salt=salt,
                       prefix=prefix):
        out.append({"prompt": [{"role": "system", "content": r["system_prompt"]}, {"role": "user", "content": ""}],
                    "row_id": r["id"],
                    "scan": scan_of_row(r["id"], salt, n_scans) if episode == "scan" else 0,
                    "echo_history": echo_history,
                    "environment_context": r["environment_context"]})
        if scan_in_prompt:
            out[-1]["prompt"] = scan_prompt({**out[-1], "scan": 1} if echo_history == POLICY_HISTORY else out[-1])
    return out


def tool_schemas_of(env: Any) -> list[dict]:
    """The tools as TRL renders them for ``env``: ``get_json_schema`` of each tool method, in TRL's order."""
    from transformers.utils import get_json_schema  # noqa: PLC0415

    return [get_json_schema(getattr(env, name)) for name in sorted(tool_names(env))]


def scan_sampler(tokenizer: Any, memory_mode: str, *, preset: str = "default", constrained: bool = False,
                 max_new_tokens: int = 160, vocab_size: int | None = None, batch_groups: bool = False,
                 share_preamble: bool = True) -> Any:
    """The :class:`~spectrum_rft.training.spectrum.sampler.GroupSampler` of a memory mode: the prompt renders the
    tools as TRL does (as in SFT and on the env path), the grammar follows the env's ``tool_schemas()``."""
    from spectrum_rft.task.instructions import tool_schemas  # noqa: PLC0415
    from spectrum_rft.training.spectrum.sampler import GroupSampler  # noqa: PLC0415

    return GroupSampler(tokenizer, tools=tool_schemas_of(tool_env_class(memory_mode, preset)()),
                        grammar_tools=tool_schemas(memory_mode, preset), constrained=constrained,
                        max_new_tokens=max_new_tokens, vocab_size=vocab_size, batch_groups=batch_groups,
                        share_preamble=share_preamble)


def prompt_key(prompt: list[dict]) -> str:
    """A prompt as a dictionary key (its messages' roles and texts)."""
    return json.dumps([[m.get("role"), m.get("content")] for m in prompt])


def own_prefix_prompt(row: dict, reports: list, scan: int | None = None) -> list[dict]:
    """The prompt of scan ``scan`` (None: the row's own) of an ``echo_history = "policy"`` row, after the model's
    ``reports`` on the scans before it (the row's prompt holds the first scan: its user message is emptied and
    the scan appended as :func:`grpo_rows` appends it)."""
    *head, last = row["prompt"]
    return scan_prompt({**row, "prompt": [*head, {**last, "content": ""}], "prefix_reports": reports,
                        **({"scan": scan} if scan is not None else {})})


class OwnPrefixSampler:
    """TRL ``rollout_func`` for rows whose ``echo_history`` is ``policy``: before a row's group is sampled at
    its scan k, the model itself plays scans 1..k-1 of the row's band, greedy (temperature 0, as the
    evaluator's scoring runs) under the sampler's grammar, its own previous report as the echo, and the group
    is sampled on scan k as that prefix left it. One reply per earlier scan: where the evaluator gives a scan
    up to ``max_calls_per_scan`` turns with the env's feedback, here a reply without a report the env takes
    (unconstrained text, a list over the cap) leaves that scan skipped and the next echo empty. Each completion carries the prefix's reports
    (``prefix_reports``: TRL forwards the field to the reward function, whose judge replays them, so the echo
    every metric compares with is the one the model was shown).

    ``rows``: the run's dataset rows (their prompt: the episode's first scan, :func:`grpo_rows`). The prefix
    costs k-1 greedy replies per prompt per step; ``fast`` (the default, ``train --fast-prefix``) plays them as
    :meth:`prefixes` says, from the step's shared preamble (:meth:`GroupSampler.preamble`; docs/TRAINING.md)."""

    def __init__(self, sampler: Any, rows: list[dict], tokenizer: Any, *, fast: bool = True) -> None:
        self.sampler, self.tokenizer, self.fast = sampler, tokenizer, fast
        self.rows = {prompt_key(r["prompt"]): r for r in rows}

    def prefixes(self, model: Any, rows: list[dict]) -> list[list[dict | None]]:
        """Each row's prefix: the model's reports on its scans 1..k-1 (a call's arguments, or None: no report
        written). Scan by scan; ``fast``: the rows that play a scan play it as one batch
        (:meth:`GroupSampler.sample_each`), a row that plays it alone one drafted greedy reply
        (:meth:`GroupSampler.greedy`); otherwise one plain greedy reply at a time."""
        from trl.chat_template_utils import parse_response  # noqa: PLC0415

        reports: list[list[dict | None]] = [[] for _ in rows]
        for scan in range(1, max((int(r["scan"]) for r in rows), default=1)):
            playing = [i for i, r in enumerate(rows) if int(r["scan"]) > scan]
            ids = [self.sampler.prompt_ids(own_prefix_prompt(rows[i], reports[i], scan)) for i in playing]
            if not self.fast:
                comps = [self.sampler.sample(model, p, 1, temperature=0.0)[0][0] for p in ids]
            elif len(ids) > 1:
                comps = self.sampler.sample_each(model, ids, temperature=0.0)[0]
            else:
                comps = [self.sampler.greedy(model, ids[0])]
            for i, p, c in zip(playing, ids, comps):
                calls = message_calls(parse_response(self.tokenizer, c, prefix=p))
                call = next((c for c in calls if c["name"] == "submit_report"), None)
                reports[i].append(call["arguments"] if call is not None and isinstance(call["arguments"], dict) else None)
        return reports

    def __call__(self, prompts: list[list[dict]], trainer: Any) -> dict:
        model = trainer.accelerator.unwrap_model(trainer.model)
        keys = list(dict.fromkeys(prompt_key(p) for p in prompts))
        if any(k not in self.rows for k in keys):
            raise ValueError("OwnPrefixSampler got a prompt that is none of its rows' (built from other rows?)")
        rows = [self.rows[k] for k in keys]
        # one preamble for the step: the plays and the groups' prompts all begin with the system prompt and tools
        with self.sampler.preamble(model, [self.sampler.prompt_ids(r["prompt"]) for r in rows]):
            played = {k: (own_prefix_prompt(r, rep), rep) for k, r, rep in zip(keys, rows, self.prefixes(model, rows))}
            shown = [played[prompt_key(p)][0] for p in prompts]
            prefixes = [played[prompt_key(p)][1] for p in prompts]
            out = self.sampler(shown, trainer)
        out["prefix_reports"] = prefixes
        return out


def _call(name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


def sft_conversation(row: dict, policy: str = "memoryless") -> dict:
    """One row played by ``policy`` (default the memoryless one, :func:`.trl_env.memoryless_report`'s reports;
    ``explore-P`` adds an echoed centre in P % of the scans, seeded by the row) through the episode driver
    (centres only) on the TRL adapter's rollout, in TRL's messages: ``messages`` (the GRPO prompt with
    the scan text TRL would append, each report as a ``submit_report`` call, the env's replies as tool
    messages, each next scan in the reply that closed the scan before, then :data:`FINAL_REPLY`), ``tools``
    (JSON, as TRL renders them) and the score the env gave."""
    env = tool_env_for(row)
    env.reset(**row)
    transcript: list[dict] = []
    seed = zlib.crc32(str(row["row_id"]).encode())
    drive_now(env.episode(), ScriptedModel(policy, seed, widths=False), transcript=transcript)
    system, user = row["prompt"]
    first, *rest = transcript  # the open scan, which TRL appends to the row's user message
    messages = [system, {**user, "content": user["content"] + first["content"]}]
    names = {}
    for m in rest:
        if m["role"] == "assistant":
            for c in m["tool_calls"]:
                names[c["id"]] = c["function"]["name"]
                messages.append(_call(c["function"]["name"], json.loads(c["function"]["arguments"])))
        else:
            messages.append({"role": "tool", "name": names[m["tool_call_id"]], "content": m["content"]})
    messages.append({"role": "assistant", "content": FINAL_REPLY})
    return {"messages": messages, "tools": json.dumps(tool_schemas_of(env)), "score": env.metrics()["score"],
            "row_id": row["row_id"]}
