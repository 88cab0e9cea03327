"""The spectrum task as a TRL environment: ``GRPOTrainer(environment_factory=...)`` over :class:`SpectrumEnv`.

TRL's contract (trl 1.16, ``GRPOTrainer(environment_factory=...)``): the factory is called with no
arguments and instances are reused ("construct once, reset often"); ``reset(**row_columns)`` starts a
rollout and returns text that TRL appends to the last user message; **every public method is a
tool** (trl 1.16: ``inspect.getmembers(type(env), inspect.isfunction)`` minus ``reset``/``get_reward`` and ``_``-names), its
JSON schema made by ``transformers.utils.get_json_schema`` from the type hints and Google-style docstring.
TRL collects the tools *before* ``reset`` sees the row, so one instance cannot change its tool set per
row. Hence:

* **One class per tool set and preset** (:attr:`spectrum_rft.task.memory.MemoryMode.tool_set`):
  :func:`tool_env_class` ``(memory_mode, preset)`` makes it (a one-arm run passes it as the factory);
  :func:`environment_factories` is TRL's dict form (rows carry ``environment = environment_name(mode)``).
  The default preset's are named: :data:`SpectrumToolEnv` (``submit_report``; memory modes none, icl,
  scaffold, scrambled), :data:`SpectrumNotepadToolEnv` (+ ``notepad_read``/``notepad_write``; notepad),
  :data:`SpectrumIclNotepadToolEnv` (``submit_report`` with ``notepad_update``; icl_notepad). A row of
  another tool set or preset is refused at ``reset`` (a dataset bug, not model input).
* **One schema.** The tool methods are made from :func:`~spectrum_rft.task.instructions.tool_schemas`
  (:func:`declare`): what TRL renders for the model (``get_json_schema``) is the schema the grammar enforces
  and the env accepts, its band and cap in the descriptions' words (``tests/test_trl_env.py``).
* **The env is the only judge.** A tool method's body hands the arguments, as the model wrote them, to
  :meth:`SpectrumEnv.call_tool`, which refuses bad input with a message for the model (missing or
  mistyped arguments; an argument the schema does not name is ignored). Nothing raises for bad model input. An optional
  argument sent as ``null`` (the generated schema marks it ``nullable``) is dropped, as on the MCP path.
* **Texts.** ``reset`` returns the first scan's text, exactly the in-process path's first user message
  (give the row's last user message empty content to get that message byte for byte). TRL can return text
  only in tool results, so the next scan arrives as on the MCP path: the result of the call that closed
  a scan is ``"<env feedback>\\n\\n<next scan>"`` (``spectrum_rft/rollouts/loop.py``).
* **Turns.** TRL does not tell an environment where one assistant message ends, so each tool call is one
  model turn (``call_tool(..., first=True, last=True)``): the env's call budget still closes a scan after
  ``max_calls_per_scan`` calls without a scored report. Equal to the evaluator for replies with one tool
  call each; a reply with several calls is judged call by call (e.g. a second ``submit_report`` in one
  message scores the next scan here, the evaluator refuses it).
* **Not tools.** :meth:`metrics` is a plain callable attribute (:class:`not_a_tool`), not a bound
  method, so TRL does not offer it to the model. :func:`spectrum_reward` is the reward function: the
  env's score, with memory_gain, dormant_recall, carry_rate and scans_skipped logged per step
  (``log_metric``) and each rollout's row id and band fingerprint logged per completion (``log_extra``).

* **Scan episodes.** A row with ``scan`` = k > 0 (memory modes whose memory travels in the scan text:
  none, scaffold, scrambled; :attr:`~spectrum_rft.task.memory.MemoryMode.memory_in_scan_text`) is one scan of
  the episode: ``reset`` plays scans 1..k-1 with the row's ``echo_history`` policy (:func:`play_prefix`:
  accumulate, so the echo carries every earlier peak; memoryless for rows without the column) and returns
  scan k; the call that closes it ends the rollout (later calls are refused without touching the env) and
  the reward is scan k's score. TRL keeps the whole conversation in context, so this is how the ICL-off
  modes train without the history they are meant to hide (:mod:`.trl_data`). The memoryless policy's
  score on the same scan (a deep copy of the env plays it) is the reference of ``gain_vs_memoryless``.

trl is pinned (1.16.0, the ``train`` extra); ``tests/test_trl_train.py`` runs this adapter inside the real
``GRPOTrainer``. SmolLM2's own chat template cannot render tool calls (trl refuses it); trl's public
``trl.chat_template_utils.qwen2_5_chat_template`` (chatml, the tokens SmolLM2 shares) can
(:mod:`.chat_template`).
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

from spectrum_rft.baselines.policies import ScriptedModel, make_policy
from spectrum_rft.common.stats import half_of, mean
from spectrum_rft.rollouts.driver import drive_now
from spectrum_rft.rollouts.episode import InProcessEpisode
from spectrum_rft.task.environment import SpectrumEnv, env_for_row
from spectrum_rft.task.instructions import tool_schemas
from spectrum_rft.task.memory import MEMORY_MODES, TOOL_SETS
from spectrum_rft.task.memory import memory_mode as get_memory_mode
from spectrum_rft.task.presets import resolve_preset
from spectrum_rft.task.reward import metric_names
from spectrum_rft.task.scan_format import parse_scan, with_next_scan

# what each GRPO step logs: episode metrics, and the scan episode's own gain over the memoryless report
LOGGED_METRICS = (*metric_names("score", "late_mean", "memory_gain", "dormant_recall", "carry_rate", "echo_copy",
                                "scans_skipped"), "gain_vs_memoryless", *metric_names("beyond_current"))


def memoryless_report(scan_text: str) -> dict:
    """The memoryless policy's report on one scan text (its peaks' centres, widths left to the default):
    what the SFT warm start teaches, and the reference of ``gain_vs_memoryless``."""
    policy, scan = make_policy("memoryless"), parse_scan(scan_text)
    assert policy is not None and scan is not None  # a text policy (only the oracle is None), on an env's scan text
    action = policy.act_on([scan])
    return {"center_freqs": action["center_freqs"]}


# Who plays scans 1..k-1 of a scan episode (the row's ``echo_history``), and so what the echo of scan k
# carries: ``accumulate`` (every peak seen so far, up to the region cap: what a model that keeps the echo and
# adds each scan's peaks is shown in a whole scaffold episode; at the cap in a third of scan episodes, where
# "echo + new peaks" cannot fit), ``accumulate-12`` (the same memory keeping the 12 most often seen: the echo
# leaves the report room for a scan's new peaks; issue 40's channel with room) or ``memoryless`` (the previous
# scan's peaks only: the design of RESULTS_memory.md section 10, whose rows carry no such column); or
# ``policy``: the model being trained plays them itself (greedy, one reply per scan: the group sampler's
# :class:`~spectrum_rft.training.spectrum.trl_data.OwnPrefixSampler`), so the echo of scan k is its own previous
# report, the distribution a whole episode shows it; its reports travel in the row's ``prefix_reports``.
SCRIPTED_HISTORIES = ("accumulate", "accumulate-12", "memoryless")
POLICY_HISTORY = "policy"
ECHO_HISTORIES = (*SCRIPTED_HISTORIES, POLICY_HISTORY)


def play_prefix(env: SpectrumEnv, n: int, history: str = "accumulate", reports: list | None = None) -> None:
    """Play the open episode's next ``n`` scans, one model turn each: with the scripted ``history`` policy, or
    (``policy``) the given ``reports`` (each a ``submit_report`` call's arguments, or None for a turn that wrote
    no report: the scan is skipped, as the evaluator scores a scan whose reply carried no valid call; a report
    the env refuses likewise).

    A scripted policy reads each scan's peaks and never the echo, so the real arm (echo: these reports) and the
    scrambled control (echo: random centres of the same count) submit identical prefixes."""
    if history not in ECHO_HISTORIES:
        raise ValueError(f"unknown echo_history {history!r}; choose one of {', '.join(ECHO_HISTORIES)}")
    if history != POLICY_HISTORY:
        drive_now(InProcessEpisode(env, None, until=env.scan_index + n),
                  ScriptedModel(history, read_echo=False, widths=False))
        return
    if n == 0:
        return
    if not isinstance(reports, list) or len(reports) < n:
        raise ValueError(f"echo_history {POLICY_HISTORY!r} needs prefix_reports for the {n} scans before this one "
                         f"(the group sampler plays them with the model), got {reports!r}")
    for args in reports[:n]:
        if isinstance(args, dict):
            res = env.call_tool("submit_report", args, first=True, last=True)
            if res.advanced or res.skipped:
                continue
        env.skip("prefix_no_report")


def scan_metrics(env: SpectrumEnv, scan: int, reference: float | None = None,
                 prefix_faults: dict[str, int] | None = None) -> dict:
    """The metrics of a scan episode: scan ``scan`` alone (skipped if it was never closed), in the names of
    :meth:`SpectrumEnv.metrics`. ``late_mean``/``early_mean`` hold the score when the scan is in that half of
    the episode (the batch's memory_gain_batch is late minus early over rollouts: :func:`spectrum_reward`);
    ``gain_vs_memoryless`` is the score minus ``reference``, the memoryless policy's score on the same scan.
    ``faults`` and ``refusals`` are the scan's own: ``prefix_faults`` (the env's counts once scans 1..k-1 were
    played, which the model's own prefix may have filled) are taken out."""
    m = env.metrics()  # unplayed scans count as skipped empty reports
    before = prefix_faults or {}
    faults = {k: n - before.get(k, 0) for k, n in (m["faults"] or {}).items() if n - before.get(k, 0) > 0}
    m = {**m, "faults": faults}
    records = env.scan_records()
    rec = records[scan - 1] if len(records) >= scan else None
    reward = m["per_scan_reward"][scan - 1]
    half = half_of(scan, env.n_scans)  # the halves of spectrum_rft.common.stats.halves
    out = {k: m[k] for k in ("band_fingerprint", "faults", "seed", "salt", "preset", "memory_mode", "reward_name",
                             "n_scans")}
    out.update(
        score=reward, per_scan_reward=[reward],
        early_mean=reward if half == "early" else None, late_mean=reward if half == "late" else None,
        memory_gain=None,
        scans_skipped=0 if rec is not None and not rec["skipped"] else 1,
        report_size=rec["report_size"] if rec else 0,
        dormant_recall=(rec["dormant_covered"] / rec["dormant_eligible"]) if rec and rec["dormant_eligible"] else None,
        carry_rate=(rec["carry_kept"] / rec["carry_prev"]) if rec and rec["carry_prev"] else None,
        beyond_current=reward - rec["current_part"] if rec else 0.0,
        echo_copy=(rec["echo_kept"] / rec["echo_shown"]) if rec and rec["echo_shown"] else None,
        echo_kept=rec["echo_kept"] if rec else 0,
        peaks_added=rec["peaks_added"] if rec else 0,
        echo_kept_beyond=rec["echo_kept_beyond"] if rec else 0,
        refusals=int(faults.get("invalid_report", 0)),
        memoryless_reward=reference,
        gain_vs_memoryless=None if reference is None else reward - reference,
    )
    return out


class not_a_tool:
    """A method TRL must not expose as a tool. trl 1.16 (pinned) lists tools with
    ``inspect.getmembers(type(env), inspect.isfunction)``: on the class this descriptor is itself (not a
    function), so TRL does not see it; on an instance it is a ``functools.partial`` of the method."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]  # typeshed: a callable; it only copies attributes

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else functools.partial(self.fn, obj)


_JSON_TYPES: dict[str, type] = {"number": float, "integer": int, "string": str, "boolean": bool}
# JSON-schema keywords that get_json_schema cannot write from type hints: the schema's descriptions say them in
# words (tests/test_trl_env.py checks it); the grammar and the env enforce them
UNSAID_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "maxItems")


def _hint(spec: dict) -> Any:
    if spec.get("type") == "array":
        return types.GenericAlias(list, _hint(spec.get("items", {})))  # list[<the items' hint>], made at run time
    return _JSON_TYPES[spec["type"]]


def declare(tool: dict) -> Callable:
    """The method TRL offers the model as ``tool`` (one OpenAI function schema of
    :func:`~spectrum_rft.task.instructions.tool_schemas`).

    Its signature and Google-style docstring are made from the schema, so what ``get_json_schema`` reads back
    is the schema: the name, the description, each parameter's type and description, ``required`` (an
    optional parameter defaults to None: ``nullable``). The keywords type hints cannot carry
    (:data:`UNSAID_KEYWORDS`: the band, the region cap) reach the model in the descriptions' words. The body
    hands the model's arguments, as it wrote them, to the env (:meth:`ToolEnv.call`), which judges
    them (a field the schema does not offer included); an optional argument sent as ``null`` is dropped."""
    fn = tool["function"]
    name = fn["name"]
    params = fn.get("parameters", {})
    props, required = params.get("properties", {}), set(params.get("required", ()))
    nullable = set(props) - required
    order = sorted(props, key=lambda arg: arg not in required)  # a signature lists required parameters first

    def method(self: ToolEnv, *args: Any, **kwargs: Any) -> str:
        arguments = {**dict(zip(order, args)), **kwargs}
        return self.call(name, {k: v for k, v in arguments.items() if not (v is None and k in nullable)})

    annotations: dict[str, Any] = {}
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for arg in order:
        hint = _hint(props[arg]) if arg in required else _hint(props[arg]) | None
        annotations[arg] = hint
        signature.append(inspect.Parameter(arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=hint,
                                           default=inspect.Parameter.empty if arg in required else None))
    method.__name__ = method.__qualname__ = name
    method.__annotations__ = {**annotations, "return": str}
    method.__signature__ = inspect.Signature(signature, return_annotation=str)  # type: ignore[attr-defined]
    docs = "".join(f"\n    {arg}: {props[arg].get('description', arg)}" for arg in order)
    method.__doc__ = fn.get("description", name) + (f"\n\nArgs:{docs}" if docs else "")
    return method


class ToolEnv:
    """One TRL rollout of the spectrum task: the rollout's logic, without tools. The classes TRL gets
    (:func:`tool_env_class`) add the tools of one tool set declared for one preset (:func:`declare`)."""

    TOOL_SET: str | None = None  # the memory modes it serves: MemoryMode.tool_set
    PRESET: str | None = None  # the preset whose tool schemas it declares (its band and cap)
    NAME: str | None = None  # its ``environment`` column in a run that mixes tool sets

    def __init__(self) -> None:
        self._env: SpectrumEnv | None = None
        self._row_id: str | None = None
        self._scan = 0  # > 0: a scan episode (only scan ``_scan`` is the model's; see play_prefix)
        self._reference: float | None = None
        self._prefix_faults: dict[str, int] = {}

    def reset(self, **row: Any) -> str:
        """Start a rollout of ``row`` (a dataset row: ``row_id`` or ``id``, and ``environment_context`` as
        :func:`spectrum_rft.rollouts.dataset.make_rows` writes it); returns the first scan's text."""
        ctx = row.get("environment_context")
        if not isinstance(ctx, dict):
            raise TypeError("the row has no environment_context (see spectrum_rft.rollouts.dataset.make_rows)")
        ctx = {k: v for k, v in ctx.items() if v is not None}  # a datasets struct column fills absent keys with None
        row_id = row.get("row_id") or row.get("id") or ctx.get("row_id")
        if not isinstance(row_id, str) or not row_id:
            raise ValueError("the row has no row_id (the band seed is derived from it)")
        env, seed = env_for_row(row_id, {"environment_context": ctx})
        if env.config.memory.tool_set != self.TOOL_SET:
            raise ValueError(f"row {row_id!r} has memory_mode {env.config.memory_mode!r}, but {type(self).__name__} "
                             f"serves the modes with tool set {self.TOOL_SET!r}; use tool_env_class(memory_mode, "
                             f"preset)")
        if resolve_preset(env.config.preset) != self.PRESET:
            raise ValueError(f"row {row_id!r} has preset {env.config.preset!r}, but {type(self).__name__} declares "
                             f"the tools of preset {self.PRESET!r} (its band and cap); use tool_env_class(memory_mode, "
                             f"preset)")
        env.reset(seed)
        scan = row.get("scan") or 0
        if not isinstance(scan, int) or isinstance(scan, bool) or not 0 <= scan <= env.n_scans:
            raise ValueError(f"row {row_id!r}: scan must be an int in 0..{env.n_scans} (0: the whole episode)")
        reference, prefix_faults = None, {}
        if scan:
            if not env.config.memory.memory_in_scan_text:
                raise ValueError(f"row {row_id!r}: scan episodes need a memory mode whose memory travels in the scan "
                                 f"text (got {env.config.memory_mode!r})")
            history = row.get("echo_history") or "memoryless"  # rows made before the column: section 10's design
            play_prefix(env, scan - 1, history, row.get("prefix_reports"))
            if history == POLICY_HISTORY:  # the model's own prefix may have been refused (scripted ones never are)
                prefix_faults = dict(env.metrics()["faults"] or {})
            ref = copy.deepcopy(env)
            ref.call_tool("submit_report", memoryless_report(ref.observation()["prompt"]), first=True, last=True)
            reference = ref.scan_records()[scan - 1]["reward"]
        self._env, self._row_id, self._scan, self._reference = env, row_id, scan, reference
        self._prefix_faults = prefix_faults
        return env.observation()["prompt"]

    @property
    def done(self) -> bool:
        """Whether the rollout is over (the episode's last scan, or a scan episode's scan, is closed); False
        before ``reset``."""
        env = self._env
        return env is not None and (env.done or bool(self._scan) and env.scan_index >= self._scan)

    @not_a_tool
    def metrics(self) -> dict:
        """The env's episode metrics (score, memory_gain, dormant_recall, carry_rate, scans_skipped,
        band_fingerprint, per_scan_reward, faults...; unplayed scans count as skipped) and the row id."""
        env = self._started()
        if not self._scan:
            return {**env.metrics(), "row_id": self._row_id, "scan": 0}
        return {**scan_metrics(env, self._scan, self._reference, self._prefix_faults), "row_id": self._row_id,
                "scan": self._scan}

    @not_a_tool
    def episode(self) -> InProcessEpisode:
        """The open rollout as the episode driver plays it (:func:`~spectrum_rft.rollouts.driver.drive_now`):
        its env from the open scan on, done when the rollout is, each next scan in the result that closed the
        scan before (the text :meth:`call` answers)."""
        return InProcessEpisode(self._started(), None, until=self._scan or None, scans_in_tool_results=True)

    def _started(self) -> SpectrumEnv:
        if self._env is None:
            raise RuntimeError("call reset(**row) first")
        return self._env

    @not_a_tool
    def call(self, name: str, arguments: Any) -> str:
        """Hand one tool call, as the model wrote it, to the env (one model turn); the text for the model."""
        env = self._env
        if env is None:
            return "Error: the episode has not started. The call was ignored."
        if self.done and not env.done:  # a scan episode whose scan is closed (the env has more scans)
            return f"Error: this rollout ended with scan {self._scan}. The call was ignored."
        res = env.call_tool(name, arguments, first=True, last=True)
        if (res.advanced or res.skipped) and not env.done and not self._scan:
            return with_next_scan(res.content, env.observation()["prompt"])
        return res.content


def scan_prompt(row: dict) -> list[dict]:
    """The row's prompt with the first scan's text in its last user message: what the model reads when no
    TRL environment appends it (``spectrum-rft train --sampler group``); byte for byte the env path's."""
    env = tool_env_for(row)
    obs = env.reset(**row)
    *head, last = row["prompt"]
    return [*head, {**last, "content": last["content"] + obs}]


def message_calls(message: Any) -> list[dict]:
    """The tool calls of an assistant message as TRL parses it (``tool_calls``, OpenAI-shaped or bare), as
    ``{"name", "arguments"}`` dicts in order; anything that is not a call is left out."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    out = []
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function", call) if isinstance(call, dict) else None
        if isinstance(fn, dict):
            out.append({"name": fn.get("name"), "arguments": fn.get("arguments")})
    return out


# The columns of a dataset row that ToolEnv.reset reads (and so the ones a judge of the row needs: the band,
# the scan, and who played the scans before it, which sets the echo the model was shown)
ROW_KEYS = ("row_id", "scan", "echo_history", "prefix_reports", "environment_context")


def judge(row: dict, message: dict | None) -> ToolEnv:
    """A fresh env for ``row`` (the same band and scan as every other completion of the row) that has judged
    the completion ``message`` (an assistant message as TRL parses it: ``tool_calls`` in order, each one
    model turn, as on the env path). A completion without tool calls leaves the scan unreported (skipped,
    scored as an empty report). The env alone scores; nothing is read from the text but the calls."""
    env = tool_env_for(row)
    env.reset(**row)
    for call in message_calls(message):
        env.call(str(call["name"] or ""), call["arguments"])  # the env refuses bad input with a message
        if env.done:
            break
    return env


_CLASS_NAMES = dict(zip(TOOL_SETS, ("SpectrumToolEnv", "SpectrumNotepadToolEnv", "SpectrumIclNotepadToolEnv")))
_CLASSES: dict[tuple[str, str], type[ToolEnv]] = {}


def tool_env_class(memory_mode: str, preset: str = "default") -> type[ToolEnv]:
    """The environment class (TRL ``environment_factory``) whose tools are memory mode ``memory_mode``'s,
    declared from ``tool_schemas(memory_mode, preset)`` (:func:`declare`): what the model reads is the schema
    the grammar enforces and the env accepts. One class per tool set and preset (the modes of a tool set
    share their tools); it refuses a row of another tool set or preset."""
    tool_set = get_memory_mode(memory_mode).tool_set  # a ValueError for an unknown mode
    preset = resolve_preset(preset)  # ... and an unknown preset
    cls = _CLASSES.get((tool_set, preset))
    if cls is None:
        name = _CLASS_NAMES.get(tool_set, f"SpectrumToolEnv_{tool_set}")
        suffix = "" if preset == resolve_preset("default") else f"@{preset}"
        tools = {t["function"]["name"]: declare(t) for t in tool_schemas(memory_mode, preset)}
        cls = type(name + suffix.replace("@", "_").replace("-", "_"), (ToolEnv,),
                   {"TOOL_SET": tool_set, "PRESET": preset, "NAME": f"spectrum-{tool_set}{suffix}",
                    "__module__": __name__, "__doc__": f"One TRL rollout of the memory modes with tool set "
                    f"{tool_set!r} on preset {preset!r}.", **tools})
        _CLASSES[(tool_set, preset)] = cls
    return cls


def environment_name(memory_mode: str, preset: str = "default") -> str:
    """The ``environment`` column of a row in a run that mixes tool sets (:func:`environment_factories`)."""
    name = tool_env_class(memory_mode, preset).NAME
    assert name is not None  # tool_env_class names every class it makes (only the base ToolEnv has none)
    return name


def environment_factories(preset: str = "default") -> dict[str, type[ToolEnv]]:
    """TRL's dict form of ``environment_factory``: one entry per tool set (of the registered memory modes)."""
    return {environment_name(mode, preset): tool_env_class(mode, preset) for mode in MEMORY_MODES}


def tool_env_for(row: dict) -> ToolEnv:
    """A fresh environment of ``row``'s memory mode and preset (not yet reset)."""
    ctx = row["environment_context"]
    return tool_env_class(ctx["memory_mode"], ctx.get("preset") or "default")()


# The default preset's classes, by name (what a one-arm run on the default preset passes as the factory)
TOOL_ENV_CLASSES: tuple[type[ToolEnv], ...] = tuple(
    tool_env_class(next(m for m in MEMORY_MODES if get_memory_mode(m).tool_set == ts)) for ts in TOOL_SETS)
SpectrumToolEnv, SpectrumNotepadToolEnv, SpectrumIclNotepadToolEnv = TOOL_ENV_CLASSES


def tool_names(env: Any) -> set[str]:
    """The tools TRL exposes for ``env`` (an instance, or its class): public functions of its class other than
    reset/get_reward (trl 1.16's rule)."""
    cls = env if isinstance(env, type) else type(env)
    by_class = {n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)}
    return {n for n in by_class if n not in ("reset", "get_reward") and not n.startswith("_")}


def spectrum_reward(environments: list[ToolEnv], log_metric: Callable | None = None,
                    log_extra: Callable | None = None, on_metrics: Callable | None = None, **_: Any) -> list[float]:
    """TRL reward function: each rollout's env score. Logs the batch means of :data:`LOGGED_METRICS`
    (metrics that are None for an episode, e.g. carry_rate with no earlier report, are left out of the
    mean) and, per completion, the row id, scan, band fingerprint and those metrics. Two estimators, two
    names: whole episodes log ``memory_gain``, the mean of each episode's late-minus-early halves; scan
    episodes (one scan each, memory_gain None) log ``memory_gain_batch``, the batch's mean score on late
    scans minus its mean on early ones. ``on_metrics`` gets the rollouts' metrics (computed once here) for a
    record of its own."""
    ms = [env.metrics() for env in environments]
    if on_metrics is not None:
        on_metrics(ms)
    if log_metric is not None:
        for name in LOGGED_METRICS:
            value = mean([m.get(name) for m in ms])
            if value is not None:
                log_metric(f"spectrum/{name}", float(value))
        if any(m.get("scan") for m in ms):
            early, late = mean([m.get("early_mean") for m in ms]), mean([m.get("late_mean") for m in ms])
            if early is not None and late is not None:
                log_metric("spectrum/memory_gain_batch", float(late - early))
    if log_extra is not None:
        for name in ("row_id", "scan", "band_fingerprint", *LOGGED_METRICS):
            log_extra(name, [m.get(name) for m in ms])
    return [float(m["score"]) for m in ms]
