#!/usr/bin/env bash
# One environment package of environments/ tested in a venv of its own (scripts/test_verifiers.sh and
# scripts/test_openenv.sh say why each needs one):
#
#   bash scripts/test_environment.sh VENV FOLDER REQUIREMENT [DISTRIBUTION...]
#
# The venv gets REQUIREMENT (the framework, pinned) and pytest; the project and FOLDER go in without their
# dependencies (SpectrumEnv needs only numpy and jinja2, which every framework here brings). The versions of the
# named distributions are printed, then FOLDER/tests run; their parity tests run `spectrum-rft eval` and the
# loopback model from the main venv (.venv, made by scripts/test.sh; SPECTRUM_MAIN_PYTHON names another one).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then echo "usage: bash scripts/test_environment.sh VENV FOLDER REQUIREMENT [DISTRIBUTION...]" >&2; exit 2; fi
VENV="$1"; FOLDER="$2"; REQUIREMENT="$3"; shift 3
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "$REQUIREMENT" pytest
"$VENV/bin/python" -m pip install -q --no-deps -e . -e "$FOLDER"
export EP_NO_UPLOAD=1 LITELLM_LOCAL_MODEL_COST_MAP=True EP_DISABLE_AUTO_BROWSER=1 OPENAI_API_KEY=dummy
unset FIREWORKS_API_KEY
export SPECTRUM_MAIN_PYTHON="${SPECTRUM_MAIN_PYTHON:-$PWD/.venv/bin/python}"
"$VENV/bin/python" -c "import importlib.metadata as m, sys; print(', '.join(f'{d} {m.version(d)}' for d in sys.argv[1:]))" "$@"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$FOLDER/tests"
