"""The dry run: :func:`~spectrum_rft.tools.launch.execute.execute` with the real SDK over an in-process
transport that records and answers, every file the evaluator upload holds (with its size), and the
equivalent firectl command lines."""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any

from .execute import execute
from .ids import redact_body
from .options import LaunchError
from .plan import Plan

SIGNED_URL_PLACEHOLDER = "https://signed-upload-url.invalid/evaluator-source"


def describe_request(step: str, req: Any, plan: Plan, secrets: list[str]) -> dict:
    """A request as JSON: method, URL, query and JSON body (multipart and tarball bodies summarised)."""
    d: dict[str, Any] = {"step": step, "method": req.method,
                         "url": str(req.url.copy_with(query=None)) if req.url.query else str(req.url)}
    if req.url.query:
        d["query"] = dict(req.url.params)
    ctype = req.headers.get("content-type", "")
    body = req.content if hasattr(req, "_content") else req.read()
    if step == "evaluator.upload_source":
        d["url"] = "<signed URL from evaluator.get_upload_endpoint>"
        d["headers"] = {k: req.headers[k] for k in ("content-type", "x-goog-content-length-range")}
        d["body"] = {k: plan.source[k] for k in ("tarball", "bytes", "sha256")}
        d["body"]["files"] = len(plan.source["files"])
    elif ctype.startswith("multipart/"):
        data = plan.dataset_on_disk.read_bytes()
        kept = plan.dataset_on_disk == plan.dataset_path
        d["multipart"] = {"file": {"filename": plan.dataset_path.name,
                                   "local_path": str(plan.dataset_path) if kept else f"(not kept; --keep writes "
                                                                                     f"{plan.dataset_path})",
                                   "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                   "rows": plan.dataset_rows}}
    elif body:
        d["json"] = redact_body(json.loads(body), secrets)
    return d


def dry_run(plan: Plan, secrets: list[str]) -> list[dict]:
    """Run :func:`execute` with the real SDK client over ``httpx.MockTransport``: the recorded requests are
    exactly what a launch sends (modulo server-assigned names). Nothing leaves the process."""
    import httpx  # noqa: PLC0415
    from fireworks import Fireworks  # noqa: PLC0415

    recorded: list[tuple[str, Any]] = []
    current = {"step": ""}

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        recorded.append((current["step"], request))
        path = request.url.path
        if path.endswith(":getUploadEndpoint"):
            return httpx.Response(200, json={"filenameToSignedUrls": {plan.source["tarball"]: SIGNED_URL_PLACEHOLDER}})
        if request.method == "GET" and "/evaluators/" in path:
            return httpx.Response(200, json={"name": plan.evaluator_name, "state": "ACTIVE"})
        if path.endswith("/reinforcementFineTuningJobs"):
            jid = plan.job_id or "JOB_ID"
            return httpx.Response(200, json={"name": f"accounts/{plan.account_id}/reinforcementFineTuningJobs/{jid}",
                                             "state": "JOB_STATE_CREATING"})
        return httpx.Response(200, json={})

    with httpx.Client(transport=httpx.MockTransport(handler)) as http:
        client = Fireworks(api_key="dry-run", account_id=plan.account_id, base_url=plan.base_url,
                           http_client=http, max_retries=0)
        out = execute(plan, client, http, sleep=lambda s: None,
                      on_step=lambda s: current.__setitem__("step", s))
    if out.error:  # only our own validation can fail here
        raise LaunchError(f"dry run failed at {out.failed_step}: {out.error}")
    return [describe_request(step, req, plan, secrets) for step, req in recorded]


def source_listing(plan: Plan) -> list[str]:
    """What would leave this machine in the evaluator tarball: every file with its size, and the total.
    Empty when the plan reuses an uploaded evaluator (nothing is uploaded)."""
    src = plan.source
    if not src:
        return ["# evaluator source: none uploaded (--reuse-evaluator)"]
    width = max(len(f"{src['total_bytes']:,}"), 5)
    lines = [f"# evaluator source ({src['tarball']}): every file that would leave this machine, the files git "
             "tracks of the evaluator's folders (bytes, path)"]
    lines += [f"{src['file_bytes'][rel]:>{width},}  {rel}" for rel in src["files"]]
    lines.append(f"{src['total_bytes']:>{width},}  total: {len(src['files'])} files "
                 f"({_human(src['total_bytes'])}; {_human(src['bytes'])} compressed, sha256 {src['sha256'][:16]})")
    return lines


def _human(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def firectl_lines(plan: Plan) -> list[str]:
    """The equivalent command lines (firectl for dataset and job; eval-protocol's uploader for the
    evaluator, as in the original experiment). Settings firectl flags were not verified for are listed."""
    q = shlex.quote
    t, i = plan.job_kwargs["training_config"], plan.job_kwargs["inference_parameters"]
    lines = []
    if not plan.reuse_dataset:
        lines.append(f"firectl create dataset {q(plan.dataset_id)} {q(str(plan.dataset_path))}")
    if not plan.reuse_evaluator:
        lines.append(f"python -m eval_protocol upload --entry {q(plan.entry)} --yes"
                     "   # tars the whole folder (run records too; launch sends the evaluator alone) and "
                     "uploads every .env key as a Fireworks secret")
    job = ["firectl create reinforcement-fine-tuning-job",
           f"--base-model {q(t['base_model'])}", f"--dataset {q(plan.dataset_name)}",
           f"--evaluator {q(plan.evaluator_name)}", f"--output-model {q(t['output_model'])}",
           f"--epochs {t['epochs']}", f"--learning-rate {t['learning_rate']:g}",
           f"--temperature {i['temperature']:g}", f"--max-output-tokens {i['max_output_tokens']}",
           f"--response-candidates-count {i['response_candidates_count']}",
           f"--max-concurrent-rollouts {plan.job_kwargs['max_concurrent_rollouts']}"]
    lines.append(" \\\n    ".join(job))
    rest = {"loss_config": plan.job_kwargs["loss_config"]}
    for k in ("chunk_size", "display_name"):
        if k in plan.job_kwargs:
            rest[k] = plan.job_kwargs[k]
    for k in ("lora_rank", "max_context_length", "batch_size"):
        if k in t:
            rest[f"training_config.{k}"] = t[k]
    for k in ("top_p", "top_k", "extra_body"):
        if k in i:
            rest[f"inference_parameters.{k}"] = i[k]
    if "wandb_config" in plan.job_kwargs:
        rest["wandb_config"] = redact_body(plan.job_kwargs["wandb_config"], [])
    lines.append("# also set by this launch, firectl flags not verified here: "
                 + json.dumps(rest, separators=(", ", ": ")))
    return lines
