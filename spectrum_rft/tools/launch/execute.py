"""Running a plan's steps (source job, dataset, evaluation dataset, evaluator, job) through the fireworks-ai SDK,
stopping at the first failure with the list of what exists by then."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .ids import job_ref
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


FINISHED_JOB_STATES = ("JOB_STATE_COMPLETED", "JOB_STATE_EARLY_STOPPED")  # a job whose output model exists


def _source_job(plan: Plan, client: Any, enter: Callable[[str], None]) -> None:
    """``--source-job``: read the job through the SDK and warm start from its output model (before anything is
    created, so a job with no model refuses the launch with nothing to clean up)."""
    enter("source_job.get")
    name = plan.start["job"]
    account, job_id = job_ref(name, None)
    job = client.reinforcement_fine_tuning_jobs.get(job_id, account_id=account)
    state = getattr(job, "state", None) or "JOB_STATE_UNSPECIFIED"
    output = getattr(getattr(job, "training_config", None), "output_model", None)
    if state not in FINISHED_JOB_STATES or not output:
        raise LaunchError(f"--source-job {name} is {state}" + ("" if output else " with no output model")
                          + f": a warm start needs a finished job ({', '.join(FINISHED_JOB_STATES)}) and its model")
    model = output if output.startswith("accounts/") else f"accounts/{account}/models/{output}"
    plan.start["model"] = model
    plan.job_kwargs["training_config"]["warm_start_from"] = model


def _upload_dataset(client: Any, out: Outcome, enter: Callable[[str], None], *, step: str, kind: str,
                    dataset_id: str, name: str, rows: int, filename: str, data: bytes) -> None:
    enter(f"{step}.create")
    client.datasets.create(dataset_id=dataset_id, dataset={
        "display_name": dataset_id, "eval_protocol": {}, "format": "FORMAT_UNSPECIFIED", "example_count": str(rows)})
    out.created.append({"kind": kind, "name": name, "detail": "created, file not uploaded"})
    enter(f"{step}.upload")
    client.datasets.upload(dataset_id, file=(filename, data, "application/jsonl"))
    out.created[-1]["detail"] = f"{rows} rows uploaded"


def _dataset(plan: Plan, client: Any, out: Outcome, enter: Callable[[str], None]) -> None:
    _upload_dataset(client, out, enter, step="dataset", kind="dataset", dataset_id=plan.dataset_id,
                    name=plan.dataset_name, rows=plan.dataset_rows, filename=plan.dataset_path.name,
                    data=plan.dataset_on_disk.read_bytes())


def _eval_dataset(plan: Plan, client: Any, out: Outcome, enter: Callable[[str], None]) -> None:
    _upload_dataset(client, out, enter, step="evaluation_dataset", kind="evaluation dataset",
                    dataset_id=plan.eval_dataset_id, name=plan.eval_dataset_name or "", rows=len(plan.eval_dataset),
                    filename=plan.eval_dataset_path.name, data=plan.eval_dataset_on_disk.read_bytes())


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
    """Create dataset, evaluation dataset, evaluator and job in that order with the SDK ``client`` (after reading
    the ``--source-job``, when there is one); ``http`` (an httpx.Client)
    PUTs the source tarball to the signed URL (no Fireworks credentials on that request). Stops at the
    first failure; the outcome lists what exists by then. The dataset file must be written
    (:func:`~spectrum_rft.tools.launch.plan.write_dataset`)."""
    out = Outcome()
    current = {"step": ""}

    def enter(step: str) -> None:
        current["step"] = step
        on_step(step)

    try:
        if plan.start["from"] == "source_job":
            _source_job(plan, client, enter)
            log(f"warm start: {plan.start['model']} (the output model of {plan.start['job']})")
        if plan.reuse_dataset:
            log(f"dataset: reusing {plan.reuse_dataset}")
        else:
            _dataset(plan, client, out, enter)
            log(f"dataset: {plan.dataset_name} ({plan.dataset_rows} rows)")
        if plan.evaluation["mode"] == "heldout":
            _eval_dataset(plan, client, out, enter)
            log(f"evaluation dataset: {plan.eval_dataset_name} ({len(plan.eval_dataset)} held-out rows)")
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
    if kinds.get("evaluation dataset", {}).get("detail", "").endswith(" rows uploaded"):
        flags += ["--evaluation-dataset", plan.eval_dataset_id]  # in place of --eval-rows
    elif plan.evaluation["mode"] == "dataset":
        flags += ["--evaluation-dataset", plan.evaluation["dataset"]]
    if plan.reuse_evaluator or kinds.get("evaluator", {}).get("detail") in ("ACTIVE",):
        flags.append("--reuse-evaluator")
    return flags


def resume_replaces(flags: list[str], eval_rows: int | None) -> list[str]:
    """The flags of the failed launch that the resume flags replace (to drop when rerunning): ``--eval-rows N``
    once the held-out rows are uploaded (``--evaluation-dataset`` names them; the two together are refused)."""
    return ["--eval-rows", str(eval_rows)] if "--evaluation-dataset" in flags and eval_rows not in (None, 0) else []
