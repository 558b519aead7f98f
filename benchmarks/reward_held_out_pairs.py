"""Write the demo reward model's held-out pair file: same-prompt correct and incorrect completions of the warm start.

    python benchmarks/reward_held_out_pairs.py        # writes benchmarks/data/reward_held_out_pairs.jsonl (+ .meta.json)

For each of the demo's 240 held-out problems (never trained on by SFT, the reward model or RL), the SFT warm start
samples 32 completions (temperature 1.0, up to 6 new tokens: the demo DAPO's ``max_completion_length``), labelled by
the rule reward (``arithmetic_reward``). A problem whose samples hold both a correct and an incorrect completion gives
pairs (chosen correct, rejected incorrect): its most frequent correct text against up to 4 distinct incorrect texts,
most frequent first (the mistakes the policy makes most, which RL meets most). Texts are as TRL's GRPO decodes them
(no EOS), and ``rejected_truncated`` says which rejected completion hit the length limit. Seeded and deterministic on
one machine and release set; the meta file records the warm start's key hash and the releases. Written once, before
any change to the reward model, so that the reward model's pairwise accuracy is measured on a fixed set.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from trl_ext.demo import DemoTaskConfig, build_tokenizer, make_problems, warm_start, warm_start_record
from trl_ext.dpo.pairs import sample_groups
from trl_ext.rewards.arithmetic import arithmetic_reward

OUT = Path(__file__).parent / "data" / "reward_held_out_pairs.jsonl"


def held_out_pairs(model, tokenizer, prompts, answers, samples: int, max_new_tokens: int, per_prompt: int) -> list:
    """Rows ``prompt, chosen, rejected, rejected_truncated`` from ``samples`` completions of each prompt."""
    completions, ids = sample_groups(model, tokenizer, prompts, samples, max_new_tokens)
    flat_answers = [a for a in answers for _ in range(samples)]
    labels = arithmetic_reward(None, completions, flat_answers)
    eos = tokenizer.eos_token_id
    rows = []
    for k, prompt in enumerate(prompts):
        group = range(k * samples, (k + 1) * samples)
        correct = Counter(completions[i] for i in group if labels[i] == 1.0)
        wrong = Counter(completions[i] for i in group if labels[i] == 0.0)
        truncated = {completions[i]: not ids[i] or ids[i][-1] != eos for i in group}
        if not correct or not wrong:
            continue
        chosen = min(correct, key=lambda t: (-correct[t], t))
        for rejected in sorted(wrong, key=lambda t: (-wrong[t], t))[:per_prompt]:
            rows.append(
                {"prompt": prompt, "chosen": chosen, "rejected": rejected, "rejected_truncated": truncated[rejected]}
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--max_new_tokens", type=int, default=6)
    parser.add_argument("--per_prompt", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(1)
    path = warm_start()
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = build_tokenizer()
    _, held_out = make_problems(DemoTaskConfig())
    torch.manual_seed(args.seed)
    rows = held_out_pairs(
        model,
        tokenizer,
        list(held_out["prompt"]),
        list(held_out["answer"]),
        args.samples,
        args.max_new_tokens,
        args.per_prompt,
    )
    output = Path(args.output)
    output.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    record = warm_start_record(path)
    meta = {
        "pairs": len(rows),
        "prompts": len({r["prompt"] for r in rows}),
        "held_out_problems": len(held_out),
        "settings": vars(args) | {"output": output.name},
        "warm_start_key_hash": record["key_hash"],
        "releases": record["releases"],
        "machine": record["machine"],
    }
    output.with_suffix(".meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(f"{len(rows)} pairs from {meta['prompts']} of {len(held_out)} held-out problems -> {output}")


if __name__ == "__main__":
    main()
