"""The job `spectrum-rft launch` creates, as today's RFT jobs run (issue 42): the held-out evaluation dataset, warm
starts, every job field as a typed flag checked before any request, the context an episode needs, following a job
(``--status`` / ``--resume``), and parity with eval-protocol's own CLI (``eval-protocol create rft --dry-run``,
``ep local-test``).

Every request goes to the loopback double of tests/test_launch.py (the real fireworks SDK client, or eval-protocol's
CLI in a subprocess whose only Fireworks key is a dummy and whose every Fireworks URL is that double).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectrum_rft.tools.launch import main
from spectrum_rft.tools.launch.dryrun import EP_NO_FLAG
from spectrum_rft.tools.launch.heldout import band_fingerprints, check_disjoint, shared_bands
from spectrum_rft.tools.launch.options import LaunchError, LaunchOptions, option_problems
from spectrum_rft.tools.launch.plan import build_plan
from test_launch import ACCOUNT, Recorder, _argv, env, project, server  # noqa: F401 (the double and its fixtures)

ROOT = Path(__file__).resolve().parent.parent
EP_CREATE_RFT = tuple(int(x) for x in version("eval-protocol").split(".")[:3]) >= (0, 3, 33)
needs_create_rft = pytest.mark.skipif(not EP_CREATE_RFT, reason="eval-protocol < 0.3.33 has no `create rft` "
                                                                "nor `local-test`")


def _dry(capsys, *argv: str) -> tuple[int, dict | None, str]:
    rc = main([*argv, "--dry-run", "--json"])
    cap = capsys.readouterr()
    return rc, (json.loads(cap.out) if rc == 0 else None), cap.err


def _job(out: dict) -> dict:
    return out["requests"][-1]["json"]


# --------------------------------------------------------------------------------------------------
# Where training starts
# --------------------------------------------------------------------------------------------------


def test_warm_start_from_a_model_replaces_the_base_model(server, project, tmp_path, env, capsys):
    rc, out, err = _dry(capsys, *_argv(server, project, tmp_path, "--warm-start-from", "accounts/me/models/sft-1"))
    assert rc == 0, err
    t = _job(out)["trainingConfig"]
    assert t["warmStartFrom"] == "accounts/me/models/sft-1" and "baseModel" not in t
    assert out["start"] == {"from": "warm_start_from", "model": "accounts/me/models/sft-1"}
    assert "start: warm start from accounts/me/models/sft-1" in err
    assert "--training-config-warm-start-from accounts/me/models/sft-1" in out["firectl"][-1]


@pytest.mark.parametrize(("other", "said"), [(["--base-model", "accounts/fireworks/models/qwen3-8b"],
                                              "--base-model and --warm-start-from"),
                                             (["--source-job", "j1"], "--warm-start-from and --source-job")])
def test_warm_start_with_another_start_is_refused_in_one_line(server, project, tmp_path, env, capsys, other, said):
    rc, _, err = _dry(capsys, *_argv(server, project, tmp_path, "--warm-start-from", "accounts/me/models/m", *other))
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{said}: give one" in err and server.records == []


def test_source_job_warm_starts_from_its_output_model(server, project, tmp_path, env, capsys):
    server.jobs["old1"] = {"name": f"accounts/{ACCOUNT}/reinforcementFineTuningJobs/old1", "dataset": "d",
                           "evaluator": "e", "state": "JOB_STATE_COMPLETED",
                           "trainingConfig": {"outputModel": "spectrum-weak-scaffold-old"}}
    rc = main(_argv(server, project, tmp_path, "--source-job", "old1", "--json"))
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    routes = [r["route"] for r in server.records]
    assert routes[0] == "job.get" and routes[-1] == "job.create"  # read before anything is created
    t = json.loads(server.records[-1]["body"])["trainingConfig"]
    assert t["warmStartFrom"] == f"accounts/{ACCOUNT}/models/spectrum-weak-scaffold-old" and "baseModel" not in t
    rec = json.loads(cap.out)["start"]
    assert rec == {"from": "source_job", "job": f"accounts/{ACCOUNT}/reinforcementFineTuningJobs/old1",
                   "model": f"accounts/{ACCOUNT}/models/spectrum-weak-scaffold-old"}


def test_a_source_job_without_a_model_refuses_before_anything_is_created(server, project, tmp_path, env, capsys):
    server.jobs["run1"] = {"name": f"accounts/{ACCOUNT}/reinforcementFineTuningJobs/run1", "dataset": "d",
                           "evaluator": "e", "state": "JOB_STATE_RUNNING", "trainingConfig": {}}
    rc = main(_argv(server, project, tmp_path, "--source-job", "run1"))
    err = capsys.readouterr().err
    assert rc == 1 and [r["route"] for r in server.records] == ["job.get"]
    assert "FAILED at source_job.get: --source-job" in err and "JOB_STATE_RUNNING with no output model" in err
    assert "nothing was created." in err


def test_dry_run_of_a_source_job_shows_the_stand_in(server, project, tmp_path, env, capsys):
    rc, out, _ = _dry(capsys, *_argv(server, project, tmp_path, "--source-job", "old1"))
    assert rc == 0 and server.records == []
    assert out["requests"][0]["step"] == "source_job.get"
    assert _job(out)["trainingConfig"]["warmStartFrom"] == \
        f"accounts/{ACCOUNT}/models/<output model of old1, read at launch>"


# --------------------------------------------------------------------------------------------------
# Every job field, checked before any request
# --------------------------------------------------------------------------------------------------


def test_every_job_field_reaches_the_job_body(server, project, tmp_path, env, capsys):
    rc, out, err = _dry(capsys, *_argv(
        server, project, tmp_path, "--node-count", "2", "--max-concurrent-rollouts", "64",
        "--max-concurrent-evaluations", "16", "--lora-rank", "32", "--max-context-length", "8192",
        "--batch-size", "65536", "--learning-rate-warmup-steps", "10", "--kl-beta", "0.02",
        "--mcp-server", f"accounts/{ACCOUNT}/mcpServers/spectrum", "--wandb-project", "p", "--wandb-entity", "e"))
    assert rc == 0, err
    j = _job(out)
    assert (j["nodeCount"], j["maxConcurrentRollouts"], j["maxConcurrentEvaluations"]) == (2, 64, 16)
    assert j["mcpServer"] == f"accounts/{ACCOUNT}/mcpServers/spectrum"
    assert j["lossConfig"] == {"method": "GRPO", "klBeta": 0.02}
    assert {k: j["trainingConfig"][k] for k in ("loraRank", "maxContextLength", "batchSize",
                                                "learningRateWarmupSteps")} == \
        {"loraRank": 32, "maxContextLength": 8192, "batchSize": 65536, "learningRateWarmupSteps": 10}
    assert j["wandbConfig"] == {"enabled": True, "project": "p", "entity": "e"}
    # unset fields are not sent: the platform's defaults apply
    rc, out, _ = _dry(capsys, *_argv(server, project, tmp_path))
    assert not {"nodeCount", "maxConcurrentEvaluations", "mcpServer", "wandbConfig"} & set(_job(out))


def test_several_mistakes_are_one_line_each_and_nothing_is_sent(server, project, tmp_path, env, capsys):
    rc = main(_argv(server, project, tmp_path, "--node-count", "0", "--lora-rank", "-4", "--kl-beta", "-1",
                    "--response-candidates", "1", "--wandb-entity", "e", "--eval-rows", "3", "--eval-auto-carveout"))
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and server.records == [] and "Traceback" not in err
    assert all(line.startswith("spectrum-rft launch: ") for line in lines)
    for flag in ("--node-count 0", "--lora-rank -4", "--kl-beta -1.0", "--response-candidates 1",
                 "--wandb-entity/--wandb-run-id need --wandb-project", "--eval-rows and --eval-auto-carveout"):
        assert sum(flag in line for line in lines) == 1, (flag, err)
    assert len(lines) == 6


@pytest.mark.parametrize("argv", [["--arm", "icl", "--node-count", "two"], ["--arm", "nope"], ["--dry-run"],
                                  ["--status", "j", "--arm", "icl"]])
def test_a_usage_error_is_one_line(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("spectrum-rft launch: error: "), err


INT_FLAGS = ["--node-count", "--max-concurrent-rollouts", "--max-concurrent-evaluations", "--lora-rank",
             "--max-context-length", "--batch-size", "--learning-rate-warmup-steps", "--eval-rows", "--top-k",
             "--chunk-size", "--rows", "--epochs", "--max-output-tokens", "--response-candidates"]
LOWEST = {"--learning-rate-warmup-steps": 0, "--eval-rows": 0, "--response-candidates": 2}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(INT_FLAGS), value=st.integers(max_value=0))
def test_any_out_of_range_integer_is_one_line(capsys, flag, value):
    value = value + LOWEST.get(flag, 1) - 1  # below the flag's lowest value
    rc = main(["--arm", "icl", "--dry-run", flag, str(value)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{flag} {value}: expected an integer" in err


@settings(max_examples=80, deadline=None)
@given(name=st.one_of(st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=40),
                      st.builds("/".join, st.lists(st.sampled_from(["accounts", "a", "models", "mcpServers", "",
                                                                    "datasets", "x y", "reinforcementFineTuningJobs"]),
                                                   max_size=5))))
def test_a_malformed_model_or_job_name_is_one_line(name):
    """Each name flag: a malformed value is exactly one problem naming the flag; a well-formed one is none."""
    for field in ("warm_start_from", "source_job", "mcp_server", "evaluation_dataset"):
        problems = option_problems(LaunchOptions(arm="icl", **{field: name}))
        flag = f"--{field.replace('_', '-')}"
        assert len(problems) <= 1
        if problems:
            assert problems[0].startswith(f"{flag} {name!r}: expected") and "\n" not in problems[0]
        else:  # accepted: a resource name or an id, nothing that could be two things
            assert name and not set(name) & set(" \t\n\"'")
            assert name.startswith("accounts/") or "/" not in name


def test_a_context_too_short_for_a_windowed_episode_is_refused(server, project, tmp_path, env, capsys):
    rc, out, err = _dry(capsys, *_argv(server, project, tmp_path))
    need = out["context"]["needed_tokens"]
    assert need == out["context"]["window_tokens"] + 1024 and f"needs ~{need} tokens" in err
    said = next(line for line in err.splitlines() if line.startswith("context: ")).removeprefix("context: ")
    rc, _, err = _dry(capsys, *_argv(server, project, tmp_path, "--max-context-length", str(need - 1),
                                     "--batch-size", "100"))
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 2, err
    assert f"--max-context-length {need - 1}: arm weak-scaffold: a windowed scaffold episode needs ~{need}" \
        in lines[0]
    assert lines[0].endswith(said) and lines[1].endswith(said)  # the need in the same words as the dry run's
    assert "--batch-size 100 (tokens per packed batch) cannot hold one episode" in lines[1]
    assert _dry(capsys, *_argv(server, project, tmp_path, "--max-context-length", str(need)))[0] == 0


def test_the_whole_history_needs_more_context_than_the_window(project, tmp_path, env):
    """icl sends every earlier scan, the ICL-off arms the current one: the need is computed, not assumed."""
    need = {arm: build_plan(LaunchOptions(arm=arm, rows=1, epochs=1, eval_rows=0, tag="c", dry_run=True,
                                          project_dir=str(project), dataset_out=str(tmp_path / "c.jsonl"))).context
            for arm in ("icl", "weak-scaffold", "notepad")}
    assert need["icl"].prompt_tokens > 3 * need["weak-scaffold"].prompt_tokens
    assert need["notepad"].notepad_tokens == 1000 and need["weak-scaffold"].notepad_tokens == 0


# --------------------------------------------------------------------------------------------------
# The evaluation dataset
# --------------------------------------------------------------------------------------------------


def test_carveout_and_no_evaluation(server, project, tmp_path, env, capsys):
    rc, out, _ = _dry(capsys, *_argv(server, project, tmp_path, "--eval-auto-carveout"))
    assert rc == 0 and _job(out)["evalAutoCarveout"] is True and "evaluationDataset" not in _job(out)
    assert not any(r["step"].startswith("evaluation_dataset.") for r in out["requests"])
    assert "--eval-auto-carveout" in out["firectl"][-1]
    rc, out, _ = _dry(capsys, *_argv(server, project, tmp_path, "--eval-rows", "0"))
    assert rc == 0 and out["evaluation"]["mode"] == "none"
    assert not {"evalAutoCarveout", "evaluationDataset"} & set(_job(out))


def test_held_out_bands_sharing_a_training_band_are_refused(project, tmp_path, env):
    """The disjointness check build_plan runs can fail: held-out rows that play training bands are refused."""
    o = LaunchOptions(arm="icl", rows=3, epochs=1, tag="d", dry_run=True, project_dir=str(project),
                      dataset_out=str(tmp_path / "d.jsonl"))
    plan = build_plan(o)
    check_disjoint(plan.dataset, plan.eval_dataset)  # the plan's own: disjoint
    with pytest.raises(LaunchError, match=r"^2 held-out row\(s\) play a training row's band \(e.g. spectrum-r0001 = "
                                          r"spectrum-r0001\): choose another --eval-salt$"):
        check_disjoint(plan.dataset, plan.dataset[1:])
    assert shared_bands(band_fingerprints(plan.dataset), band_fingerprints(plan.eval_dataset)) == []


def test_an_evaluation_salt_equal_to_the_training_salt_is_refused(capsys):
    rc = main(["--arm", "icl", "--dry-run", "--salt", "s1", "--eval-salt", "s1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "need a salt of their own" in err


def test_the_evaluation_line_says_what_was_checked(server, project, tmp_path, env, capsys):
    """The held-out bands are checked against the training rows only where the training bands are the ones drawn
    here: not with an uploaded dataset, nor with --salt process (the job's workers draw their own)."""
    said = {}
    for case, extra in (("drawn", ()), ("reused", ("--reuse-dataset", "ds1")), ("process", ("--salt", "process"))):
        rc, out, err = _dry(capsys, *_argv(server, project, tmp_path, *extra))
        assert rc == 0, err
        said[case] = next(line for line in err.splitlines() if line.startswith("evaluation: "))
        assert out["evaluation"]["bands_check"] in said[case]
    assert "checked: none a training row's" in said["drawn"]
    for case, why in (("reused", "(--reuse-dataset)"), ("process", "--salt process")):
        assert "none a training row's" not in said[case] and "not checked against the training bands" in said[case]
        assert why in said[case]


def test_a_chunk_above_the_platforms_maximum_is_clamped_and_said():
    from spectrum_rft.task.arms import ARMS
    from spectrum_rft.tools.launch.options import MAX_CHUNK
    from spectrum_rft.tools.launch.plan import job_kwargs

    for rows, chunk, said in ((MAX_CHUNK, MAX_CHUNK, False), (MAX_CHUNK + 1, MAX_CHUNK, True)):
        notes: list[str] = []
        job = job_kwargs(LaunchOptions(arm="weak-scaffold", rows=rows), ARMS["weak-scaffold"], "t", "s", 1, {}, notes)
        assert job["chunk_size"] == chunk
        assert notes == ([f"chunk_size: --rows {rows} is above the platform's maximum chunk size {MAX_CHUNK}: "
                          f"chunk_size {MAX_CHUNK}, so a rollout chunk is part of a dataset epoch, not one"]
                         if said else [])


# --------------------------------------------------------------------------------------------------
# Resource names: one parser (ids.resource_ref) for --source-job, --status/--resume and the datasets
# --------------------------------------------------------------------------------------------------


def test_resource_names_are_parsed_once():
    from spectrum_rft.tools.launch.ids import DATASETS, job_ref, resource_name
    from spectrum_rft.tools.launch.plan import source_job_model

    name = "accounts/other/reinforcementFineTuningJobs/old1"
    assert job_ref(name, ACCOUNT) == ("other", "old1") == job_ref("old1", "other")
    assert source_job_model(name) == "accounts/other/models/<output model of old1, read at launch>"
    assert resource_name("ds1", DATASETS, ACCOUNT) == f"accounts/{ACCOUNT}/datasets/ds1"
    for bad, said in ((f"accounts/{ACCOUNT}/datasets/d", "job"), ("a b", "job")):
        with pytest.raises(LaunchError, match=rf"^{said} '{bad}': expected a {said} id or accounts/<account>/"):
            job_ref(bad, ACCOUNT)
    with pytest.raises(LaunchError, match="is an id: set FIREWORKS_ACCOUNT_ID"):
        job_ref("old1", None)


def test_a_source_job_of_another_account_is_read_there(server, project, tmp_path, env, capsys):
    server.jobs["old1"] = {"name": "accounts/other/reinforcementFineTuningJobs/old1", "dataset": "d", "evaluator": "e",
                           "state": "JOB_STATE_COMPLETED", "trainingConfig": {"outputModel": "m1"}}
    rc = main(_argv(server, project, tmp_path, "--source-job", "accounts/other/reinforcementFineTuningJobs/old1"))
    assert rc == 0, capsys.readouterr().err
    assert server.records[0]["path"] == "/v1/accounts/other/reinforcementFineTuningJobs/old1"
    assert json.loads(server.records[-1]["body"])["trainingConfig"]["warmStartFrom"] == "accounts/other/models/m1"


def test_a_dataset_named_as_another_resource_is_refused_in_one_line(server, project, tmp_path, env, capsys):
    rc, _, err = _dry(capsys, *_argv(server, project, tmp_path, "--reuse-dataset", f"accounts/{ACCOUNT}/models/m"))
    assert rc == 2 and err.count("\n") == 1 and server.records == []
    assert f"dataset 'accounts/{ACCOUNT}/models/m': expected a dataset id or accounts/<account>/datasets/<id>" in err


# --------------------------------------------------------------------------------------------------
# Following a job
# --------------------------------------------------------------------------------------------------

JOB = {"name": f"accounts/{ACCOUNT}/reinforcementFineTuningJobs/job9", "displayName": "spectrum weak-scaffold t1",
       "dataset": f"accounts/{ACCOUNT}/datasets/d", "evaluator": f"accounts/{ACCOUNT}/evaluators/e",
       "evaluationDataset": f"accounts/{ACCOUNT}/datasets/d-heldout", "state": "JOB_STATE_RUNNING",
       "jobProgress": {"epoch": 3, "percent": 40, "totalProcessedRequests": 120},
       "trainingConfig": {"baseModel": "accounts/fireworks/models/qwen3-1p7b", "outputModel": "spectrum-x",
                          "epochs": 1, "learningRate": 5e-5},
       "outputMetrics": json.dumps({"train/reward_mean": 0.41, "eval/score": 0.37}),
       "createTime": "2026-12-01T10:00:00Z"}


def test_status_shows_state_epoch_and_metrics_through_the_sdk(server, env, capsys):
    server.jobs["job9"] = json.loads(json.dumps(JOB))
    rc = main(["--status", "job9", "--base-url", server.url])
    out = capsys.readouterr().out
    assert rc == 0 and [r["route"] for r in server.records] == ["job.get"]
    assert server.records[0]["path"] == f"/v1/accounts/{ACCOUNT}/reinforcementFineTuningJobs/job9"
    lines = out.splitlines()
    assert lines[0] == f"job accounts/{ACCOUNT}/reinforcementFineTuningJobs/job9: JOB_STATE_RUNNING (spectrum " \
                       "weak-scaffold t1)"
    assert "progress: epoch 3, percent 40%, totalProcessedRequests 120" in lines
    assert "  train/reward_mean: 0.41" in lines and "  eval/score: 0.37" in lines
    assert f"dataset: accounts/{ACCOUNT}/datasets/d; evaluation dataset: accounts/{ACCOUNT}/datasets/d-heldout" in lines
    assert len(lines) <= 25  # one screen
    assert main(["--status", f"accounts/{ACCOUNT}/reinforcementFineTuningJobs/job9", "--base-url", server.url,
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobProgress"]["epoch"] == 3


def test_resume_and_the_errors_of_following(server, env, capsys, monkeypatch):
    server.jobs["job9"] = {**json.loads(json.dumps(JOB)), "state": "JOB_STATE_PAUSED"}
    assert main(["--resume", "job9", "--base-url", server.url]) == 0
    out = capsys.readouterr().out
    assert [r["route"] for r in server.records] == ["job.resume"]
    assert server.records[0]["path"].endswith("/reinforcementFineTuningJobs/job9:resume")
    assert "resumed: " in out and "JOB_STATE_RUNNING" in out
    rc = main(["--status", "nope", "--base-url", server.url])
    err = capsys.readouterr().err
    assert rc == 1 and err.strip() == f"spectrum-rft launch: status of {ACCOUNT}/nope: HTTP 404: job nope not found"
    monkeypatch.delenv("FIREWORKS_API_KEY")
    rc = main(["--status", "job9", "--base-url", server.url])
    assert rc == 2 and "FIREWORKS_API_KEY is not set" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# In step with eval-protocol's own CLI
# --------------------------------------------------------------------------------------------------


def _ep_env(server_url: str) -> dict[str, str]:
    """A subprocess environment for eval-protocol's CLI: a dummy key (its parser builds a Fireworks client) and
    every Fireworks URL it may use pointed at the loopback double; nothing else of ours is passed down."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIREWORKS_", "FW_", "WANDB_"))}
    env.update(FIREWORKS_API_KEY="dummy-ep-cli-key", FIREWORKS_API_BASE=server_url, FIREWORKS_BASE_URL=server_url,
               FW_TRACING_GATEWAY_BASE_URL=server_url, EP_NO_UPLOAD="1")
    return env


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _sdk_body(server: Recorder, kwargs: dict) -> dict:
    """The request body the fireworks SDK sends for ``reinforcement_fine_tuning_jobs.create(**kwargs)``, as the
    loopback double received it."""
    from fireworks import Fireworks

    Fireworks(api_key="dummy-parity", account_id=ACCOUNT, base_url=server.url,
              max_retries=0).reinforcement_fine_tuning_jobs.create(**kwargs)
    (rec,) = [r for r in server.records if r["route"] == "job.create"]
    return json.loads(rec["body"])


# Every field where the two job bodies differ, and why (docs/LAUNCH.md, section "eval-protocol's path"):
PARITY_DIFFERENCES = {
    "displayName": "launch only: eval-protocol has no flag for it (skipped by its parser)",
    "lossConfig.method": "launch only: eval-protocol 0.3.33 refuses every value of --loss-config-method",
    "wandbConfig.runId": "launch only: eval-protocol has no flag for it (skipped by its parser)",
    "evalAutoCarveout": "eval-protocol only: its switch sends false when not given (the platform's default)",
}


@needs_create_rft
def test_launch_and_eval_protocol_create_rft_build_the_same_job(server, project, tmp_path, env, capsys):
    """`eval-protocol create rft --dry-run` run with the very line `launch --dry-run` prints, against the loopback
    double: its job arguments, sent through the SDK, give the body launch sends, field by field, but for the
    differences listed (and explained in docs/LAUNCH.md)."""
    rc, out, err = _dry(capsys, *_argv(
        server, project, tmp_path, "--warm-start-from", f"accounts/{ACCOUNT}/models/sft-1", "--eval-rows", "4",
        "--node-count", "2", "--max-concurrent-evaluations", "8", "--lora-rank", "16", "--max-context-length", "8192",
        "--batch-size", "32768", "--learning-rate-warmup-steps", "5", "--kl-beta", "0.01", "--top-p", "0.95",
        "--top-k", "40", "--extra-body", '{"chat_template_kwargs": {"enable_thinking": false}}',
        "--mcp-server", f"accounts/{ACCOUNT}/mcpServers/m", "--wandb-project", "p", "--wandb-entity", "e",
        "--wandb-run-id", "r1", "--job-id", "parity-job"))
    assert rc == 0, err
    line = out["firectl"][-1]
    assert line.startswith("eval-protocol create rft ")
    argv = shlex.split(line)[3:]  # the flags launch printed
    ep = Path(sys.executable).with_name("eval-protocol")
    empty = tmp_path / "ep-project"  # no .env: eval-protocol uploads every .env key as a secret, even dry
    empty.mkdir()
    t0 = time.monotonic()
    proc = subprocess.run([str(ep), "create", "rft", *argv, "--dry-run", "--skip-validation"], cwd=empty,
                          env=_ep_env(server.url), capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    marker = "reinforcement_fine_tuning_jobs.create with kwargs:"
    text = proc.stdout[proc.stdout.index(marker) + len(marker):].lstrip()
    kwargs, _ = json.JSONDecoder().raw_decode(text)
    assert kwargs.pop("reinforcement_fine_tuning_job_id") == "parity-job"  # a query parameter, as launch sends it
    routes = [r["route"] for r in server.records]  # what eval-protocol's CLI sent to the double
    ours, theirs = _flatten(_job(out)), _flatten(_sdk_body(server, kwargs))
    differ = {k for k in ours.keys() | theirs.keys() if ours.get(k, "<absent>") != theirs.get(k, "<absent>")}
    assert differ == set(PARITY_DIFFERENCES), {k: (ours.get(k), theirs.get(k)) for k in differ}
    assert theirs["evalAutoCarveout"] is False and "evalAutoCarveout" not in ours
    assert ours["trainingConfig.warmStartFrom"] == theirs["trainingConfig.warmStartFrom"]
    assert ours["evaluationDataset"] == f"accounts/{ACCOUNT}/datasets/spectrum-weak-scaffold-t1-heldout"
    assert len(ours) >= 20  # the comparison covers every field set, not a few
    # eval-protocol's --dry-run is not offline: it asked for the account and touched secrets (on the double)
    assert "verify_api_key" in routes and "secret" in routes and "job.create" not in routes
    assert set(EP_NO_FLAG) >= {"display_name", "wandb_config.run_id", "loss_config.method"}
    print(f"eval-protocol create rft --dry-run: {took:.1f} s")


@needs_create_rft
def test_ep_local_test_passes_on_both_evaluation_entries(tmp_path):
    """`ep local-test` (host mode), run once: its pytest run takes the turn entry from ``--entry`` and the MCP entry
    from ``PYTEST_ADDOPTS`` (pytest reads extra arguments there; ep local-test has no flag for a second target), at
    the smallest settings possible (one row of each entry's dataset, its 12 scans). eval-protocol's CLI sees a
    dummy key and loopback URLs only."""
    with Recorder() as srv:  # closed at once: any Fireworks request would fail, never leave the machine
        env = _ep_env(srv.url) | {"PYTEST_ADDOPTS": "--ep-max-rows 1 -p no:cacheprovider "
                                                    "test_spectrum_rft.py::test_spectrum_rft",
                                  "EVAL_PROTOCOL_DIR": str(tmp_path / "ep")}
    ep = Path(sys.executable).with_name("ep")
    t0 = time.monotonic()
    proc = subprocess.run([str(ep), "local-test", "--entry", "test_spectrum_turn.py::test_spectrum_turn",
                           "--ignore-docker"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    assert "Running locally:" in text and "--ep-success-threshold" in text, text[-3000:]
    for entry in ("test_spectrum_turn.py::test_spectrum_turn[", "test_spectrum_rft.py::test_spectrum_rft["):
        assert f"{entry}" in text and "PASSED" in text.split(entry, 1)[1][:300], (entry, text[-3000:])
    assert " 2 passed" in text, text[-3000:]
    print(f"ep local-test, both entries: {time.monotonic() - t0:.1f} s")
