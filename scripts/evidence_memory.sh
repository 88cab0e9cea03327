#!/usr/bin/env bash
# The evidence run of issue 13: does GRPO on this reward teach memory use? (RESULTS_memory.md, section 8)
#
#   bash scripts/evidence_memory.sh [OUT]        (default OUT=runs/evidence)
#
# 1. SFT warm start on memoryless trajectories (no echo line), 2. GRPO on the real-echo arm
# (weak-scaffold) and on its control (weak-scrambled) from that same checkpoint, SEEDS seeds each (per
# seed the two arms run side by side, one torch thread each, niced; ~4 GB of memory per run), identical
# hyper-parameters, 3. the report over the
# TRL runs (group integrity, freshness, curves), 4. a held-out evaluation of every checkpoint through the
# evaluator itself (spectrum-rft serve-hf + spectrum-rft eval, weak prompt, scaffold echo).
# Knobs (environment): SEEDS, STEPS, PROMPTS, GROUP, MAXLEN, LR, LORA_LAYERS, EVAL_ROWS, SFT_MODEL (skip SFT).
set -euo pipefail
OUT=${1:-runs/evidence}
SEEDS=${SEEDS:-"0 1"}; STEPS=${STEPS:-20}; PROMPTS=${PROMPTS:-1}; GROUP=${GROUP:-6}; MAXLEN=${MAXLEN:-128}
LR=${LR:-3e-4}; LORA_LAYERS=${LORA_LAYERS:-8}; EVAL_ROWS=${EVAL_ROWS:-2}
mkdir -p "$OUT"
if [[ -z "${SFT_MODEL:-}" ]]; then
  spectrum-rft sft --out "$OUT/sft" --rows 96 --epochs 1 --batch-size 8 --lr 5e-4
  SFT_MODEL="$OUT/sft/model"
fi
for seed in $SEEDS; do
  pids=()
  for arm in weak-scaffold weak-scrambled; do
    nice -n 10 spectrum-rft train --arm "$arm" --model "$SFT_MODEL" --seed "$seed" --steps "$STEPS" \
      --prompts "$PROMPTS" --group "$GROUP" --max-completion-length "$MAXLEN" --lr "$LR" \
      --lora-layers "$LORA_LAYERS" --threads 1 --out "$OUT/grpo/$arm-s$seed" > "$OUT/grpo-$arm-s$seed.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
done
spectrum-rft report "$OUT"/grpo/weak-scaffold-s* "$OUT"/grpo/weak-scrambled-s* --png "$OUT/report.png" | tee "$OUT/report.txt"
# the scripted baselines on the held-out rows (instant): the scale for the checkpoints' scores
spectrum-rft eval --model memoryless --model accumulate --model oracle --prompt weak --memory-mode scaffold \
  --rows "$EVAL_ROWS" --salt heldout --no-progress --json --out "$OUT/heldout/baselines" > "$OUT/heldout-baselines.json"
for model in "$SFT_MODEL" "$OUT"/grpo/*/model; do
  name=$(basename "$(dirname "$model")")
  port=$((8100 + RANDOM % 800))
  spectrum-rft serve-hf --model "$model" --port "$port" --threads 2 > "$OUT/serve-$name.log" 2>&1 &
  server=$!
  for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break; sleep 1; done
  spectrum-rft eval --model openai/spectrum-hf --api-base "http://127.0.0.1:$port/v1" --prompt weak \
    --memory-mode scaffold --rows "$EVAL_ROWS" --salt heldout --concurrency 1 --param temperature=0 \
    --no-progress --json --out "$OUT/heldout/$name" > "$OUT/heldout-$name.json" || true
  kill "$server"; wait "$server" 2>/dev/null || true
done
held=(); for f in "$OUT"/heldout-*.json; do held+=(--heldout "$(basename "$f" .json | sed 's/^heldout-//')=$f"); done
spectrum-rft memory-report "$OUT"/grpo/* "${held[@]}" --png "$OUT/memory_curves.png" | tee "$OUT/memory_report.txt"
