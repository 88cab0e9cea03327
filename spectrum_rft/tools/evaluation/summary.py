"""A model's scored rows -> its summary: the table's metrics, the per-scan curve, error counts and
causes, fault totals and skipped scans."""

from __future__ import annotations

import re
from typing import Any, Sequence

from spectrum_rft.common.stats import standard_error
from spectrum_rft.rollouts.failures import (CAUSE_OF_FAULT, FAILURE_CAUSES, MALFORMED_REPLY_TEXT, MISSING_KEY_TEXT,
                                            MODEL_FAILURE, SKIP_MODEL_FAILURE, no_result)
from spectrum_rft.task.reward import is_finite_number, metric_names

METRICS = metric_names("score", "mean_occ", "mean_avail", "memory_gain", "dormant_recall", "scans_skipped")


def _extra_sources(row: dict) -> list[dict]:
    """Where a rollout path leaves the environment's record: ``execution_metadata.extra["spectrum"]``."""
    extra = (row.get("execution_metadata") or {}).get("extra") or {}
    return [d for d in (extra.get("spectrum"), extra) if isinstance(d, dict)]


def _number(v: Any) -> float | None:
    return float(v) if is_finite_number(v) else None


def row_metric(row: dict, name: str) -> float | None:
    """A metric of a scored row (EvaluationRow JSON): the EvaluateResult's, else the environment record's."""
    ev = row.get("evaluation_result")
    if not isinstance(ev, dict):
        return None
    if name == "score":
        return _number(ev.get("score"))
    m = (ev.get("metrics") or {}).get(name)
    if isinstance(m, dict) and m.get("is_score_valid", True) and _number(m.get("score")) is not None:
        return _number(m.get("score"))
    for src in _extra_sources(row):
        if _number(src.get(name)) is not None:
            return _number(src.get(name))
    return None


def per_scan_rewards(row: dict) -> list[float]:
    """The per-scan rewards of a scored row: the EvaluateResult's step_outputs (one per scan), else the
    environment's record in ``execution_metadata.extra``."""
    ev = row.get("evaluation_result")
    if not isinstance(ev, dict):
        ev = {}
    steps = sorted(ev.get("step_outputs") or [], key=lambda st: st.get("step_index", 0))
    if steps:
        return [float(st.get("base_reward") or 0.0) for st in steps]
    for src in _extra_sources(row):
        v = src.get("per_scan_reward")
        if isinstance(v, list):
            return [float(x) for x in v]
    return []


def is_error_row(row: dict) -> bool:
    return ((row.get("rollout_status") or {}).get("code")) == 13  # Status.Code.INTERNAL


# Why a rollout errored: the rollout loop's model-failure causes (extra["spectrum_rollout"]["model_failure"]
# ["cause"], spectrum_rft.rollouts.failures), the same words for errors classified here from the status message.
_CAUSE_TEXT: tuple[tuple[str, re.Pattern], ...] = tuple((cause, re.compile(rx, re.I)) for cause, rx in (
    ("malformed reply", re.escape(MALFORMED_REPLY_TEXT)),  # before http 5xx: litellm words it as one
    ("missing API key", MISSING_KEY_TEXT),  # before http 5xx and bad request: litellm words it as either
    ("connection refused", r"connection refused|APIConnectionError|connection error|connecterror|connect call failed"
                           r"|failed to establish|cannot connect|name or service not known|connection reset"
                           r"|server disconnected|remoteprotocolerror"),
    ("timeout", r"timed? ?out|timeout"),
    ("rate limited", r"rate.?limit|too many requests|\b(?:http|status|code|error)\W{0,3}429\b"),
    ("http 5xx", r"InternalServerError|ServiceUnavailable|bad ?gateway|\b(?:http|status|code|error)\W{0,3}5\d\d\b"
                 r"|\b5\d\d (?:internal|server|service)"),
    ("empty reply", r"no choices|empty (?:reply|response|choices)|without a choice"),
    ("bad request", r"BadRequest|bad request|NotFoundError|AuthenticationError|PermissionDenied|invalid_request"
                    r"|UnprocessableEntity|request rejected|\b(?:http|status|code|error)\W{0,3}4\d\d\b"),
))


def classify_failure_text(text: str | None) -> str:
    """One of :data:`FAILURE_CAUSES` for an error message (eval-protocol's own errors, litellm's)."""
    text = text or ""
    m = re.search(re.escape(MODEL_FAILURE) + r":\s*([A-Za-z0-9 ]+)", text)
    if m:
        for cause in FAILURE_CAUSES:
            if m.group(1).startswith(cause):
                return cause
    for cause, rx in _CAUSE_TEXT:
        if rx.search(text):
            return cause
    return "error"


def _rollout_extra(row: dict) -> dict:
    extra = (row.get("execution_metadata") or {}).get("extra") or {}
    r = extra.get("spectrum_rollout") if isinstance(extra, dict) else None
    return r if isinstance(r, dict) else {}


def error_cause(row: dict) -> str | None:
    """Why an error row errored (None for a row that did not): the rollout processor's
    ``model_failure.cause`` when it recorded one, else classified from the status message."""
    if not is_error_row(row):
        return None
    failure = _rollout_extra(row).get("model_failure")
    if isinstance(failure, dict) and failure.get("cause") in FAILURE_CAUSES:
        return str(failure["cause"])
    return classify_failure_text((row.get("rollout_status") or {}).get("message"))


def _env_record(row: dict) -> dict:
    extra = (row.get("execution_metadata") or {}).get("extra") or {}
    rec = extra.get("spectrum") if isinstance(extra, dict) else None
    return rec if isinstance(rec, dict) else {}


def row_faults(row: dict) -> dict[str, int]:
    """The environment's fault counts of a row (``extra["spectrum"]["faults"]``)."""
    faults = _env_record(row).get("faults")
    if not isinstance(faults, dict):
        return {}
    return {str(k): int(v) for k, v in faults.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v}


def row_scans(row: dict) -> tuple[int, int] | None:
    """(scans skipped, scans) of a row with an environment record; None without one."""
    rec = _env_record(row)
    n = rec.get("n_scans")
    if not isinstance(n, int) or isinstance(n, bool):
        per_scan = rec.get("per_scan_reward")
        n = len(per_scan) if isinstance(per_scan, list) else None
    skipped = rec.get("scans_skipped")
    if not n or not isinstance(skipped, (int, float)) or isinstance(skipped, bool):
        return None
    return int(skipped), int(n)


def fault_group(kind: str) -> str:
    """The summary's fault groups: LLM failures, skipped scans, invalid reports, other refusals."""
    if kind.startswith("llm_"):
        return "llm failures"
    if kind.startswith("skip_"):
        return "skipped scans"
    if kind.startswith("invalid_"):
        return "invalid reports"
    return "refusals"


def summarize(rows: Sequence[dict]) -> dict[str, Any]:
    """Means over rows of the table's metrics, the mean per-scan reward curve, error counts and causes,
    fault totals and skipped scans. A model whose numbers are no result (:func:`~spectrum_rft.rollouts.failures.
    no_result`: it never answered, or most of its scans were skipped because its requests failed) has
    ``failed`` (the reason) and no metric and no curve: they would be empty reports' scores."""
    out: dict[str, Any] = {}
    for name in METRICS:
        vals = [v for v in (row_metric(r, name) for r in rows) if v is not None]
        out[name] = round(sum(vals) / len(vals), 6) if vals else None
    curves = [per_scan_rewards(r) for r in rows]
    n = max((len(c) for c in curves), default=0)
    cols = [[c[i] for c in curves if len(c) > i] for i in range(n)]
    out["per_scan_reward"] = [round(sum(col) / max(1, len(col)), 6) for col in cols]
    # the standard error of each scan's mean over rows (None with fewer than two rows): the plot's band
    out["per_scan_reward_se"] = [None if (se := standard_error(col)) is None else round(se, 6) for col in cols]
    out["rows"] = len(rows)
    errored = [r for r in rows if is_error_row(r)]
    out["rows_errored"] = len(errored)
    out["first_error"] = (errored[0].get("rollout_status") or {}).get("message") if errored else None
    causes: dict[str, int] = {}
    for r in errored:
        c = error_cause(r) or "error"
        causes[c] = causes.get(c, 0) + 1
    out["error_causes"] = dict(sorted(causes.items(), key=lambda kv: (-kv[1], FAILURE_CAUSES.index(kv[0]))))
    out["error_cause"] = next(iter(out["error_causes"]), None)  # the dominant one
    out["rows_unscored"] = sum(1 for r in rows if not isinstance(r.get("evaluation_result"), dict))
    faults: dict[str, int] = {}
    for r in rows:
        for k, v in row_faults(r).items():
            faults[k] = faults.get(k, 0) + v
    out["faults"] = dict(sorted(faults.items(), key=lambda kv: (-kv[1], kv[0])))
    groups: dict[str, int] = {}
    for k, v in faults.items():
        groups[fault_group(k)] = groups.get(fault_group(k), 0) + v
    out["fault_groups"] = dict(sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])))
    llm = {cause: v for k, v in faults.items() if (cause := CAUSE_OF_FAULT.get(k))}
    out["llm_failure_cause"] = max(llm, key=lambda c: llm[c]) if llm else None
    scans = [x for x in (row_scans(r) for r in rows) if x is not None]
    out["scans_skipped_total"] = sum(k for k, _ in scans)
    out["scans_total"] = sum(n for _, n in scans)
    out["scans_skipped_model"] = faults.get("skip_" + SKIP_MODEL_FAILURE, 0)
    out["failed"] = no_result(out["rows"], out["rows_errored"], scans=out["scans_total"],
                              skipped=out["scans_skipped_total"], skipped_by_model=out["scans_skipped_model"],
                              cause=out["error_cause"] or out["llm_failure_cause"])
    if out["failed"]:
        out.update({name: None for name in METRICS}, per_scan_reward=[], per_scan_reward_se=[])
    return out
