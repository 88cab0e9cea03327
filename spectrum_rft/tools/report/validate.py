"""Validation of one EvaluationRow JSON object into a :class:`Rollout` (what the report needs of a row)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from spectrum_rft.rollouts.failures import SKIP_MODEL_FAILURE
from spectrum_rft.tools.evaluation.summary import error_cause, per_scan_rewards, row_metric
from spectrum_rft.rollouts.dataset import is_heldout
from spectrum_rft.task.reward import metric_names

METRICS = metric_names("score", "memory_gain", "dormant_recall", "carry_rate")  # the per-epoch analysis
OPTIONAL_METRICS = METRICS[1:]
# the model-by-model table (mean and SE over rows): eval's headline numbers and the memory diagnostics
TABLE_METRICS = metric_names("score", "mean_occ", "mean_avail", "memory_gain", "dormant_recall", "beyond_current")
STATUS_INTERNAL = 13  # eval-protocol Status.Code.INTERNAL: a failed rollout
MAX_EPOCH = 10**6
MAX_ABS_VALUE = 1e9  # scores and metrics are O(1); anything beyond this is corrupt input, not data


class ReportError(Exception):
    """Unusable input or options; the message is for the user."""


class RowError(ValueError):
    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


@dataclass(frozen=True)
class Rollout:
    """One evaluated rollout, reduced to what the report needs."""

    where: str  # FILE:LINE or DB#rollout_id
    run: str
    input_index: int
    seq: int  # position in the input (stable tie-break)
    row_id: str
    rollout_id: str | None
    run_id: str | None
    experiment_id: str | None
    epoch: int | None
    created_at: str | None
    score: float
    values: dict[str, float | None]  # OPTIONAL_METRICS
    fingerprint: str | None
    prompt: str | None
    memory_mode: str | None
    errored: bool
    model: str | None = None  # input_metadata.completion_params.model
    cause: str | None = None  # an errored rollout's cause (spectrum_rft.rollouts.failures.FAILURE_CAUSES)
    scans: int = 0  # the env's record: scans of the episode (0: no record) ...
    skipped: int = 0  # ... skipped (scored as empty reports) ...
    skipped_by_model: int = 0  # ... of which because every model request failed
    source: str = ""  # the input's label (an eval folder's name): ``run`` before a split by model
    per_scan: tuple[float, ...] = ()  # the per-scan rewards (step_outputs, else the env's record)
    table: tuple[tuple[str, float], ...] = ()  # TABLE_METRICS present on the row (eval's own reading)
    heldout: bool = False  # a held-out evaluation row of a launch (environment_context["split"] == "heldout")


def finite(x: Any) -> TypeGuard[float]:
    """A usable number: finite and within +-MAX_ABS_VALUE (so means and fits cannot overflow)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= MAX_ABS_VALUE


def _obj(parent: dict, key: str, where: str, path: str) -> dict | None:
    """``parent[key]`` if it is an object, None if absent/null; a RowError if it is something else."""
    v = parent.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise RowError(where, f"{path} must be an object, got {type(v).__name__}")
    return v


def _metric_value(name: str, spectrum: dict | None, metrics: dict | None, where: str) -> float | None:
    if spectrum is not None and name in spectrum:
        v = spectrum[name]
        if v is None:
            return None
        if not finite(v):
            raise RowError(where, f"execution_metadata.extra.spectrum.{name} must be a finite number or null, "
                                  f"got {_show(v)}")
        return float(v)
    if metrics is not None and name in metrics:
        m = metrics[name]
        if m is None:
            return None
        if not isinstance(m, dict):
            raise RowError(where, f"evaluation_result.metrics.{name} must be an object, got {type(m).__name__}")
        if m.get("is_score_valid", True) is False:
            return None
        v = m.get("score")
        if not finite(v):
            raise RowError(where, f"evaluation_result.metrics.{name}.score must be a finite number, got {_show(v)}")
        return float(v)
    return None


def _fingerprint(spectrum: dict | None, metrics: dict | None, where: str) -> str | None:
    if spectrum is not None and spectrum.get("band_fingerprint") is not None:
        fp = spectrum["band_fingerprint"]
        if not isinstance(fp, str) or not fp:
            raise RowError(where, f"execution_metadata.extra.spectrum.band_fingerprint must be a non-empty string, "
                                  f"got {_show(fp)}")
        return fp
    m = metrics.get("band_fingerprint") if metrics is not None else None
    if isinstance(m, dict):
        data = m.get("data")
        if isinstance(data, dict) and isinstance(data.get("value"), str) and data["value"]:
            return data["value"]
        reason = m.get("reason")
        if isinstance(reason, str):
            hit = re.fullmatch(r"band_fingerprint=(\S+)", reason.strip())
            if hit:
                return hit.group(1)
    return None


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def parse_row(obj: Any, where: str, run: str = "run", input_index: int = 0, seq: int = 0) -> Rollout | None:
    """An EvaluationRow JSON object -> :class:`Rollout`; None for a row not evaluated yet (no
    ``evaluation_result``: a rollout in progress). Raises :class:`RowError` for a malformed row."""
    if not isinstance(obj, dict):
        raise RowError(where, f"expected an EvaluationRow object, got {type(obj).__name__}")
    if "id" in obj and "environment_context" in obj and "evaluation_result" not in obj:
        return None  # a raw dataset row (make_spectrum_dataset's compact format): input, not a result
    if not any(k in obj for k in ("input_metadata", "evaluation_result", "execution_metadata", "messages")):
        raise RowError(where, "not an EvaluationRow (none of input_metadata, evaluation_result, "
                              "execution_metadata, messages)")
    im = _obj(obj, "input_metadata", where, "input_metadata") or {}
    em = _obj(obj, "execution_metadata", where, "execution_metadata") or {}
    er = _obj(obj, "evaluation_result", where, "evaluation_result")
    if er is None:
        return None
    score = er.get("score")
    if not finite(score):
        raise RowError(where, f"evaluation_result.score must be a finite number, got {_show(score)}")
    metrics = _obj(er, "metrics", where, "evaluation_result.metrics")
    extra = _obj(em, "extra", where, "execution_metadata.extra")
    spectrum = _obj(extra, "spectrum", where, "execution_metadata.extra.spectrum") if extra else None

    row_id = im.get("row_id")
    if not isinstance(row_id, str) or not row_id:
        raise RowError(where, f"input_metadata.row_id must be a non-empty string, got {_show(row_id)}")
    info = _obj(im, "dataset_info", where, "input_metadata.dataset_info") or {}
    ctx = _obj(info, "environment_context", where, "input_metadata.dataset_info.environment_context")
    ctx = ctx if ctx is not None else info
    epoch = ctx.get("epoch")
    if epoch is not None and not (isinstance(epoch, int) and not isinstance(epoch, bool) and 0 <= epoch < MAX_EPOCH):
        raise RowError(where, f"environment_context.epoch must be a non-negative integer, got {_show(epoch)}")
    status = _obj(obj, "rollout_status", where, "rollout_status") or {}
    ids = {}
    for k in ("rollout_id", "run_id", "experiment_id"):
        v = em.get(k)
        if v is not None and not isinstance(v, str):
            raise RowError(where, f"execution_metadata.{k} must be a string, got {_show(v)}")
        ids[k] = v
    cp = im.get("completion_params")
    model = cp.get("model") if isinstance(cp, dict) and isinstance(cp.get("model"), str) else None
    created = obj.get("created_at")
    prompt, mode = ctx.get("prompt"), ctx.get("memory_mode")
    errored = status.get("code") == STATUS_INTERNAL
    scans, skipped, by_model = _scan_counts(spectrum)
    return Rollout(
        where=where, run=run, input_index=input_index, seq=seq, row_id=row_id, epoch=epoch,
        created_at=created if isinstance(created, str) else None, score=float(score),
        values={m: _metric_value(m, spectrum, metrics, where) for m in OPTIONAL_METRICS},
        fingerprint=_fingerprint(spectrum, metrics, where),
        prompt=prompt if isinstance(prompt, str) else None, memory_mode=mode if isinstance(mode, str) else None,
        errored=errored, model=model, cause=error_cause(obj) if errored else None, scans=scans, skipped=skipped,
        skipped_by_model=by_model, source=run, per_scan=_per_scan(obj), table=_table(obj), heldout=is_heldout(ctx),
        **ids)


def _per_scan(obj: dict) -> tuple[float, ...]:
    """The row's per-scan rewards as eval reads them; none when any is unusable (a curve with holes lies)."""
    try:
        xs = per_scan_rewards(obj)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return ()
    return tuple(xs) if all(finite(x) for x in xs) else ()


def _table(obj: dict) -> tuple[tuple[str, float], ...]:
    """The row's :data:`TABLE_METRICS` as eval reads them (its table's numbers); absent ones left out."""
    out = []
    for m in TABLE_METRICS:
        try:
            v = row_metric(obj, m)
        except (TypeError, ValueError, AttributeError, OverflowError):
            v = None
        if v is not None and finite(v):
            out.append((m, float(v)))
    return tuple(out)


def _count(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else 0


def _scan_counts(spectrum: dict | None) -> tuple[int, int, int]:
    """(scans, skipped, skipped because the model's requests failed) of the env's record; zeros without one."""
    if not spectrum:
        return 0, 0, 0
    faults = spectrum.get("faults")
    if not isinstance(faults, dict):
        faults = {}
    per_scan = spectrum.get("per_scan_reward")
    n = _count(spectrum.get("n_scans")) or (len(per_scan) if isinstance(per_scan, list) else 0)
    return n, min(n, _count(spectrum.get("scans_skipped"))), min(n, _count(faults.get("skip_" + SKIP_MODEL_FAILURE)))


def parse_trl_rollout(obj: Any, where: str, run: str, input_index: int, seq: int, config: dict) -> Rollout:
    """One line of a TRL run's ``rollouts.jsonl`` (``spectrum-rft train``: one line per completion) ->
    :class:`Rollout`. The training step is the epoch axis (every step draws fresh bands); the prompt
    variant and memory mode come from the run's ``config.json``."""
    if not isinstance(obj, dict):
        raise RowError(where, f"expected a rollout object, got {type(obj).__name__}")
    step, row_id, reward = obj.get("step"), obj.get("row_id"), obj.get("reward")
    if not (isinstance(step, int) and not isinstance(step, bool) and 0 <= step < MAX_EPOCH):
        raise RowError(where, f"step must be a non-negative integer, got {_show(step)}")
    if not isinstance(row_id, str) or not row_id:
        raise RowError(where, f"row_id must be a non-empty string, got {_show(row_id)}")
    if not finite(reward):
        raise RowError(where, f"reward must be a finite number, got {_show(reward)}")
    values = {}
    for m in OPTIONAL_METRICS:
        v = obj.get(m)
        if v is not None and not finite(v):
            raise RowError(where, f"{m} must be a finite number or null, got {_show(v)}")
        values[m] = None if v is None else float(v)
    fp = obj.get("band_fingerprint")
    prompt, mode = config.get("prompt"), config.get("memory_mode")
    return Rollout(where=where, run=run, input_index=input_index, seq=seq, row_id=row_id, rollout_id=None,
                   run_id=None, experiment_id=None, epoch=step, created_at=None, score=float(reward), values=values,
                   fingerprint=fp if isinstance(fp, str) and fp else None,
                   prompt=prompt if isinstance(prompt, str) else None,
                   memory_mode=mode if isinstance(mode, str) else None, errored=False, model=config.get("model"),
                   source=run, table=(("score", float(reward)),
                                      *((m, v) for m in TABLE_METRICS if (v := values.get(m)) is not None)))
