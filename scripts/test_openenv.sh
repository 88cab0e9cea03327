#!/usr/bin/env bash
# The OpenEnv environment (environments/spectrum_openenv) in a venv of its own: `openenv` (the package formerly
# published as openenv-core) brings fastmcp 3.x and gradio, which the main install does not carry; no version of
# the main install changes because of it, but nothing is added to it either. The project goes in without its
# dependencies (SpectrumEnv needs only numpy and jinja2, both openenv's own through gradio). The tests start the
# real OpenEnv server (uvicorn) as a subprocess, play the loopback model through OpenEnv's client and the
# project's episode driver, and compare with `spectrum-rft eval`, which runs from the main venv (.venv, made by
# scripts/test.sh; SPECTRUM_MAIN_PYTHON names another one).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=".venv-oe"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "openenv==0.10.0" pytest
"$VENV/bin/python" -m pip install -q --no-deps -e . -e environments/spectrum_openenv
export EP_NO_UPLOAD=1 LITELLM_LOCAL_MODEL_COST_MAP=True EP_DISABLE_AUTO_BROWSER=1 OPENAI_API_KEY=dummy
unset FIREWORKS_API_KEY
export SPECTRUM_MAIN_PYTHON="${SPECTRUM_MAIN_PYTHON:-$PWD/.venv/bin/python}"
"$VENV/bin/python" -c "import importlib.metadata as m; print('openenv', m.version('openenv'), 'fastmcp', m.version('fastmcp'), 'mcp', m.version('mcp'))"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider environments/spectrum_openenv/tests
