"""Run by tests/test_multiprocess.py under ``torchrun --nproc_per_node 2``: DAPO with dynamic sampling filtering
some groups on the demo task; each rank writes what it saw to ``<out>/rank<k>.json``.

    python -m torch.distributed.run --nproc_per_node 2 tests/dist_dapo_script.py <out> [on_policy|off_policy_skip|off_policy_select]

``on_policy``: one rollout per step, 6 rows per rank (a group straddles the ranks). ``off_policy_skip``: 3 minibatches
per rollout (18 rows per rank, again a straddling group; old-policy log-probs, deferred to the trained rows) and GRESO
skipping on, over 20 prompts so that prompts come back. ``off_policy_select``: the same with the posterior prompt
selector.

Not a test file itself (pytest does not collect it).
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from helpers import TINY_SETTINGS, torchrun_script  # this script's folder (tests/) is on sys.path

from trl_ext import DAPOTrainer, get_preset
from trl_ext.demo import DemoModelConfig, DemoTaskConfig, build_model, build_tokenizer, make_problems


def even_answer_reward(completions, answer, **kwargs):
    """Informative only for prompts with an even answer, so that dynamic sampling drops and refills groups."""
    return [float(len(c) % 2) if int(a) % 2 == 0 else 0.0 for c, a in zip(completions, answer, strict=True)]


MODES = {
    # 6 rows per rank, groups of 4, one rollout per step: 12 rows, the second group straddles the two ranks
    "on_policy": dict(num_train=60, max_steps=3, num_minibatches=1),
    # 3 minibatches per rollout: 18 rows (4.5 groups) per rank, old-policy log-probs of the trained rows only
    "off_policy_skip": dict(
        num_train=20,
        max_steps=9,
        num_minibatches=3,
        dynamic_sampling_skip_predicted=True,
    ),
    # the same with the posterior prompt selector instead of GRESO
    "off_policy_select": dict(
        num_train=20,
        max_steps=9,
        num_minibatches=3,
        dynamic_sampling_select_prompts=True,
    ),
}


def main(out: str, mode: str = "on_policy") -> None:
    tokenizer = build_tokenizer()
    model = build_model(
        tokenizer,
        DemoModelConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
        ),
    )
    settings = dict(MODES[mode])
    train, _ = make_problems(DemoTaskConfig(max_operand=9, num_train=settings.pop("num_train"), num_eval=20))
    args = get_preset(
        "dapo",
        **{**TINY_SETTINGS, "per_device_train_batch_size": 6, "max_steps": settings.pop("max_steps")},
        output_dir=out,
        soft_overlong_punishment=False,
        dynamic_sampling_max_generation_batches=3,
        temperature=1.5,
        **settings,
    )
    trainer = DAPOTrainer(model, [even_answer_reward], args=args, train_dataset=train, processing_class=tokenizer)
    refill_rows = []  # rows each round gives this rank (whole groups per process for stream-drawn rounds)
    generate_and_score = trainer.generate_and_score

    def recording(inputs):
        refill_rows.append(len(inputs))
        return generate_and_score(inputs)

    trainer.generate_and_score = recording
    trainer.train()

    world = dist.get_world_size() if dist.is_initialized() else 1
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    gathered = [torch.zeros_like(params) for _ in range(world)]
    if world > 1:
        dist.all_gather(gathered, params)
    else:
        gathered = [params]
    logs = [
        {k: v for k, v in h.items() if k.startswith("dynamic_sampling/") and "time" not in k}
        for h in trainer.state.log_history
        if "dynamic_sampling/rounds" in h
    ]
    rank = trainer.accelerator.process_index
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(
            {
                "rank": rank,
                "world_size": world,
                "accelerate_num_processes": trainer.accelerator.num_processes,
                "global_step": trainer.state.global_step,
                "weights_equal_across_ranks": all(torch.equal(gathered[0], g) for g in gathered),
                "dynamic_sampling_logs": logs,
                "refill_rows": refill_rows,
                "skip_history": trainer.dynamic_sampler.skip.state_dict()
                if trainer.dynamic_sampler.skip is not None
                else None,
                "selector": trainer.dynamic_sampler.selector.state_dict()
                if trainer.dynamic_sampler.selector is not None
                else None,
            },
            f,
        )


if __name__ == "__main__":
    with torchrun_script():
        main(*sys.argv[1:])
