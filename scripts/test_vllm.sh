#!/usr/bin/env bash
# The vLLM path on this CPU (tests_vllm/): training with colocated vLLM (with and without the grammar), scan-eval
# and serve-hf with vLLM as the engine against transformers. In a venv of its own, .venv-vllm
# (scripts/install_vllm.sh says why); the serving parity test runs `spectrum-rft eval` from the main venv (.venv,
# made by scripts/test.sh; SPECTRUM_MAIN_PYTHON names another one).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
PATH="$PWD/$VENV/bin:$PATH" bash scripts/install_vllm.sh
export EP_NO_UPLOAD=1 LITELLM_LOCAL_MODEL_COST_MAP=True EP_DISABLE_AUTO_BROWSER=1 OPENAI_API_KEY=dummy
unset FIREWORKS_API_KEY
export SPECTRUM_MAIN_PYTHON="${SPECTRUM_MAIN_PYTHON:-$PWD/.venv/bin/python}"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests_vllm
