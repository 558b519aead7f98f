#!/usr/bin/env bash
# GPU check in one go: on one CUDA device, offline, without vLLM, within 8 minutes by its own estimate (printed and
# checked before anything starts; the assumptions are in benchmarks/gpu_check.py: ASSUMED):
#   - the overhead ratio of ours to TRL's, lock-stepped, final weights compared (benchmarks/overhead.py);
#   - the dynamic-sampling cost at p = 0.5 (benchmarks/dynamic_sampling.py);
#   - peak memory of one GRPO, DAPO and GSPO step (benchmarks/memory.py);
#   - generation tokens/s of DAPO on a random Qwen2 of Qwen2.5-0.5B's shape in bf16 (built from a config);
#   - the dynamic-sampling scale benchmark at one process (benchmarks/ds_scale.py), if it exists.
# Each part runs in its own process group under its own time limit, so one that fails or hangs costs only its limit;
# the report, <out>/gpu_check.md, says which parts failed (exit 1 if any did).
#
#   bash benchmarks/gpu_check.sh [--out DIR]       # default outputs/gpu_check
#   bash benchmarks/gpu_check.sh --dry-run         # CPU dry run: every size shrunk, the same parts (a few minutes)
#   bash benchmarks/gpu_check.sh --with-vllm       # then, outside the 8 minutes: DAPO with vLLM colocate against
#                                                  # transformers, the vLLM step benchmark and the vLLM sync tests
#   bash benchmarks/gpu_check.sh --with-gsm8k      # then a few minutes of the GSM8K GRPO recipe with trl-ext eval,
#                                                  # when Qwen2.5-0.5B-Instruct and GSM8K are on the machine
#   bash benchmarks/gpu_check.sh --skip-check --with-vllm   # the extras alone
# GPU_CHECK_OUT, GPU_CHECK_DRY_RUN=1, GPU_CHECK_STEPS (the vLLM comparison's steps) are read as before. Nothing is
# downloaded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT="${GPU_CHECK_OUT:-outputs/gpu_check}"
DRY_RUN="${GPU_CHECK_DRY_RUN:-0}"
WITH_VLLM=0
WITH_GSM8K=0
RUN_CHECK=1
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --out) OUT="$2"; shift ;;
        --with-vllm) WITH_VLLM=1 ;;
        --with-gsm8k) WITH_GSM8K=1 ;;
        --skip-check) RUN_CHECK=0 ;;
        -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "unknown option: $1 (see --help)"; exit 2 ;;
    esac
    shift
done
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"   # one GPU
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
mkdir -p "$OUT"
started=$SECONDS

phase() { printf '\n== %s (%ds elapsed)\n' "$1" "$((SECONDS - started))"; }

[ "$DRY_RUN" = 1 ] && echo "dry run on CPU: every size shrunk; the report goes to $OUT/gpu_check.md"
CHECK_ARGS=(--out "$OUT")
[ "$DRY_RUN" = 1 ] && CHECK_ARGS+=(--dry-run)
check_status=0
if [ "$RUN_CHECK" = 1 ]; then
    python benchmarks/gpu_check.py check "${CHECK_ARGS[@]}" || check_status=$?
    echo "one-go check done in $((SECONDS - started)) s (exit $check_status)"
    [ -f "$OUT/gpu_check.md" ] && echo "report: $OUT/gpu_check.md"
fi
if [ "$WITH_VLLM" != 1 ] && [ "$WITH_GSM8K" != 1 ]; then
    exit "$check_status"
fi

# ---- Extras, outside the 8-minute budget ------------------------------------------------------------------------
STEPS="${GPU_CHECK_STEPS:-8}"
RESULTS="$OUT/vllm_check.md"
RUN_ARGS=()
BUILD_ARGS=()
if [ "$DRY_RUN" = 1 ]; then
    RUN_ARGS=(--device cpu --batch_size 16 --max_completion_length 8)
    BUILD_ARGS=(--tiny)
fi
if [ "$WITH_VLLM" = 1 ] && [ "$DRY_RUN" != 1 ]; then
    python benchmarks/gpu_check.py env   # exit 2 without vLLM
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

if [ "$WITH_VLLM" = 1 ]; then
    phase "DAPO, $STEPS steps, transformers generation (limit 180 s)"
    run_mode transformers 180
fi

if [ "$WITH_VLLM" = 1 ] && [ "$DRY_RUN" != 1 ]; then
    phase "DAPO, $STEPS steps, vLLM colocate (limit 300 s)"
    run_mode vllm 300
fi

# The vLLM step benchmark and the sync tests, the same code as on CPU (benchmarks/vllm_speed.py, tests/test_vllm_*.py):
# DAPO steps at 256 and 64 tokens, vLLM colocate with sleep mode against transformers, and LoRA with merge-sync against
# adapter-sync; then the real-engine sync tests (teacher-forced log-prob gaps, LoRA both ways).
if [ "$WITH_VLLM" = 1 ] && [ "$DRY_RUN" != 1 ]; then
    phase "vLLM step benchmark: DAPO at 256 and 64 tokens, LoRA merge vs adapter (limit 1200 s)"
    timeout 1200 python benchmarks/vllm_speed.py --parts step,lora --steps "${GPU_CHECK_STEP_STEPS:-4}" --sleep \
        --threads 4 --prompts 8 --out "$OUT/vllm_speed" > "$OUT/vllm_speed.log" 2>&1 \
        || { tail -n 40 "$OUT/vllm_speed.log"; echo "FAILED: the vLLM step benchmark"; exit 1; }
    sed -n '/^## /,$p' "$OUT/vllm_speed/vllm_speed.md"
    phase "vLLM sync tests on CUDA (limit 900 s)"
    timeout 900 python -m pytest -q -p no:cacheprovider tests/test_vllm_sync.py tests/test_vllm_engine.py \
        > "$OUT/vllm_tests.log" 2>&1 || { tail -n 40 "$OUT/vllm_tests.log"; echo "FAILED: the vLLM sync tests"; exit 1; }
    tail -n 3 "$OUT/vllm_tests.log"
fi

# GSM8K reproduction (recipes/configs/qwen2.5-0.5b-instruct/grpo/config_gsm8k.yaml): a few minutes of GRPO, with
# trl-ext eval of the base and the trained model side by side. Needs Qwen2.5-0.5B-Instruct and GSM8K on the machine
# (GPU_CHECK_QWEN / GPU_CHECK_GSM8K: a folder or a Hub id in the local cache; nothing is downloaded), else skipped.
# The dry run trains the tiny model on a GSM8K-layout file of the demo's arithmetic with the same config.
if [ "$WITH_GSM8K" = 1 ]; then
    REPRO_STEPS="${GPU_CHECK_REPRO_STEPS:-30}"
    REPRO_CONFIG=recipes/configs/qwen2.5-0.5b-instruct/grpo/config_gsm8k.yaml
    if [ "$DRY_RUN" = 1 ]; then
        located=$(python benchmarks/gpu_check.py gsm8k --write_demo "$OUT/gsm8k-data") \
            && located="MODEL=$OUT/model"$'\n'"$located"
        REPRO_ARGS=(--use_vllm false --bf16 false --use_cpu true --gradient_checkpointing false --num_generations 4
                    --per_device_train_batch_size 8 --gradient_accumulation_steps 1 --steps_per_generation 1
                    --max_completion_length 8 --dataset_test_split "$OUT/gsm8k-data/test.jsonl")
        EVAL_ARGS=(--num_samples 2 --max_new_tokens 8 --dataset_test_split "$OUT/gsm8k-data/test.jsonl")
        DATA_FILE_ARGS=(--dataset_name "$OUT/gsm8k-data/train.jsonl")
    else
        located=$(python benchmarks/gpu_check.py gsm8k --model "${GPU_CHECK_QWEN:-Qwen/Qwen2.5-0.5B-Instruct}" \
            --data "${GPU_CHECK_GSM8K:-openai/gsm8k}") || located=""
        REPRO_ARGS=(--held_out_max_problems 200)
        EVAL_ARGS=(--num_samples 4 --max_new_tokens 512 --held_out_max_problems 200)
        python -c "import vllm" 2>/dev/null && EVAL_ARGS+=(--use_vllm true) || REPRO_ARGS+=(--use_vllm false)
        DATA_FILE_ARGS=()
    fi
    if [ -z "$located" ] || ! grep -q '^MODEL=' <<< "$located"; then
        phase "GSM8K reproduction: skipped"
        echo "${located:-SKIPPED: Qwen2.5-0.5B-Instruct or GSM8K is not on this machine}"
    else
        MODEL=$(sed -n 's/^MODEL=//p' <<< "$located")
        DATA=$(sed -n 's/^DATA=//p' <<< "$located")
        [ ${#DATA_FILE_ARGS[@]} -eq 0 ] && DATA_FILE_ARGS=(--dataset_name "$DATA")
        SYSTEM="Let's think step by step and output the final answer after \"####\"."
        phase "GSM8K reproduction: GRPO $REPRO_STEPS steps from $REPRO_CONFIG (limit 600 s)"
        timeout 600 python recipes/grpo.py --config "$REPRO_CONFIG" --model_name_or_path "$MODEL" "${DATA_FILE_ARGS[@]}" \
            --max_steps "$REPRO_STEPS" --held_out_eval_steps 0 --save_strategy no --output_dir "$OUT/gsm8k-grpo" \
            "${REPRO_ARGS[@]}" > "$OUT/run-gsm8k.log" 2>&1 || { tail -n 40 "$OUT/run-gsm8k.log"; echo "FAILED: the GSM8K run"; exit 1; }
        grep -A2 -E '== grpo' "$OUT/run-gsm8k.log" | sed 's/.*== grpo/== grpo/' || true
        phase "GSM8K reproduction: trl-ext eval, base and trained side by side (limit 600 s)"
        timeout 600 python recipes/eval.py --models "$MODEL" "$OUT/gsm8k-grpo" "${DATA_FILE_ARGS[@]}" \
            --system_prompt "$SYSTEM" --output_dir "$OUT/gsm8k-eval" "${EVAL_ARGS[@]}" > "$OUT/eval-gsm8k.log" 2>&1 \
            || { tail -n 40 "$OUT/eval-gsm8k.log"; echo "FAILED: trl-ext eval"; exit 1; }
        sed -n '/^== eval/,$p' "$OUT/eval-gsm8k.log"
        echo "CHECK OK gsm8k reproduction: eval.json in $OUT/gsm8k-eval"
    fi
fi

if [ "$WITH_VLLM" = 1 ]; then
    phase "results of the vLLM comparison"
    python benchmarks/gpu_check.py report --out "$OUT" --markdown "$RESULTS"
fi
echo "done in $((SECONDS - started)) s"
exit "$check_status"
