"""The scripted reference policies served as litellm models: ``{"model": "spectrum/accumulate"}``.

Both rollout paths and both ``@evaluation_test`` entries then run a baseline exactly like a real model:
through ``litellm.acompletion``, reading only the messages they are sent, answering with tool calls. So a
baseline measured locally is measured by the same machinery the cloud uses for the trained model.

Call :func:`prepare` with the completion parameters before a rollout (the rollout processors do, through an
injected hook): for a ``spectrum/`` model it makes the provider known to litellm (:func:`register`,
idempotent); it is explicit, never done at import.

What each model does with the messages it is sent:

* It reads every scan it can see (``user`` or ``tool`` messages with the scan header), oldest first, and
  plays the named policy of :mod:`spectrum_rft.baselines.policies` on them (the text is parsed by
  :mod:`spectrum_rft.task.scan_format`, like everything that reads it). With an ICL-off window it sees one scan,
  so ``spectrum/accumulate`` is only as good as the memory channel the environment offers (the scaffold
  echo, the notepad, or the full ICL history): exactly what a memory arm measures.
* With notepad tools it calls ``notepad_read`` first, then ``notepad_write`` + ``submit_report``;
  with a ``notepad_update`` field (``icl_notepad``) it fills it. Notepad text is read as remembered centres.
* When no scan is open (the last message is a scan's acknowledgement) it answers in plain text.
* ``spectrum/oracle`` is PRIVILEGED: it is told which row it plays. For ``spectrum/`` models every
  ``litellm.acompletion`` of both rollout transports carries
  ``metadata={"spectrum_row": {"row_id": ..., "dataset_info": <the row's input_metadata.dataset_info>}}``
  (:func:`spectrum_rft.rollouts.scripted.row_metadata`); the oracle rebuilds that row's environment
  (:func:`spectrum_rft.task.environment.env_for_row` + ``reset``) and reports its true transmitters, after
  checking that the scan it is shown is that row's. Without the metadata it answers in plain text saying
  so (no tool call). Labelled so in every table.

The one piece of process-wide state is litellm's: :func:`register` adds the ``spectrum`` provider to
litellm's global ``custom_provider_map`` (once, idempotent; never at import). The models themselves keep
no state between calls: each answer is computed from the messages (and, for the oracle, the row) it gets.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import litellm
from litellm import CustomLLM, ModelResponse

from spectrum_rft.baselines import policies as sp
from spectrum_rft.rollouts.scripted import ROW_METADATA_KEY, SCRIPTED_MODEL_PREFIX, is_scripted_model
from spectrum_rft.task import scan_format
from spectrum_rft.task.environment import env_for_row
from spectrum_rft.task.window import is_scan_message, report_call_ids

PROVIDER = SCRIPTED_MODEL_PREFIX.rstrip("/")
METADATA_KEY = ROW_METADATA_KEY  # the litellm ``metadata`` key the transports fill (rollouts.scripted.row_metadata)
_NUM = re.compile(r"-?\d+(?:\.\d+)?")


def _get(msg: Any, key: str) -> Any:
    return msg.get(key) if isinstance(msg, dict) else getattr(msg, key, None)


def _tool_names(tools: list | None) -> set[str]:
    out = set()
    for t in tools or []:
        fn = _get(t, "function") or {}
        name = _get(fn, "name")
        if name:
            out.add(name)
    return out


def _has_notepad_update(tools: list | None) -> bool:
    for t in tools or []:
        fn = _get(t, "function") or {}
        if _get(fn, "name") == "submit_report":
            return "notepad_update" in ((_get(fn, "parameters") or {}).get("properties") or {})
    return False


def _centres_from_text(text: str) -> list[float]:
    return [float(x) for x in _NUM.findall(text or "")]


def truth_for_row(row: Any, shown: sp.ParsedScan | None = None) -> tuple[list[tuple[float, float]] | None, str]:
    """PRIVILEGED: the true transmitters of the row named by ``row`` (``{"row_id", "dataset_info"}``, the
    value of :data:`METADATA_KEY`), rebuilt with ``env_for_row`` + ``reset``; (None, why) when it cannot be
    had. With ``shown`` (the scan the model is shown) the row's band must have rendered that very scan."""
    if not isinstance(row, dict) or not isinstance(row.get("row_id"), str):
        return None, (f"oracle: no row to play (litellm metadata[{METADATA_KEY!r}] with row_id and dataset_info "
                      "is absent; the rollout transport must pass it)")
    info = row.get("dataset_info")
    if info is not None and not isinstance(info, dict):
        return None, f"oracle: metadata[{METADATA_KEY!r}]['dataset_info'] is not an object"
    try:
        env, seed = env_for_row(row["row_id"], info)
        env.reset(seed)
    except ValueError as e:
        return None, f"oracle: cannot rebuild row {row['row_id']!r}: {e}"
    if shown is not None:
        k = shown.scan - 1
        mine = scan_format.parse_scan(env.render_scan(k)) if 0 <= k < env.n_scans else None
        if mine is None or (mine.n_scans, mine.band, mine.peaks) != (shown.n_scans, shown.band, shown.peaks):
            return None, (f"oracle: the scan shown is not scan {shown.scan} of row {row['row_id']!r} "
                          "(a per-process salt differs between processes?)")
    return env.truth(), ""


def decide(policy_name: str, messages: list, tools: list | None, row: Any = None,
           truth: list[tuple[float, float]] | None = None) -> tuple[str, list[dict]]:
    """What the named policy answers to ``messages``: (text, tool calls as (name, arguments) dicts).

    The privileged oracle needs the truth: ``truth`` itself (a caller that owns the env), or ``row`` (the
    :data:`METADATA_KEY` value of the call's litellm metadata) to rebuild it from."""
    scans: list[tuple[int, sp.ParsedScan]] = []
    ids = report_call_ids(messages)  # the window's rule: only submit_report results carry scans
    for i, m in enumerate(messages):
        if is_scan_message(m, ids):
            content = _get(m, "content")
            parsed = scan_format.parse_scan(content if isinstance(content, str) else "")
            if parsed is not None:
                scans.append((i, parsed))
    if not scans:
        return "I see no scan to report on.", []
    last_idx, current = scans[-1]
    after = messages[last_idx + 1:]
    # Has this scan already been reported? (an acknowledgement of a submit_report after it, no newer scan)
    if any(_get(m, "role") == "tool" and _get(m, "tool_call_id") in ids
           and scan_format.is_scan_recorded(str(_get(m, "content") or "")) for m in after):
        return "All scans so far are reported.", []

    names = _tool_names(tools)
    notepad_tools = {"notepad_read", "notepad_write"} <= names
    notepad_text: str | None = None
    if notepad_tools:
        reads = [m for m in after if _get(m, "role") == "tool" and _get(m, "name") == "notepad_read"]
        if not reads:
            # find a read result by tool_call id when the transport does not set ``name``
            ids = {tc["id"] for m in after if _get(m, "role") == "assistant"
                   for tc in (_get(m, "tool_calls") or []) if (tc.get("function") or {}).get("name") == "notepad_read"}
            reads = [m for m in after if _get(m, "role") == "tool" and _get(m, "tool_call_id") in ids]
        if not reads:
            return "", [{"name": "notepad_read", "arguments": {}}]
        notepad_text = str(_get(reads[-1], "content") or "")
    elif _has_notepad_update(tools):
        notepad_text = current.notepad or ""

    history = [p for _, p in scans]
    if policy_name == "oracle":
        if truth is None:
            truth, why = truth_for_row(row, current)
            if truth is None:
                return why, []
        action = sp.oracle_report(truth)
    else:
        policy = sp.make_policy(policy_name)
        assert policy is not None
        if notepad_text is not None and policy_name == "accumulate":
            remembered = _centres_from_text(notepad_text)
            if remembered:
                history = [sp.ParsedScan(0, current.n_scans, current.band, [], remembered, current.max_regions),
                           *history]
        action = policy.act_on(history)
    calls = []
    if notepad_tools:
        calls.append({"name": "notepad_write",
                      "arguments": {"text": ", ".join(f"{c:.1f}" for c in action["center_freqs"])}})
    elif _has_notepad_update(tools):
        action = {**action, "notepad_update": ", ".join(f"{c:.1f}" for c in action["center_freqs"])}
    calls.append({"name": "submit_report", "arguments": action})
    return "", calls


def _response(model: str, text: str, calls: list[dict]) -> ModelResponse:
    tool_calls = [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for c in calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return ModelResponse(
        id=f"spectrum-{uuid.uuid4().hex[:12]}",
        created=int(time.time()),
        model=f"{PROVIDER}/{model}",
        choices=[{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    )


def policy_request(policy_name: str, truth: list[tuple[float, float]] | None = None):
    """The named policy as a chat completion request, ``request(messages, tools)``, in this process (no
    litellm routing): the model of the episode driver's :class:`~spectrum_rft.rollouts.model_calls.ModelCaller`
    for a caller that owns the env (``truth``: the oracle's, from that env)."""
    sp.make_policy(policy_name)  # unknown names fail loudly

    async def request(messages: list, tools: list | None) -> ModelResponse:
        text, calls = decide(policy_name, messages, tools, truth=truth)
        return _response(policy_name, text, calls)

    return request


class SpectrumPolicyLLM(CustomLLM):
    """litellm handler for ``spectrum/<policy>`` models."""

    def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> ModelResponse:
        optional = kwargs.get("optional_params") or {}
        metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
        name = model.split("/", 1)[-1]
        sp.make_policy(name)  # unknown names fail loudly
        text, calls = decide(name, messages, optional.get("tools"), row=metadata.get(METADATA_KEY))
        return _response(name, text, calls)

    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> ModelResponse:
        return self.completion(model, messages, *args, **kwargs)


_HANDLER = SpectrumPolicyLLM()


def register() -> None:
    """Make ``spectrum/<policy>`` models known to litellm (idempotent)."""
    if not any(p.get("provider") == PROVIDER for p in litellm.custom_provider_map):
        litellm.custom_provider_map = [*litellm.custom_provider_map,
                                       {"provider": PROVIDER, "custom_handler": _HANDLER}]
        litellm.utils.custom_llm_setup()


def is_policy_model(model: str | None) -> bool:
    return is_scripted_model(model)


def prepare(completion_params: dict) -> None:
    """Before a rollout with ``completion_params``: for a ``spectrum/<policy>`` model, make the provider
    known to litellm (idempotent); nothing for any other model."""
    if is_policy_model((completion_params or {}).get("model")):
        register()
