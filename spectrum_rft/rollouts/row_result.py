"""A finished rollout row -> its ``EvaluateResult``. Shared by both evaluation entries (in-process and MCP).

The score is never recomputed from message text: it is what the environment recorded, carried as
structured data by the rollout path.
"""

from __future__ import annotations

import math
from typing import Any

from eval_protocol.models import EvaluateResult, EvaluationRow, MetricResult, StepOutput

from spectrum_rft.rollouts.failures import MODEL_FAILURE

# Metric values that are quantities (a MetricResult score); anything else is described in reason and data.
_SCALAR_TYPES = (int, float)


def _metric(name: str, value: Any) -> MetricResult:
    if isinstance(value, bool):
        return MetricResult(score=float(value), reason=f"{name}={value}")
    if isinstance(value, _SCALAR_TYPES):
        v = float(value)
        if math.isfinite(v):
            if name == "seed":  # a 63-bit identifier, not a quantity: exact value in data
                return MetricResult(score=0.0, is_score_valid=False, reason=f"seed={value}", data={"value": value})
            return MetricResult(score=v, reason=f"{name}={v:.6g}")
        return MetricResult(score=0.0, is_score_valid=False, reason=f"{name} is not finite ({value!r})",
                            data={"value": str(value)})
    if value is None:
        return MetricResult(score=0.0, is_score_valid=False, reason=f"{name} is undefined for this episode")
    if isinstance(value, dict):
        total = sum(v for v in value.values() if isinstance(v, (int, float)) and not isinstance(v, bool))
        shown = ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "none"
        return MetricResult(score=float(total), reason=f"{name}: {shown}", data=dict(value))
    if isinstance(value, (list, tuple)):
        return MetricResult(score=0.0, is_score_valid=False, reason=f"{name}: {len(value)} values",
                            data={"values": list(value)})
    return MetricResult(score=0.0, is_score_valid=False, reason=f"{name}={value}", data={"value": value})


def _step_outputs(spectrum: dict) -> list[StepOutput]:
    records = spectrum.get("scan_records") or []
    rewards = spectrum.get("per_scan_reward") or [r.get("reward", 0.0) for r in records]
    n = len(rewards)
    out = []
    for i, reward in enumerate(rewards):
        rec = records[i] if i < len(records) and isinstance(records[i], dict) else {}
        skipped = bool(rec.get("skipped", i >= len(records)))
        out.append(StepOutput(
            step_index=int(rec.get("scan", i + 1)),
            base_reward=float(reward),
            terminated=i == n - 1,
            metrics={k: v for k, v in rec.items() if k not in ("scan", "reward")},
            reason="skipped: scored as an empty report" if skipped else None,
        ))
    return out


def evaluate_row(row: EvaluationRow) -> EvaluationRow:
    """Set ``row.evaluation_result`` from the environment's record of the rollout; return the row.

    Input contract (both rollout paths fill it): reads only

    * ``row.rollout_status``: an error status gives a valid zero score whose reason is the error (for a
      model that never produced a usable reply: ``"rollout error: model never produced a usable reply:
      <cause> ..."``, and ``extra["spectrum_rollout"]["model_failure"]`` becomes the ``model_failure``
      metric, its dict in ``data``);
    * ``row.execution_metadata.extra["spectrum"]``: a dict with every metric of ``SpectrumEnv.metrics()``
      (``score`` is the configured reward averaged over all scans, skipped scans included;
      ``per_scan_reward``: one float per scan) plus ``scan_records``: ``SpectrumEnv.scan_records()``.

    Output: ``score`` = ``spectrum["score"]``; ``metrics`` = every metric as a ``MetricResult``
    (numbers as the score; ``None`` flagged ``is_score_valid=False``; dicts such as ``faults`` summed into
    the score with the counts in ``data``; strings such as ``band_fingerprint`` / ``salt`` in ``reason``
    and ``data``); ``step_outputs`` = one ``StepOutput`` per scan with its reward.
    """
    status = row.rollout_status
    extra = row.execution_metadata.extra if row.execution_metadata is not None else None
    spectrum = extra.get("spectrum") if isinstance(extra, dict) else None

    if status is not None and status.is_error():
        metrics = {k: _metric(k, v) for k, v in spectrum.items() if k != "scan_records"} \
            if isinstance(spectrum, dict) else {}
        rollout = extra.get("spectrum_rollout") if isinstance(extra, dict) else None
        failure = rollout.get("model_failure") if isinstance(rollout, dict) else None
        if isinstance(failure, dict):
            metrics["model_failure"] = MetricResult(score=0.0, is_score_valid=False, data=dict(failure),
                                                    reason=f"{MODEL_FAILURE}: {failure.get('cause')}")
        row.evaluation_result = EvaluateResult(score=0.0, is_score_valid=True, metrics=metrics,
                                               reason=f"rollout error: {status.message}")
        return row
    if not isinstance(spectrum, dict) or not isinstance(spectrum.get("score"), (int, float)):
        row.evaluation_result = EvaluateResult(
            score=0.0, is_score_valid=True,
            reason="no environment record (execution_metadata.extra['spectrum']) on this row: scored 0")
        return row

    score = float(spectrum["score"])
    if not math.isfinite(score):
        score = 0.0
    metrics = {k: _metric(k, v) for k, v in spectrum.items() if k != "scan_records"}
    steps = _step_outputs(spectrum)
    skipped = spectrum.get("scans_skipped")
    faults = spectrum.get("faults") or {}
    reason = (f"{spectrum.get('reward_name', 'reward')} {score:.4f} over {len(steps)} scans"
              + (f", {skipped} skipped" if skipped else "")
              + (f", faults: {', '.join(f'{k}={v}' for k, v in sorted(faults.items()))}" if faults else ""))
    row.evaluation_result = EvaluateResult(score=score, is_score_valid=True, reason=reason, metrics=metrics,
                                           step_outputs=steps)
    return row
