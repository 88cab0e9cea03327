#!/usr/bin/env bash
# The verifiers environment (environments/spectrum_memory) in a venv of its own: verifiers 0.4.0 needs mcp 2.x,
# the main install pins mcp 1.x (eval-protocol 0.3.x), so they cannot share one. The project goes in without
# its dependencies (SpectrumEnv needs only numpy and jinja2, both verifiers' own). The tests run the real
# vf-eval CLI against a loopback OpenAI-compatible model and compare it with `spectrum-rft eval`, which runs
# from the main venv (.venv, made by scripts/test.sh; SPECTRUM_MAIN_PYTHON names another one).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=".venv-vf"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "verifiers==0.4.0" pytest
"$VENV/bin/python" -m pip install -q --no-deps -e . -e environments/spectrum_memory
export EP_NO_UPLOAD=1 LITELLM_LOCAL_MODEL_COST_MAP=True EP_DISABLE_AUTO_BROWSER=1 OPENAI_API_KEY=dummy
unset FIREWORKS_API_KEY
export SPECTRUM_MAIN_PYTHON="${SPECTRUM_MAIN_PYTHON:-$PWD/.venv/bin/python}"
"$VENV/bin/python" -c "import importlib.metadata as m; print('verifiers', m.version('verifiers'), 'mcp', m.version('mcp'))"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider environments/spectrum_memory/tests
