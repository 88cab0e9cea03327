#!/usr/bin/env bash
# Issue 40 item 1's gates on one warm start (RESULTS_memory.md 12.1 says how each is measured):
#
#   bash scripts/gate_format.sh MODEL_DIR OUT
#
# OUT/free.json     scan-eval without the grammar, T = 1 and T = 0: valid (>= 0.95 each) and, at T = 1,
#                   exploration (keeps_echo_beyond >= 0.10)
# OUT/panel.json    scan-eval greedy under the grammar: headroom (beyond_current <= half of perfect use's,
#                   `spectrum-rft channel --rows 64 --salt heldout-panel --prefix scan-eval --echo-history accumulate-12`)
# OUT/whole/        4 held-out whole episodes through `spectrum-rft eval`, served without the grammar (>= 46/48
#                   scans reported; scripts/whole_episodes.sh)
# The 64 scan episodes are the panel's (salt heldout-panel, the real echo of accumulate-12); each stage is skipped
# when its file exists, so the same command goes on after an interruption. Two jobs side by side, one thread each.
set -euo pipefail
MODEL=$1; OUT=$2
cd "$(dirname "$0")/.."
srft() { python -m spectrum_rft "$@"; }
mkdir -p "$OUT"
SCANS=(--arm weak-scaffold --scans 64 --salt heldout-panel --echo-history accumulate-12 --threads 1)
[ -s "$OUT/free.json" ] || srft scan-eval --model "$MODEL" "${SCANS[@]}" --temperature 1 --temperature 0 \
    --out "$OUT/free.json" > "$OUT/free.txt" 2> "$OUT/free.log" &
bash scripts/whole_episodes.sh "$MODEL" "$OUT/whole" 4 heldout || echo "whole episodes: see $OUT/whole.json.part" >&2
wait
[ -s "$OUT/panel.json" ] || srft scan-eval --model "$MODEL" "${SCANS[@]}" --temperature 0 --constrained \
    --out "$OUT/panel.json" > "$OUT/panel.txt" 2> "$OUT/panel.log"
cat "$OUT/free.txt" "$OUT/panel.txt"
python -c 'import json, sys; m = next(iter(json.load(open(sys.argv[1]))["models"].values())); print("whole episodes:", m)' \
  "$OUT/whole.json"
