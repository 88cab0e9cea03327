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
from .plan import Plan, source_job_model

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
        held = step.startswith("evaluation_dataset.")
        path, on_disk = (plan.eval_dataset_path, plan.eval_dataset_on_disk) if held else \
            (plan.dataset_path, plan.dataset_on_disk)
        data = on_disk.read_bytes()
        d["multipart"] = {"file": {"filename": path.name,
                                   "local_path": str(path) if on_disk == path else f"(not kept; --keep writes {path})",
                                   "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                   "rows": len(plan.eval_dataset) if held else plan.dataset_rows}}
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
        if request.method == "GET" and "/reinforcementFineTuningJobs/" in path:  # --source-job
            job = plan.start["job"]
            return httpx.Response(200, json={"name": job, "dataset": "", "evaluator": "",
                                             "state": "JOB_STATE_COMPLETED",
                                             "trainingConfig": {"outputModel": source_job_model(job)}})
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


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def firectl_lines(plan: Plan) -> list[str]:
    """The equivalent command lines: firectl for the datasets and the job, eval-protocol's uploader for the
    evaluator (as in the original experiment), and eval-protocol's own ``eval-protocol create rft`` for the job
    (:func:`eval_protocol_line`). Settings firectl flags were not verified for are listed on a comment line."""
    q = shlex.quote
    j = plan.job_kwargs
    t, i = j["training_config"], j["inference_parameters"]
    lines = []
    if not plan.reuse_dataset:
        lines.append(f"firectl create dataset {q(plan.dataset_id)} {q(str(plan.dataset_path))}")
    if plan.eval_dataset:
        lines.append(f"firectl create dataset {q(plan.eval_dataset_id)} {q(str(plan.eval_dataset_path))}"
                     "   # the held-out bands")
    if not plan.reuse_evaluator:
        lines.append(f"python -m eval_protocol upload --entry {q(plan.entry)} --yes"
                     "   # tars the whole folder (run records too; launch sends the evaluator alone) and "
                     "uploads every .env key as a Fireworks secret")
    job = ["firectl create reinforcement-fine-tuning-job"]
    if "base_model" in t:
        job.append(f"--base-model {q(t['base_model'])}")
    job += [f"--dataset {q(plan.dataset_name)}",
            f"--evaluator {q(plan.evaluator_name)}", f"--output-model {q(t['output_model'])}",
            f"--epochs {t['epochs']}", f"--learning-rate {t['learning_rate']:g}",
            f"--temperature {i['temperature']:g}", f"--max-output-tokens {i['max_output_tokens']}",
            f"--response-candidates-count {i['response_candidates_count']}",
            f"--max-concurrent-rollouts {j['max_concurrent_rollouts']}"]
    lines.append(" \\\n    ".join(job))
    rest: dict[str, Any] = {"loss_config": j["loss_config"]}
    for k in ("chunk_size", "display_name", "evaluation_dataset", "eval_auto_carveout", "max_concurrent_evaluations",
              "node_count", "mcp_server"):
        if k in j:
            rest[k] = j[k]
    for k in ("warm_start_from", "lora_rank", "max_context_length", "batch_size", "learning_rate_warmup_steps"):
        if k in t:
            rest[f"training_config.{k}"] = t[k]
    for k in ("top_p", "top_k", "extra_body"):
        if k in i:
            rest[f"inference_parameters.{k}"] = i[k]
    if "wandb_config" in j:
        rest["wandb_config"] = redact_body(j["wandb_config"], [])
    lines.append("# also set by this launch, firectl flags not verified here: "
                 + json.dumps(rest, separators=(", ", ": ")))
    lines.append("# or eval-protocol's own path to the same job (datasets and evaluator uploaded as above; it "
                 "validates the evaluator locally first, --skip-validation skips that; docs/LAUNCH.md lists what "
                 "differs):")
    lines.append(eval_protocol_line(plan))
    return lines


# what `eval-protocol create rft` (0.3.33) has no flag for, and why it is left out of its line (docs/LAUNCH.md)
EP_NO_FLAG = {"display_name": "eval-protocol skips the field (its parser's skip list)",
              "wandb_config.run_id": "eval-protocol skips the field (its parser's skip list)",
              "wandb_config.api_key": "a secret: never printed (eval-protocol's --wandb-api-key takes it)",
              "loss_config.method": "eval-protocol 0.3.33 refuses every value of --loss-config-method (its parser "
                                    "calls the field's Literal type: 'invalid Literal value'); the platform's default "
                                    "method applies"}


def eval_protocol_args(plan: Plan) -> list[str]:
    """The flags of ``eval-protocol create rft`` that ask for this launch's job: eval-protocol builds its flags
    from the SDK's ``create`` signature (``training_config.lora_rank`` -> ``--training-config-lora-rank``, booleans
    as switches), so they are derived here the same way from the job's arguments; the fields it has no flag for
    are :data:`EP_NO_FLAG`."""
    args = ["--evaluator", plan.evaluator_name, "--dataset", plan.dataset_name]
    kwargs = dict(plan.job_kwargs)
    if plan.job_id:
        kwargs["reinforcement_fine_tuning_job_id"] = plan.job_id
    for key, value in kwargs.items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in items:
            name = key if sub is None else f"{key}.{sub}"
            if name in EP_NO_FLAG:
                continue
            flag = "--" + name.replace(".", "-").replace("_", "-")
            if isinstance(v, bool):
                args += [flag] if v else []
            else:
                args += [flag, format(v, "g") if isinstance(v, float) else str(v)]
    return args


def eval_protocol_line(plan: Plan) -> str:
    return " ".join(["eval-protocol create rft", *map(shlex.quote, eval_protocol_args(plan)), "--yes"])
