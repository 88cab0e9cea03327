"""Running a plan's three steps (dataset, evaluator, job) through the fireworks-ai SDK, stopping at the
first failure with the list of what exists by then."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .options import LaunchError
from .plan import Plan

EVALUATOR_POLL_S = 10.0


@dataclass
class Outcome:
    created: list[dict[str, str]] = field(default_factory=list)  # {"kind", "name", "detail"}
    job: dict[str, Any] | None = None
    error: str | None = None
    failed_step: str | None = None


def api_error_text(e: Exception) -> str:
    """One line for an SDK error: the HTTP status and the server's message, or the connection failure."""
    import fireworks  # noqa: PLC0415

    if isinstance(e, fireworks.APIStatusError):
        body = e.body
        msg = None
        if isinstance(body, dict):
            err = body.get("error", body)
            msg = err.get("message") if isinstance(err, dict) else err
        return f"HTTP {e.status_code}: {msg or e.message}"
    if isinstance(e, fireworks.APIConnectionError):
        return f"cannot reach the API ({type(e).__name__}: {e})"
    return f"{type(e).__name__}: {e}"


def _dataset(plan: Plan, client: Any, out: Outcome, enter: Callable[[str], None]) -> None:
    enter("dataset.create")
    client.datasets.create(dataset_id=plan.dataset_id, dataset={
        "display_name": plan.dataset_id, "eval_protocol": {}, "format": "FORMAT_UNSPECIFIED",
        "example_count": str(plan.dataset_rows)})
    out.created.append({"kind": "dataset", "name": plan.dataset_name, "detail": "created, file not uploaded"})
    enter("dataset.upload")
    client.datasets.upload(plan.dataset_id, file=(plan.dataset_path.name, plan.dataset_on_disk.read_bytes(),
                                                  "application/jsonl"))
    out.created[-1]["detail"] = f"{plan.dataset_rows} rows uploaded"


def _evaluator(plan: Plan, client: Any, http: Any, out: Outcome, enter: Callable[[str], None]) -> None:
    enter("evaluator.create")
    client.evaluators.create(evaluator_id=plan.evaluator_id, evaluator={
        "display_name": plan.evaluator_id, "entry_point": plan.entry,
        "description": f"spectrum-rft {plan.entry} (source sha256 {plan.source['sha256'][:16]})"})
    out.created.append({"kind": "evaluator", "name": plan.evaluator_name, "detail": "created, no code"})
    enter("evaluator.get_upload_endpoint")
    name = plan.source["tarball"]
    resp = client.evaluators.get_upload_endpoint(plan.evaluator_id, filename_to_size={name: str(len(plan.tarball))})
    url = (resp.filename_to_signed_urls or {}).get(name)
    if not url:
        raise LaunchError(f"getUploadEndpoint returned no signed URL for {name}")
    enter("evaluator.upload_source")
    r = http.put(url, content=plan.tarball, headers={
        "Content-Type": "application/octet-stream",
        "X-Goog-Content-Length-Range": f"{len(plan.tarball)},{len(plan.tarball)}"})
    if r.status_code >= 400:
        raise LaunchError(f"source upload to the signed URL failed: HTTP {r.status_code}")
    out.created[-1]["detail"] = "created, code uploaded, not validated"
    enter("evaluator.validate_upload")
    client.evaluators.validate_upload(plan.evaluator_id, body={})
    out.created[-1]["detail"] = "created, code uploaded and validated (building)"


def _wait_active(plan: Plan, client: Any, log: Callable[[str], None], sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + plan.evaluator_timeout
    while True:
        ev = client.evaluators.get(plan.evaluator_id)
        state = getattr(ev, "state", None) or "STATE_UNSPECIFIED"
        if state == "ACTIVE":
            return
        if state == "BUILD_FAILED":
            raise LaunchError(f"evaluator {plan.evaluator_name} build failed (see its build log in the "
                              "Fireworks console)")
        if time.monotonic() >= deadline:
            raise LaunchError(f"evaluator {plan.evaluator_name} is still {state} after "
                              f"{plan.evaluator_timeout:g}s (raise --evaluator-timeout, or rerun with "
                              "--reuse-evaluator once it is ACTIVE)")
        log(f"evaluator: {state}, waiting")
        sleep(EVALUATOR_POLL_S)


def execute(plan: Plan, client: Any, http: Any, *, log: Callable[[str], None] = lambda s: None,
            sleep: Callable[[float], None] = time.sleep, on_step: Callable[[str], None] = lambda s: None) -> Outcome:
    """Create dataset, evaluator and job in that order with the SDK ``client``; ``http`` (an httpx.Client)
    PUTs the source tarball to the signed URL (no Fireworks credentials on that request). Stops at the
    first failure; the outcome lists what exists by then. The dataset file must be written
    (:func:`~spectrum_rft.tools.launch.plan.write_dataset`)."""
    out = Outcome()
    current = {"step": ""}

    def enter(step: str) -> None:
        current["step"] = step
        on_step(step)

    try:
        if plan.reuse_dataset:
            log(f"dataset: reusing {plan.reuse_dataset}")
        else:
            _dataset(plan, client, out, enter)
            log(f"dataset: {plan.dataset_name} ({plan.dataset_rows} rows)")
        if plan.reuse_evaluator:
            log(f"evaluator: reusing {plan.evaluator_name}")
        else:
            _evaluator(plan, client, http, out, enter)
        enter("evaluator.get")
        _wait_active(plan, client, log, sleep)
        if out.created and out.created[-1]["kind"] == "evaluator":
            out.created[-1]["detail"] = "ACTIVE"
        log(f"evaluator: {plan.evaluator_name} ACTIVE")

        enter("job.create")
        kwargs = dict(plan.job_kwargs)
        if plan.job_id:
            kwargs["reinforcement_fine_tuning_job_id"] = plan.job_id
        job = client.reinforcement_fine_tuning_jobs.create(dataset=plan.dataset_name,
                                                            evaluator=plan.evaluator_name, **kwargs)
        out.job = {"name": getattr(job, "name", None), "state": getattr(job, "state", None)}
        out.created.append({"kind": "job", "name": out.job["name"] or "(unnamed)", "detail": str(out.job["state"])})
        log(f"job: {out.job['name']} ({out.job['state']})")
    except Exception as e:  # noqa: BLE001 -- every failure is reported with what exists so far
        out.error = str(e) if isinstance(e, LaunchError) else api_error_text(e)
        out.failed_step = current["step"]
    except KeyboardInterrupt:  # still say what exists
        out.error, out.failed_step = "interrupted", current["step"]
    return out


def resume_flags(plan: Plan, out: Outcome) -> list[str]:
    """The flags that rerun the launch without re-creating what ``out`` says exists."""
    flags = []
    kinds = {c["kind"]: c for c in out.created}
    if "dataset" in kinds and kinds["dataset"]["detail"].endswith(" rows uploaded"):
        flags += ["--reuse-dataset", plan.dataset_id]
    elif plan.reuse_dataset:
        flags += ["--reuse-dataset", plan.reuse_dataset]
    if plan.reuse_evaluator or kinds.get("evaluator", {}).get("detail") in ("ACTIVE",):
        flags.append("--reuse-evaluator")
    return flags
