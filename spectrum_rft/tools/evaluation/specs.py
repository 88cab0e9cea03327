"""The models of an evaluation run: names on the command line -> :class:`ModelSpec` (label, litellm
completion params, whether this run starts the model's server)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from spectrum_rft.common.redaction import secrets_by_reference
from spectrum_rft.rollouts.scripted import SCRIPTED_MODEL_PREFIX

DEFAULT_LADDER = ("memoryless", "accumulate", "oracle")
POLICY_PREFIX = SCRIPTED_MODEL_PREFIX  # the scripted baselines as litellm models
PRIVILEGED = {"spectrum/oracle"}
# eval-protocol's McpGym policy caches responses unless told not to: identical first prompts of a row's
# rollouts would come back identical (use_caching: False turns it off); test_spectrum_rft's own default does.
PATH_PARAM_DEFAULTS: dict[str, dict[str, Any]] = {"mcp": {"use_caching": False}}


@dataclass
class ModelSpec:
    """One model of a run: its label in tables and the litellm completion params the entry receives. A key
    given as a param (``--param api_key=...``) is not among them: ``params`` holds ``{"$env": NAME}`` in its
    place and ``secrets`` the value, which reaches the child's environment only (never a file or a log)."""

    label: str
    params: dict[str, Any] = field(default_factory=dict)
    local: bool = False  # started by this run (spectrum_rft.tools.local_llm.local_server, or hf_server when served)
    served: tuple[str, str] | None = None  # hf:DIR@ENGINE: (DIR, ENGINE), served by serve-hf for the run
    secrets: dict[str, str] = field(default_factory=dict, repr=False)  # environment variable -> value

    @property
    def privileged(self) -> bool:
        return self.params.get("model") in PRIVILEGED

    @property
    def display(self) -> str:
        return f"{self.label} (privileged)" if self.privileged else self.label


def _is_policy_name(name: str) -> bool:
    from spectrum_rft.baselines import policies as sp  # noqa: PLC0415

    try:
        sp.make_policy(name)
    except ValueError:
        return False
    return True


def _closest_policy(name: str) -> str | None:
    """The policy name closest to a typo (difflib), or None."""
    import difflib  # noqa: PLC0415

    from spectrum_rft.baselines.policies import POLICY_NAMES  # noqa: PLC0415

    plain = [p for p in POLICY_NAMES if "-" not in p and "+" not in p]
    shaped = {p.split("-")[0]: p for p in POLICY_NAMES if "-" in p and "+" not in p}  # carpet-K: carpet
    close = difflib.get_close_matches(name, plain, n=1)
    if close:
        return close[0]
    close = difflib.get_close_matches(name.split("-")[0], list(shaped), n=1)
    return f"{close[0]}-{name.split('-', 1)[1] if '-' in name else 'K'}" if close else None


def _check_bare_name(name: str) -> None:
    """A bare model name (no ``provider/``) that is neither a policy nor ``local`` must be one litellm knows
    (``litellm.model_cost``), or the run would fail at its first request, minutes later: refuse it now, with
    the closest policy name when it looks like a typo of one."""
    import difflib  # noqa: PLC0415

    import litellm  # noqa: PLC0415

    from spectrum_rft.baselines.policies import POLICY_NAMES  # noqa: PLC0415

    if name in litellm.model_cost:
        return
    close = difflib.get_close_matches(name, ["local", *[p for p in POLICY_NAMES if "-" not in p]], n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"unknown model {name!r}: {hint}not a baseline policy ({', '.join(POLICY_NAMES)}), not 'local', "
                     "and not a model litellm knows; name a served model with its provider (openai/NAME with --api-base)")


HF_PREFIX = "hf:"


def hf_model(name: str) -> tuple[str, str]:
    """``hf:DIR[@ENGINE]`` -> (DIR, ENGINE): a checkpoint directory (or ``smollm2``) served by ``serve-hf`` with a
    model engine (default transformers) for the run; a DIR that is no model directory is refused in one line."""
    from pathlib import Path  # noqa: PLC0415

    def is_model(path: str) -> bool:
        return path == "smollm2" or (Path(path).expanduser() / "config.json").is_file()

    spec = name[len(HF_PREFIX):]
    if is_model(spec):  # the default engine (also a directory with an @ in its path)
        return spec, "transformers"
    model, at, engine = spec.rpartition("@")
    if not model or not engine:
        raise ValueError(f"{name!r}: expected hf:DIR or hf:DIR@ENGINE (a model directory, or smollm2)")
    if not is_model(model):
        raise ValueError(f"{name!r}: {model} is not a model directory (no config.json) and not smollm2")
    return model, engine


def model_specs(names: Sequence[str], *, api_base: str | None = None, tool_choice: str | None = None,
                extra: dict[str, Any] | None = None) -> list[ModelSpec]:
    """Model names -> specs. A bare policy name (``accumulate``, ``carpet-16``) means ``spectrum/<name>``;
    ``local`` is the SmolLM2 server this run starts, ``hf:DIR[@ENGINE]`` a checkpoint it serves with ``serve-hf``
    (:func:`hf_model`); anything else is a litellm model name, given
    ``--api-base`` / ``--tool-choice`` / ``--param`` when set."""
    specs: list[ModelSpec] = []
    extra, secrets = secrets_by_reference(dict(extra or {}), "SPECTRUM_EVAL_SECRET")
    for name in names:
        if name == "local":
            specs.append(ModelSpec("local", {**extra}, local=True, secrets=secrets))
            continue
        if name.startswith(HF_PREFIX):
            own = {**extra, **({"tool_choice": tool_choice} if tool_choice else {})}  # "required": under the grammar
            specs.append(ModelSpec(name, own, local=True, served=hf_model(name), secrets=secrets))
            continue
        model = name
        if not name.startswith(POLICY_PREFIX) and "/" not in name and _is_policy_name(name):
            model = POLICY_PREFIX + name
        if model.startswith(POLICY_PREFIX):
            if not _is_policy_name(model[len(POLICY_PREFIX):]):
                from spectrum_rft.baselines.policies import POLICY_NAMES  # noqa: PLC0415

                close = _closest_policy(model[len(POLICY_PREFIX):])
                hint = f"did you mean {POLICY_PREFIX + close!r}? " if close else ""
                raise ValueError(f"unknown baseline policy model {model!r}: {hint}the policies are "
                                 f"{', '.join(POLICY_NAMES)}")
            specs.append(ModelSpec(model, {"model": model}))
            continue
        if "/" not in model:
            _check_bare_name(model)
        params: dict[str, Any] = {"model": model, **extra}
        if api_base:
            params["api_base"] = api_base
        if tool_choice:
            params["tool_choice"] = tool_choice
        specs.append(ModelSpec(model, params, secrets=secrets))
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"a model is listed twice: {labels}")
    return specs
