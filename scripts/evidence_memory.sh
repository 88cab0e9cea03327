#!/usr/bin/env bash
# The evidence run: does GRPO on this reward teach the real-echo arm to carry? (RESULTS_memory.md section 9)
#
#   bash scripts/evidence_memory.sh [OUT]        (default OUT=runs/evidence2)
#
# Resumable: every stage is skipped when its output exists, and GRPO runs go on from their newest
# checkpoint (--save-every 1 --resume), so the same command continues an interrupted run.
#
# 1. SFT warm start on memoryless scan episodes (memory mode none: no echo line, so it teaches neither
#    using nor ignoring one); 2. its unconstrained valid-report rate at temperature 1 and 0.7 (scan-eval,
#    SCAN_EVAL scans); 3. GRPO on the real-echo arm (weak-scaffold) and on its control (weak-scrambled) from
#    that same checkpoint, SEEDS seeds, identical hyper-parameters, the same rows in the same order per seed
#    (both arms of a seed side by side, one torch thread each, niced), tool calls sampled under the grammar
#    of the env's tool_schemas() (--sampler group --constrained); 4. the pre-registered verdict
#    (memory-report); 5. held-out: every final checkpoint and the warm start on the same HELDOUT_SCANS scan
#    episodes (greedy, paired), and whole episodes through the evaluator (HELDOUT_ROWS bands) for the warm
#    start and the seed-0 checkpoint of each arm.
# Knobs (environment): SEEDS, STEPS, PROMPTS, GROUP, MAXLEN, LR, LORA_LAYERS, MICRO, SFT_ROWS, SCAN_EVAL,
# HELDOUT_SCANS, HELDOUT_ROWS, STAGES (default "sft valid grpo report heldout").
# The last round's design (section 8) is this script with SEEDS="0 1" STEPS=20 PROMPTS=1 GROUP=6
# MAXLEN=128 SAMPLER=trl CONSTRAINED= MICRO=6 and its two SFT rounds.
set -euo pipefail
OUT=${1:-runs/evidence2}
SEEDS=${SEEDS:-"0 1 2"}; STEPS=${STEPS:-30}; PROMPTS=${PROMPTS:-2}; GROUP=${GROUP:-8}; MAXLEN=${MAXLEN:-160}
LR=${LR:-3e-4}; LORA_LAYERS=${LORA_LAYERS:-8}; SFT_ROWS=${SFT_ROWS:-160}; SCAN_EVAL=${SCAN_EVAL:-200}
HELDOUT_SCANS=${HELDOUT_SCANS:-64}; HELDOUT_ROWS=${HELDOUT_ROWS:-4}; SAMPLER=${SAMPLER:-group}
MICRO=${MICRO:-8}  # learner micro-batch: 16 sequences of ~650 tokens at once took ~10 GB; two runs side by side must fit 24 GB
CONSTRAINED=${CONSTRAINED---constrained}; STAGES=${STAGES:-"sft valid grpo report heldout"}
SFT_MODEL=${SFT_MODEL:-$OUT/sft/model}
mkdir -p "$OUT/scan-eval"
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has sft && [[ ! -f "$OUT/sft/summary.json" ]]; then
  nice -n 5 spectrum-rft sft --out "$OUT/sft" --rows "$SFT_ROWS" --epochs 1 --batch-size 8 --lr 5e-4 --threads 2 \
    > "$OUT/sft.log" 2>&1
fi
if has valid && [[ ! -f "$OUT/scan-eval/sft-free.json" ]]; then
  nice -n 5 spectrum-rft scan-eval --model "$SFT_MODEL" --scans "$SCAN_EVAL" --temperature 1 --temperature 0.7 \
    --threads 2 --out "$OUT/scan-eval/sft-free.json" | tee "$OUT/scan-eval/sft-free.txt"
fi
if has grpo; then
  for seed in $SEEDS; do
    pids=()
    for arm in weak-scaffold weak-scrambled; do
      run="$OUT/grpo/$arm-s$seed"
      [[ -f "$run/summary.json" ]] && continue
      # shellcheck disable=SC2086
      nice -n 10 spectrum-rft train --arm "$arm" --model "$SFT_MODEL" --seed "$seed" --steps "$STEPS" \
        --prompts "$PROMPTS" --group "$GROUP" --max-completion-length "$MAXLEN" --lr "$LR" \
        --lora-layers "$LORA_LAYERS" --threads 1 --sampler "$SAMPLER" $CONSTRAINED --micro-batch "$MICRO" \
        --save-every 1 --resume \
        --out "$run" >> "$OUT/grpo-$arm-s$seed.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
  done
fi
runs=("$OUT"/grpo/*/)
if has report && [[ -e "${runs[0]}" ]]; then
  spectrum-rft memory-report "${runs[@]}" --png "$OUT/memory_curves.png" | tee "$OUT/memory_report.txt"
  spectrum-rft memory-report "${runs[@]}" --png "" --json > "$OUT/memory_report.json"
fi
if has heldout; then
  for model in "$SFT_MODEL" "$OUT"/grpo/*/model; do
    [[ -d "$model" ]] || continue
    name=$(basename "$(dirname "$model")")
    [[ -f "$OUT/scan-eval/heldout-$name.json" ]] && continue
    nice -n 5 spectrum-rft scan-eval --model "$model" --scans "$HELDOUT_SCANS" --temperature 0 --threads 2 \
      --out "$OUT/scan-eval/heldout-$name.json" | tee "$OUT/scan-eval/heldout-$name.txt"
  done
  spectrum-rft eval --model memoryless --model accumulate --model oracle --prompt weak --memory-mode scaffold \
    --rows "$HELDOUT_ROWS" --salt heldout --no-progress --json --out "$OUT/heldout/baselines" > "$OUT/heldout-baselines.json"
  for model in "$SFT_MODEL" "$OUT"/grpo/weak-scaffold-s0/model "$OUT"/grpo/weak-scrambled-s0/model; do
    [[ -d "$model" ]] || continue
    name=$(basename "$(dirname "$model")")
    [[ -f "$OUT/heldout-$name.json" ]] && continue
    port=$((8100 + RANDOM % 800))
    spectrum-rft serve-hf --model "$model" --port "$port" --threads 2 > "$OUT/serve-$name.log" 2>&1 &
    server=$!
    for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break; sleep 1; done
    spectrum-rft eval --model openai/spectrum-hf --api-base "http://127.0.0.1:$port/v1" --prompt weak \
      --memory-mode scaffold --rows "$HELDOUT_ROWS" --salt heldout --concurrency 1 --param temperature=0 \
      --no-progress --json --out "$OUT/heldout/$name" > "$OUT/heldout-$name.json" || true
    kill "$server"; wait "$server" 2>/dev/null || true
  done
fi
