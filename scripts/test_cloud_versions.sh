#!/usr/bin/env bash
# Both rollout paths against the eval-protocol the Fireworks cloud was seen running (0.3.23, with the litellm
# and mcp it resolves), in a venv of its own: the evaluation entries and the path tests. scripts/test.sh
# runs it after the main suite (which runs against the newest 0.3.x).
set -euo pipefail
cd "$(dirname "$0")/.."
EP_VERSION="${EP_VERSION:-0.3.23}"
VENV=".venv-ep${EP_VERSION//./}"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# requirements.txt is what `ep upload` installs in the cloud; eval-protocol pinned to the cloud's version
"$VENV/bin/python" -m pip install -q "eval-protocol==$EP_VERSION" -r requirements.txt pytest hypothesis
export EP_NO_UPLOAD=1 LITELLM_LOCAL_MODEL_COST_MAP=True EP_DISABLE_AUTO_BROWSER=1 OPENAI_API_KEY=dummy
unset FIREWORKS_API_KEY
"$VENV/bin/python" -c "import eval_protocol, importlib.metadata as m; print('eval-protocol', m.version('eval-protocol'), 'litellm', m.version('litellm'), 'mcp', m.version('mcp'))"
PYTHONPATH="$PWD" "$VENV/bin/python" -m pytest -q -p no:cacheprovider test_spectrum_turn.py test_spectrum_rft.py \
  tests/test_rollout_parity.py tests/test_mcp_path.py tests/test_rollout_failures.py
