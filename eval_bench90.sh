#!/usr/bin/env bash
# Evaluate a model on the CLBench-style 90-scan schedule: a thin wrapper around `spectrum-rft bench90`.
#
#   ./eval_bench90.sh MODEL [SYSTEM] [RUNS] [extra bench90 options, e.g. --json]
#
# MODEL   a litellm model id, or spectrum/<policy> for a scripted baseline (memoryless, accumulate, oracle)
# SYSTEM  stateless (default) | icl | icl_notepad | scaffold
# RUNS    1..5 (default 5)
# See docs/BENCH90.md.
set -euo pipefail
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "usage: $0 MODEL [SYSTEM] [RUNS] [bench90 options]   (SYSTEM: stateless|icl|icl_notepad|scaffold)" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x "$here/.venv/bin/python" ]; then py="$here/.venv/bin/python"; else py=python3; fi
fi
model="$1"; system="${2:-stateless}"; runs="${3:-5}"
shift $(( $# < 3 ? $# : 3 ))
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" -m spectrum_rft bench90 --model "$model" --system "$system" --runs "$runs" "$@"
