#!/usr/bin/env bash
# The OpenEnv environment (environments/spectrum_openenv) in a venv of its own: `openenv` (the package formerly
# published as openenv-core) brings fastmcp 3.x and gradio, which the main install does not carry; no version of
# the main install changes because of it, but nothing is added to it either. The tests start the real OpenEnv
# server (uvicorn) as a subprocess, play the loopback model through OpenEnv's client and the project's episode
# driver, and compare with `spectrum-rft eval`, which runs from the main venv (scripts/test_environment.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test_environment.sh .venv-oe environments/spectrum_openenv "openenv==0.10.0" openenv fastmcp mcp
