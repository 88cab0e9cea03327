#!/usr/bin/env bash
# The evidence run: does GRPO on this reward teach the real-echo arm to carry? (RESULTS_memory.md section 11;
# sections 9-10 ran earlier designs of this script)
#
#   bash scripts/evidence_memory.sh [OUT]        (default OUT=runs/evidence5)
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
#    (memory-report: section 10's training-curve rule); 5. held-out: every final checkpoint and the warm start
#    on the same HELDOUT_SCANS scan episodes of the panel (salt PANEL_SALT, the real echo, greedy under the
#    grammar, paired), then section 11's primary rule on them (memory-report --panel-*); whole episodes
#    through the evaluator (HELDOUT_ROWS bands), served with and without the grammar (serve-hf --grammar),
#    for the warm start and the seed-0 checkpoint of each arm.
# Section 11's design: the echo of a training scan carries history (ECHO_HISTORY=accumulate), the grammar lets
# a list run one item past the cap (the env refuses it), the learner is the policy that sampled
# (LEARNER=masked). Section 10 ran ECHO_HISTORY=memoryless LEARNER=unmasked on the default-v1 preset and reward.
# Knobs (environment): SEEDS, ARMS (the GRPO stage's arms, default "weak-scaffold weak-scrambled"), STEPS, PROMPTS, GROUP, MAXLEN, LR, LORA_LAYERS, MICRO, SHARED, SFT_ROWS, SCAN_EVAL,
# HELDOUT_SCANS, HELDOUT_ROWS, PANEL_SALT, ECHO_HISTORY, LEARNER, RECORD, SLOTS (runs at a time on a CPU, default 2), STAGES (default "restore sft grpo
# report panel whole valid"; "heldout" = "panel whole"), GPU.
# GPU=1: on a CUDA machine, every GRPO run of every seed side by side on the GPU (train --no-use-cpu, a step's
# two groups sampled as one batch: --batch-groups) and the panel's checkpoints scanned side by side
# (scan-eval --device cuda); the hyper-parameters are the same. One H200: ~15-20 s per step per run
# without --batch-groups (section 11), so the six runs and the panel are ~12 min.
# The panel (scan-eval, training extra only) and the whole episodes (serve-hf + eval: the evaluator's
# dependencies) are separate stages, so a machine with the training stack alone can run "restore grpo panel".
#
# restore: on a machine that did not run the earlier stages (runs/ is not kept between machines), the warm
# start and every finished GRPO run come back from the committed record RECORD (default
# results/memory-evidence5): the SFT model rebuilt bit for bit from its adapter (`sft --from-adapter`), each
# finished run's merged model from its adapter on top of it, and its log and rollouts copied back; the
# runs not yet finished go on from their recorded checkpoint, or start afresh (same rows, same seed), and the
# panel's recorded scans (RECORD/panel/heldout-*.json) are not scanned again. Record a finished run with
# `python scripts/record_runs.py --with-adapter RECORD OUT/grpo/RUN`, one stopped before its end (a machine
# about to go) with `... --with-checkpoint RECORD OUT/grpo/RUN` (~16 MB: its newest checkpoint). Evidence v4
# records its finished runs without adapters once their whole-episode evals are recorded (`cp -r
# OUT/whole-SALT/NAME OUT/whole-SALT/NAME.json RECORD/whole-SALT/`): restore brings both back, and the primary
# stage plays only the checkpoints whose eval is missing (a finished run recorded before its eval: --with-adapter).
# Commands run as `python -m spectrum_rft` from the checkout the script sits in: run it from a worktree of
# its own, and later edits of another checkout cannot change a running job.
# The last round's design (section 8) is this script with SEEDS="0 1" STEPS=20 PROMPTS=1 GROUP=6
# MAXLEN=128 SAMPLER=trl CONSTRAINED= MICRO=6 and its two SFT rounds.
#
# Evidence v4 (section 12, issue 40; its rule fixed in RESULTS_memory.md before any of its runs):
#   RECORD=results/memory-evidence7 SFT_RECORD=results/memory-evidence6/sft-format-b ECHO_HISTORY=policy \
#   CONSTRAINED= WHOLE_EXCLUDE="results/memory-evidence6/sft-format results/memory-evidence6/sft-format-b" \
#   STAGES="restore grpo report primary" bash scripts/evidence_memory.sh runs/evidence7
# the gate-passing warm start restored from its adapter (section 12.2), GRPO with the model's own prefix and no
# grammar, then the primary stage: the warm start and every finished checkpoint on WHOLE_ROWS (24) held-out
# bands (salt WHOLE_SALT, heldout-whole) as whole episodes through the evaluator, served without the grammar,
# greedy (scripts/whole_episodes.sh), the accumulate policy on the same bands (perfect use: the power check),
# and `memory-report --whole-*`: the verdict, every training run's bands excluded by fingerprint.
set -euo pipefail
OUT=${1:-runs/evidence5}
cd "$(dirname "$0")/.."
srft() { python -m spectrum_rft "$@"; }  # this checkout's code, whatever venv is active
SEEDS=${SEEDS:-"0 1 2"}; ARMS=${ARMS:-"weak-scaffold weak-scrambled"}; STEPS=${STEPS:-30}; PROMPTS=${PROMPTS:-2}; GROUP=${GROUP:-8}; MAXLEN=${MAXLEN:-256}  # 16 in-band centres of <= 6 decimals fit; 160 truncated ~2 % of reports
LR=${LR:-3e-4}; LORA_LAYERS=${LORA_LAYERS:-8}; SCAN_EVAL=${SCAN_EVAL:-200}
# a light warm start: 48 rows = 6 SFT steps (160 rows / 20 steps left a policy so sharp that 7 of 8 completions
# of a group were one report: no variance for GRPO to use; the grammar now carries the format)
SFT_ROWS=${SFT_ROWS:-48}
HELDOUT_SCANS=${HELDOUT_SCANS:-64}; HELDOUT_ROWS=${HELDOUT_ROWS:-4}; SAMPLER=${SAMPLER:-group}
# learner: each group's prompt run once (--shared-prefix), so the whole 16-completion batch is one micro-batch
SHARED=${SHARED---shared-prefix}; MICRO=${MICRO:-16}
CONSTRAINED=${CONSTRAINED---constrained}; STAGES=${STAGES:-"restore sft grpo report panel whole valid"}
STAGES=${STAGES//heldout/panel whole}
GPU=${GPU:-0}; TRAIN_DEVICE=(--threads 1); EVAL_DEVICE=(--threads 2)
[[ "$GPU" == 1 ]] && TRAIN_DEVICE=(--no-use-cpu --threads 2 --batch-groups) && EVAL_DEVICE=(--device cuda --threads 2)
RECORD=${RECORD:-results/memory-evidence5}; SFT_RECORD=${SFT_RECORD:-$RECORD/sft}
WHOLE_ROWS=${WHOLE_ROWS:-24}; WHOLE_SALT=${WHOLE_SALT:-heldout-whole}
# the SFT runs whose bands (bands.jsonl) the held-out bands must not include: the warm start's, and the stages
# before it (evidence v4: WHOLE_EXCLUDE="results/memory-evidence6/sft-format results/memory-evidence6/sft-format-b")
WHOLE_EXCLUDE=${WHOLE_EXCLUDE:-$SFT_RECORD}
PANEL_SALT=${PANEL_SALT:-heldout-panel}; ECHO_HISTORY=${ECHO_HISTORY:-accumulate}; LEARNER=${LEARNER:-masked}
SFT_MODEL=${SFT_MODEL:-$OUT/sft/model}
mkdir -p "$OUT/scan-eval"
has() { [[ " $STAGES " == *" $1 "* ]]; }
# background jobs: settle waits for every one started since the last settle, reports each that failed (its
# log says why) and goes on; on a CPU each batch settles before the next starts, with GPU=1 only at the end
pids=()
settle() { local p; for p in "${pids[@]}"; do wait "$p" || echo "a job failed (pid $p; see its log)" >&2; done; pids=(); }

# the step of the newest checkpoint-N folder in a folder ("" if none)
newest_checkpoint() { { ls -d "$1"/checkpoint-* 2>/dev/null || true; } | sed 's/.*checkpoint-//' | sort -n | tail -1; }
if has restore && [[ -f "$SFT_RECORD/adapter/adapter_model.safetensors" ]]; then
  mkdir -p "$OUT/grpo"
  [[ -f "$OUT/sft/summary.json" ]] || srft sft --overwrite --out "$OUT/sft" --from-adapter "$SFT_RECORD/adapter" > "$OUT/sft.log" 2>&1
  for rec in "$RECORD"/weak-*/; do
    run="$OUT/grpo/$(basename "$rec")"
    [[ -f "$run/summary.json" ]] && continue
    if [[ -f "$rec/summary.json" ]]; then  # a finished run: its model rebuilt when its adapter was recorded
      if [[ -f "$rec/adapter/adapter_model.safetensors" ]]; then
        srft sft --model "$SFT_MODEL" --from-adapter "$rec/adapter" --overwrite --out "$run" > "$run.restore.log" 2>&1
      fi  # recorded without it (evidence v4): its whole-episode eval is in the record (below)
      mkdir -p "$run"
      for f in config.json code_revision.json metrics.jsonl rollouts.jsonl summary.json; do cp "$rec/$f" "$run/$f"; done
      continue
    fi
    # an unfinished one recorded with its newest checkpoint (record_runs --with-checkpoint): the grpo stage's
    # --resume goes on from it, unless this machine's own run of it is as far or further
    step=$(newest_checkpoint "$rec")
    [[ -n "$step" ]] || continue
    have=$(newest_checkpoint "$run/trl")
    (( ${have:-0} >= step )) && continue
    mkdir -p "$run/trl" && cp -r "$rec/checkpoint-$step" "$run/trl/"
    for f in config.json code_revision.json metrics.jsonl rollouts.jsonl; do cp "$rec/$f" "$run/$f"; done
  done
  # the primary stage's whole-episode evals (RECORD/whole-SALT/NAME/, and NAME.json once finished): a finished
  # one is not played again, a recorded partial one (its rows.partial.jsonl) goes on with the rows it has
  for e in "$RECORD"/whole-*/*/; do
    [[ -d "$e" ]] || continue
    e=${e%/}; d="$OUT/$(basename "$(dirname "$e")")"; name=$(basename "$e")
    [[ -s "$d/$name.json" || -d "$d/$name" ]] && continue
    mkdir -p "$d" && cp -r "$e" "$d/"
    [[ -f "$e.json" ]] && cp "$e.json" "$d/"
  done
  # the panel's finished scans (RECORD/panel, as recorded after the panel stage): not scanned again
  for f in "$RECORD"/panel/heldout-*.json; do
    [[ -f "$f" && ! -f "$OUT/scan-eval/$(basename "$f")" ]] && cp "$f" "$OUT/scan-eval/"
  done
fi
if has sft && [[ ! -f "$OUT/sft/summary.json" ]]; then
  nice -n 5 python -m spectrum_rft sft --overwrite --out "$OUT/sft" --rows "$SFT_ROWS" --epochs 1 --batch-size 8 --lr 5e-4 --threads 2 \
    > "$OUT/sft.log" 2>&1
fi
if has grpo; then
  # on a CPU, SLOTS runs at a time (one torch thread each), the real arm's first (its steps cost up to ~3x the
  # control's: its own prefix plays lengthen as it keeps the echo), each next run started as soon as one ends;
  # with GPU=1 all of them at once
  SLOTS=${SLOTS:-2}; [[ "$GPU" == 1 ]] && SLOTS=1000
  for arm in $ARMS; do
    for seed in $SEEDS; do
      run="$OUT/grpo/$arm-s$seed"
      [[ -f "$run/summary.json" ]] && continue
      while (( $(jobs -rp | wc -l) >= SLOTS )); do wait -n || true; done
      # shellcheck disable=SC2086
      nice -n 10 python -m spectrum_rft train --arm "$arm" --model "$SFT_MODEL" --seed "$seed" --steps "$STEPS" \
        --prompts "$PROMPTS" --group "$GROUP" --max-completion-length "$MAXLEN" --lr "$LR" \
        --lora-layers "$LORA_LAYERS" "${TRAIN_DEVICE[@]}" --sampler "$SAMPLER" $CONSTRAINED $SHARED --micro-batch "$MICRO" \
        --echo-history "$ECHO_HISTORY" --learner "$LEARNER" --save-every 1 --resume \
        --out "$run" >> "$OUT/grpo-$arm-s$seed.log" 2>&1 &
      pids+=($!)
    done
  done
  settle  # every run (a failed one is named)
fi
runs=("$OUT"/grpo/*/)
if has report && [[ -e "${runs[0]}" ]]; then
  srft memory-report "${runs[@]}" --png "$OUT/memory_curves.png" | tee "$OUT/memory_report.txt"
  srft memory-report "${runs[@]}" --png "" --json > "$OUT/memory_report.json"
fi
if has panel; then
  for model in "$SFT_MODEL" "$OUT"/grpo/*/model; do
    [[ -d "$model" ]] || continue
    name=$(basename "$(dirname "$model")")
    [[ -f "$OUT/scan-eval/heldout-$name.json" ]] && continue
    # the panel: the real echo for every checkpoint, constrained greedy (what they report, as trained);
    # written to .part and moved when whole, so an interrupted scan is redone
    nice -n 5 python -m spectrum_rft scan-eval --model "$model" --arm weak-scaffold --salt "$PANEL_SALT" \
      --scans "$HELDOUT_SCANS" --temperature 0 --constrained "${EVAL_DEVICE[@]}" \
      --out "$OUT/scan-eval/heldout-$name.json.part" > "$OUT/scan-eval/heldout-$name.txt" 2> "$OUT/scan-eval/heldout-$name.log" \
      && mv "$OUT/scan-eval/heldout-$name.json.part" "$OUT/scan-eval/heldout-$name.json" && cat "$OUT/scan-eval/heldout-$name.txt" &
    pids+=($!)
    [[ "$GPU" == 1 ]] || settle
  done
  settle
  # each checkpoint against the warm start, scan by scan (mean difference +- SE)
  srft scan-eval --compare "$OUT/scan-eval/heldout-sft.json" "$OUT"/scan-eval/heldout-weak-*.json \
    | tee "$OUT/scan-eval/heldout-compare.txt"
  # section 11's primary rule (fixed before the runs): every seed with both arms on the panel
  panel=()
  for f in "$OUT"/scan-eval/heldout-weak-scaffold-s*.json; do
    [[ -f "$f" ]] || continue
    seed=${f##*-s}; seed=${seed%.json}
    [[ -f "$OUT/scan-eval/heldout-weak-scrambled-s$seed.json" ]] || continue
    panel+=(--panel-real "$seed=$f" --panel-control "$seed=$OUT/scan-eval/heldout-weak-scrambled-s$seed.json")
  done
  if [[ ${#panel[@]} -gt 0 ]]; then
    srft memory-report --panel-warm "$OUT/scan-eval/heldout-sft.json" "${panel[@]}" | tee "$OUT/panel_verdict.txt"
  fi
fi
if has whole; then
  # the scripted baselines take seconds: run again (--overwrite) whenever their summary is missing
  [[ -s "$OUT/heldout-baselines.json" ]] || srft eval --model memoryless --model accumulate --model oracle --prompt weak \
    --memory-mode scaffold --rows "$HELDOUT_ROWS" --salt heldout --no-progress --json --overwrite \
    --out "$OUT/heldout/baselines" > "$OUT/heldout-baselines.json"
  for served in "$SFT_MODEL" "$OUT"/grpo/weak-scaffold-s0/model "$OUT"/grpo/weak-scrambled-s0/model \
                "grammar:$SFT_MODEL" "grammar:$OUT"/grpo/weak-scaffold-s0/model "grammar:$OUT"/grpo/weak-scrambled-s0/model; do
    model=${served#grammar:}; grammar=; tag=
    [[ "$served" == grammar:* ]] && grammar=--grammar && tag=-grammar
    [[ -d "$model" ]] || continue
    name=$(basename "$(dirname "$model")")$tag
    [[ -s "$OUT/heldout-$name.json" ]] && continue
    port=$((8100 + RANDOM % 800))
    # python itself in the background (not the srft function: $! would be a subshell, and killing it left the
    # server running)
    python -m spectrum_rft serve-hf --model "$model" --port "$port" --threads 2 $grammar > "$OUT/serve-$name.log" 2>&1 &
    server=$!
    for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break; sleep 1; done
    # an interrupted run goes on with the rows it finished (eval --resume); a CPU server beside other jobs can
    # take minutes per turn: a long request timeout, so that a slow machine is not scored as a model that timed out
    resume=(); [[ -f "$OUT/heldout/$name/rows.jsonl" ]] && resume=(--resume)
    srft eval --model openai/spectrum-hf --api-base "http://127.0.0.1:$port/v1" --prompt weak \
      --memory-mode scaffold --rows "$HELDOUT_ROWS" --salt heldout --concurrency 1 --param temperature=0 \
      --param timeout=900 --timeout 7200 --no-progress --json "${resume[@]}" --out "$OUT/heldout/$name" \
      > "$OUT/heldout-$name.json.part" || true
    # only a run that was not stopped (timeout, Ctrl-C, crash) counts as done; otherwise .part stays and the
    # next run goes on with it
    python -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])).get("stopped") is not None)' \
      "$OUT/heldout-$name.json.part" 2>/dev/null && mv "$OUT/heldout-$name.json.part" "$OUT/heldout-$name.json"
    kill "$server"; wait "$server" 2>/dev/null || true
  done
fi
if has primary; then  # evidence v4's primary endpoint (section 12): whole held-out episodes, no grammar
  # serve-hf answers one request at a time and eval keeps 16 rows in flight, so its log's time per request is
  # mostly the queue: ~75 s each with 16 waiting = ~4.7 s of serving, ~23 min for a checkpoint's 288 (2026-12-06)
  W="$OUT/whole-$WHOLE_SALT"
  [[ -s "$W/accumulate/summary.json" ]] || srft eval --model accumulate --prompt weak --memory-mode scaffold \
    --rows "$WHOLE_ROWS" --salt "$WHOLE_SALT" --no-progress --overwrite --out "$W/accumulate" > "$W-accumulate.log" 2>&1
  verdict=(--whole-warm "$W/sft" --whole-perfect "$W/accumulate")
  for x in $WHOLE_EXCLUDE; do verdict+=(--whole-exclude "$x"); done
  bash scripts/whole_episodes.sh "$SFT_MODEL" "$W/sft" "$WHOLE_ROWS" "$WHOLE_SALT"
  for run in "$OUT"/grpo/weak-*/; do
    run=${run%/}; name=$(basename "$run")
    [[ -f "$run/summary.json" ]] || continue
    if [[ ! -d "$run/model" && ! -s "$W/$name.json" ]]; then
      echo "$name: finished, but neither its model nor its whole-episode eval is here (record it --with-adapter)" >&2
      continue
    fi
    bash scripts/whole_episodes.sh "$run/model" "$W/$name" "$WHOLE_ROWS" "$WHOLE_SALT" || continue
    seed=${name##*-s}
    [[ "$name" == weak-scaffold-* ]] && verdict+=(--whole-real "$seed=$W/$name") || verdict+=(--whole-control "$seed=$W/$name")
    verdict+=(--whole-exclude "$run")
  done
  srft memory-report "${verdict[@]}" | tee "$OUT/whole_verdict.txt"
fi
# the warm start's own (unconstrained) valid-report rate, T = 1 and 0.7: last, it is the longest measurement
if has valid && [[ ! -f "$OUT/scan-eval/sft-free.json" ]]; then
  nice -n 5 python -m spectrum_rft scan-eval --model "$SFT_MODEL" --scans "$SCAN_EVAL" --temperature 1 --temperature 0.7 \
    --threads 2 --out "$OUT/scan-eval/sft-free.json" | tee "$OUT/scan-eval/sft-free.txt"
fi
