#!/usr/bin/env bash
# GPU check of the vLLM wiring: on one GPU, offline, build a random-weight Qwen2 model locally, train DAPO (dynamic
# sampling on) for a few steps with transformers generation and with vLLM colocated, check that every generation
# round (refills included) went through TRL's generation path and, with vLLM, reached the vLLM engine, and print
# generation throughput and step time side by side. About 3-6 minutes; each phase has a hard time limit.
#
#   bash benchmarks/gpu_check.sh                 # GPU_CHECK_STEPS=8 GPU_CHECK_OUT=outputs/gpu_check by default
#   GPU_CHECK_DRY_RUN=1 bash benchmarks/gpu_check.sh   # CPU dry run of the script (tiny model, transformers only)
#
# Needs the repository installed with vLLM on a CUDA machine (pip install -e ".[vllm]", or an existing vllm that TRL
# 1.12 supports: 0.19.0 to 0.27.1). Nothing is downloaded. Writes benchmarks/results/gpu_check.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

STEPS="${GPU_CHECK_STEPS:-8}"
OUT="${GPU_CHECK_OUT:-outputs/gpu_check}"
DRY_RUN="${GPU_CHECK_DRY_RUN:-0}"
RESULTS=benchmarks/results/gpu_check.md
RUN_ARGS=()
BUILD_ARGS=()
if [ "$DRY_RUN" = 1 ]; then
    RUN_ARGS=(--device cpu --batch_size 16 --max_completion_length 8)
    BUILD_ARGS=(--tiny)
    RESULTS="$OUT/gpu_check.md"
fi
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"   # one GPU
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
mkdir -p "$OUT"
started=$SECONDS

phase() { printf '\n== %s (%ds elapsed)\n' "$1" "$((SECONDS - started))"; }

phase "environment"
if [ "$DRY_RUN" = 1 ]; then
    echo "dry run on CPU: tiny model, transformers generation only, results in $RESULTS"
else
    python benchmarks/gpu_check.py env
fi

phase "building a random-weight Qwen2 model in $OUT/model"
python benchmarks/gpu_check.py build --out "$OUT/model" "${BUILD_ARGS[@]}"

run_mode() {  # run_mode <transformers|vllm> <time limit in seconds>
    local log="$OUT/run-$1.log" status=0
    timeout "$2" python benchmarks/gpu_check.py run --mode "$1" --model "$OUT/model" --out "$OUT" --steps "$STEPS" \
        "${RUN_ARGS[@]}" > "$log" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$log"
        [ "$status" -eq 124 ] && echo "FAILED: the $1 run exceeded its $2 s limit" || echo "FAILED: the $1 run (exit $status)"
        echo "full log: $log"
        exit 1
    fi
    grep -E '^CHECK' "$log"
}

phase "DAPO, $STEPS steps, transformers generation (limit 180 s)"
run_mode transformers 180

if [ "$DRY_RUN" != 1 ]; then
    phase "DAPO, $STEPS steps, vLLM colocate (limit 300 s)"
    run_mode vllm 300
fi

phase "results"
python benchmarks/gpu_check.py report --out "$OUT" --markdown "$RESULTS"
echo "done in $((SECONDS - started)) s"
