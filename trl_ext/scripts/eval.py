"""Evaluate models as the papers report it: pass@1 (greedy), avg@K, pass@k (unbiased) and maj@K, side by side.

    trl-ext eval                                     # the demo's SFT warm start and, if trained, outputs/dapo-demo
    trl-ext eval --models outputs/dapo-demo outputs/grpo-demo --num_samples 8
    trl-ext eval --models Qwen/Qwen2.5-0.5B-Instruct outputs/qwen-grpo --dataset_name openai/gsm8k \
        --dataset_config main --num_samples 32 --max_new_tokens 1024 --use_vllm

Each model is evaluated as the recipes measure held-out accuracy (same layouts, prompts and task reward), with DAPO's
sampling by default; ``eval.json`` and ``per_problem.jsonl`` under ``output_dir`` hold every figure's raw data.
"""

from __future__ import annotations

import dataclasses
import time

from trl_ext.data import format_prompts, is_data_file, load_task_data
from trl_ext.diagnostics.eval_report import print_report, write_report
from trl_ext.diagnostics.evaluation import EvalSettings, check_vllm, evaluate_model
from trl_ext.recipe.args import EvalArguments
from trl_ext.recipe.evaluation import completion_budget
from trl_ext.recipe.models import demo_models, demo_threads, load_for_vllm, load_policy
from trl_ext.recipe.parsing import parse
from trl_ext.recipe.report import announce_eval
from trl_ext.recipe.rewards import evaluation_reward, task_rewards
from trl_ext.recipe.steps import run
from trl_ext.reliability.checks import longest_prompt

DEMO_ANSWER_TOKENS = 4  # the demo's own check reads the first integer of 4 new tokens (trl_ext.demo.greedy_accuracy)


def main(args: EvalArguments) -> dict:
    started = time.time()
    demo = args.dataset_name is None
    demo_threads(demo=demo)

    # The recipes' held-out split and the reward that scores it
    data = load_task_data(args)  # a lone file is evaluated whole, nothing carved
    problems, split = data.held_out, args.dataset_test_split
    if problems is None and is_data_file(args.dataset_name):
        problems, split = data.train, "the whole file"
    if problems is None or len(problems) == 0:
        raise ValueError(
            f"{args.dataset_name} has no held-out split {args.dataset_test_split!r} to evaluate on: name one with "
            "--dataset_test_split <split or file>."
        )
    reward = evaluation_reward(args, data.layout)
    if reward is None:
        task_rewards(args, data.layout)  # raises, naming the missing reference column and the fix

    # Settings: DAPO's sampling unless given; bad k or K fail here, before any model is loaded
    settings = EvalSettings(
        num_samples=args.num_samples,
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=DEMO_ANSWER_TOKENS if demo else args.max_new_tokens or 1024,
        greedy=args.greedy,
        seed=args.seed,
        batch_size=args.batch_size,
        pass_ks=args.pass_ks,
        use_vllm=args.use_vllm,
    )
    settings.ks()
    if args.use_vllm:
        check_vllm()
    models = [(m, m) for m in args.models] if args.models else demo_models()
    announce_eval(args, data, split, len(problems), [name for name, _ in models], settings)

    evaluations = []
    for name, path in models:
        if args.use_vllm:  # vLLM loads the weights itself
            model, tokenizer = load_for_vllm(path, args.chat_template)
        else:
            model, tokenizer, path = load_policy(path, args.dtype, None, args.chat_template)
        formatted = format_prompts(problems, tokenizer, args.system_prompt, "the evaluation split")
        length = completion_budget(model, longest_prompt(formatted, tokenizer), settings.max_new_tokens)
        fitted = dataclasses.replace(settings, max_new_tokens=length)
        evaluations.append(evaluate_model(name, model, tokenizer, formatted, reward, fitted, path))
        del model

    print_report(evaluations, settings)
    return write_report(args.output_dir, evaluations, settings, data, split, reward, time.time() - started)


def cli(argv: list[str] | None = None) -> dict:
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and run ``main``."""
    return run("eval", main, lambda: parse((EvalArguments,), None, argv))


if __name__ == "__main__":
    cli()
