"""Evaluate models as the papers report it: pass@1 (greedy), avg@K, pass@k (unbiased) and maj@K, side by side.

    trl-ext eval                                     # the demo's SFT warm start and, if trained, outputs/dapo-demo
    trl-ext eval --models outputs/dapo-demo outputs/grpo-demo --num_samples 8
    trl-ext eval --models Qwen/Qwen2.5-0.5B-Instruct outputs/qwen-grpo --dataset_name openai/gsm8k \
        --dataset_config main --num_samples 32 --max_new_tokens 1024 --use_vllm

The recipe is ``trl_ext/scripts/eval.py`` (``trl_ext.scripts.eval``): this entry point only calls its ``cli``.
"""

from trl_ext.scripts.eval import cli

if __name__ == "__main__":
    cli()
