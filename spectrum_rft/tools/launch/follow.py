"""Following a job after the launch: ``launch --status JOB`` (state, epoch, the job's metrics as the API returns
them, on one screen) and ``launch --resume JOB`` (the SDK's ``reinforcement_fine_tuning_jobs.resume``: the
platform's ``:resume`` of a stopped job), both through the fireworks-ai SDK. The job is named as for a launch
(:func:`~spectrum_rft.tools.launch.ids.job_ref`)."""

from __future__ import annotations

import json
from typing import Any

MAX_METRIC_LINES = 20  # one screen


def job_status(client: Any, account: str, job_id: str) -> dict:
    """The job as the API returns it (JSON field names), through the SDK's ``get``."""
    job = client.reinforcement_fine_tuning_jobs.get(job_id, account_id=account)
    return job.model_dump(mode="json", by_alias=True, exclude_none=True)


def resume_job(client: Any, account: str, job_id: str) -> dict:
    """Resume a stopped job (``POST ...:resume`` through the SDK); the job as the API returns it."""
    job = client.reinforcement_fine_tuning_jobs.resume(job_id, account_id=account, body={})
    return job.model_dump(mode="json", by_alias=True, exclude_none=True)


def _metrics(raw: Any) -> list[str]:
    """The job's ``outputMetrics`` as the API returns them: a JSON object is shown one key a line (at most
    :data:`MAX_METRIC_LINES`), anything else as it is."""
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        parsed = raw
    if isinstance(parsed, dict):
        items = list(parsed.items())
        lines = [f"  {k}: {json.dumps(v) if not isinstance(v, str) else v}" for k, v in items[:MAX_METRIC_LINES]]
        return lines + ([f"  ... and {len(items) - MAX_METRIC_LINES} more (--json shows all)"]
                        if len(items) > MAX_METRIC_LINES else [])
    text = str(parsed)
    return [f"  {text[:400]}" + (" ... (--json shows all)" if len(text) > 400 else "")]


def format_status(job: dict) -> list[str]:
    """One screen: name and state, progress (epoch, percent), where training started, the datasets, the
    platform's status message, and the job's metrics."""
    t = job.get("trainingConfig") or {}
    progress = job.get("jobProgress") or {}
    status = job.get("status") or {}
    start = f"warm start from {t['warmStartFrom']}" if t.get("warmStartFrom") else \
        f"base model {t.get('baseModel', '?')}"
    lines = [f"job {job.get('name', '?')}: {job.get('state', 'JOB_STATE_UNSPECIFIED')}"
             + (f" ({job['displayName']})" if job.get("displayName") else "")]
    if status.get("message") or status.get("code"):
        lines.append(f"status: {status.get('code', '')} {status.get('message', '')}".rstrip())
    parts = [f"{k} {progress[k]}" for k in ("epoch", "percent") if k in progress]
    lines.append("progress: " + (", ".join(p + ("%" if p.startswith("percent") else "") for p in parts) or "n/a")
                 + "".join(f", {k} {progress[k]}" for k in ("totalProcessedRequests", "totalInputRequests",
                                                             "failedRequests") if k in progress))
    lines.append(f"training: {start} -> {t.get('outputModel', '?')}; epochs {t.get('epochs', '?')}, "
                 f"learning rate {t.get('learningRate', '?')}")
    lines.append(f"dataset: {job.get('dataset', '?')}" + (f"; evaluation dataset: {job['evaluationDataset']}"
                                                        if job.get("evaluationDataset") else
                                                        "; evaluation: auto carve-out" if job.get("evalAutoCarveout")
                                                        else "; no evaluation dataset"))
    for k, label in (("createTime", "created"), ("completedTime", "completed")):
        if job.get(k):
            lines.append(f"{label}: {job[k]}")
    if job.get("outputMetrics"):
        lines.append("metrics (outputMetrics, as the API returns them):")
        lines += _metrics(job["outputMetrics"])
    else:
        lines.append("metrics: none reported yet")
    if job.get("outputStats"):
        lines.append("stats (outputStats):")
        lines += _metrics(job["outputStats"])
    return lines
