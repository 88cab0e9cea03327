#!/usr/bin/env bash
# Issue 40 item 1's gates on one warm start (RESULTS_memory.md 12.1 says how each is measured):
#
#   bash scripts/gate_format.sh MODEL_DIR OUT [PORT]
#
# OUT/free.json     scan-eval without the grammar, T = 1 and T = 0: valid (>= 0.95 each) and, at T = 1,
#                   exploration (keeps_echo_beyond >= 0.10)
# OUT/panel.json    scan-eval greedy under the grammar: headroom (beyond_current <= half of perfect use's,
#                   `spectrum-rft channel --rows 64 --salt heldout-panel --prefix scan-eval --echo-history accumulate-12`)
# OUT/whole/        4 held-out whole episodes through `spectrum-rft eval`, served without the grammar (>= 46/48
#                   scans reported)
# The 64 scan episodes are the panel's (salt heldout-panel, the real echo of accumulate-12); each stage is skipped
# when its file exists, so the same command goes on after an interruption. Two jobs side by side, one thread each.
set -euo pipefail
MODEL=$1; OUT=$2; PORT=${3:-8391}
cd "$(dirname "$0")/.."
srft() { python -m spectrum_rft "$@"; }
mkdir -p "$OUT"
SCANS=(--arm weak-scaffold --scans 64 --salt heldout-panel --echo-history accumulate-12 --threads 1)
[ -s "$OUT/free.json" ] || srft scan-eval --model "$MODEL" "${SCANS[@]}" --temperature 1 --temperature 0 \
    --out "$OUT/free.json" > "$OUT/free.txt" 2> "$OUT/free.log" &
whole() {
  [ -s "$OUT/whole/summary.json" ] && return 0
  srft serve-hf --model "$MODEL" --port "$PORT" --threads 1 > "$OUT/serve.log" 2>&1 &
  local server=$!
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null && break; sleep 2; done
  OPENAI_API_KEY=${OPENAI_API_KEY:-local} srft eval --model openai/spectrum-hf --api-base "http://127.0.0.1:$PORT/v1" \
    --prompt weak --memory-mode scaffold --rows 4 --salt heldout --tool-choice auto --param temperature=0 \
    --param max_tokens=160 --out "$OUT/whole" > "$OUT/whole.txt" 2>&1 || true
  kill "$server" 2> /dev/null || true
}
whole
wait
[ -s "$OUT/panel.json" ] || srft scan-eval --model "$MODEL" "${SCANS[@]}" --temperature 0 --constrained \
    --out "$OUT/panel.json" > "$OUT/panel.txt" 2> "$OUT/panel.log"
cat "$OUT/free.txt" "$OUT/panel.txt"; tail -n 20 "$OUT/whole.txt"
