#!/usr/bin/env bash
# One checkpoint on whole held-out episodes through the evaluator (issue 40's primary endpoint: greedy, memory
# mode scaffold, the model's own echo), served by serve-hf on a free loopback port:
#
#   bash scripts/whole_episodes.sh MODEL_DIR OUT ROWS SALT [--grammar]
#
# OUT/ is the eval folder (rows.jsonl, summary.json: what `memory-report --whole-*` reads), OUT.json its summary;
# --grammar serves under the tool-call grammar (the model as trained under it), default free (as a user serves
# it). Resumable: an interrupted run goes on with the rows it finished (eval --resume); a finished one (OUT.json
# without "stopped") is not run again. Runs `python -m spectrum_rft` from the checkout it sits in.
set -euo pipefail
MODEL=$1; OUT=$2; ROWS=$3; SALT=$4; GRAMMAR=${5:-}
cd "$(dirname "$0")/.."
done_already() { python -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])).get("stopped") is not None)' "$1" 2>/dev/null; }
[[ -s "$OUT.json" ]] && done_already "$OUT.json" && exit 0
mkdir -p "$(dirname "$OUT")"
port=$((8100 + RANDOM % 800))
# python itself in the background (a function or subshell as $! would leave the server running when killed)
python -m spectrum_rft serve-hf --model "$MODEL" --port "$port" --threads 2 $GRAMMAR > "$OUT.serve.log" 2>&1 &
server=$!
trap 'kill "$server" 2> /dev/null || true' EXIT
for _ in $(seq 180); do curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break; sleep 1; done
resume=(); [[ -f "$OUT/rows.jsonl" || -f "$OUT/rows.partial.jsonl" ]] && resume=(--resume)
# a CPU server beside other jobs can take minutes per turn: long timeouts, so a slow machine is not scored as a
# model that timed out
OPENAI_API_KEY=${OPENAI_API_KEY:-local} python -m spectrum_rft eval --model openai/spectrum-hf \
  --api-base "http://127.0.0.1:$port/v1" --prompt weak --memory-mode scaffold --rows "$ROWS" --salt "$SALT" \
  --tool-choice auto --param temperature=0 --param max_tokens=160 --param timeout=900 --timeout 14400 \
  --no-progress --json "${resume[@]}" --out "$OUT" > "$OUT.json.part" || true
done_already "$OUT.json.part" && mv "$OUT.json.part" "$OUT.json"
[[ -s "$OUT.json" ]]
