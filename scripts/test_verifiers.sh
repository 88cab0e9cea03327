#!/usr/bin/env bash
# The verifiers environment (environments/spectrum_memory) in a venv of its own: verifiers 0.4.0 needs mcp 2.x,
# the main install pins mcp 1.x (eval-protocol 0.3.x), so they cannot share one. The tests run the real
# vf-eval CLI against a loopback OpenAI-compatible model and compare it with `spectrum-rft eval`, which runs
# from the main venv (scripts/test_environment.sh says how).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test_environment.sh .venv-vf environments/spectrum_memory "verifiers==0.4.0" verifiers mcp
