"""One weight push per optimizer step under vLLM's sleep mode (``trl_ext.generation.engine_awake``), however many
refill rounds dynamic sampling runs, counted on a stand-in for TRL's colocated ``VLLMGeneration``: it follows TRL's
sleep-mode rules (sleep at level 2 after each ``generate``, which discards the weights; ``generate`` pushes them
again when they were discarded; ``sync_weights`` wakes the weights first) and refuses to generate from discarded
weights. Sleep mode itself is CUDA-only, hence the stand-in."""

from __future__ import annotations

import torch
from helpers import tiny_args

from trl_ext import DAPOTrainer


def even_answer_reward(completions, answer, **kwargs):
    """Informative only for prompts whose answer is even: dynamic sampling drops about half the groups."""
    return [float(i % 2) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


class SleepingEngine:
    """TRL's ``VLLMGeneration`` in colocate mode with ``enable_sleep_mode=True``, as far as the trainer sees it."""

    mode = "colocate"

    def __init__(self, eos_id: int):
        self.enable_sleep_mode = True
        self._llm_weights_sleeping = True  # TRL builds the engine asleep (level 2)
        self.weights_valid = False
        self.pushes = self.generates = 0
        self.eos_id = eos_id
        self.llm = self

    def wake_up(self, tags=None):
        pass  # memory mapped again; level-2 weights stay invalid until pushed

    def sleep(self, level):
        self.weights_valid = self.weights_valid and level == 1
        self._llm_weights_sleeping = level == 2

    def sync_weights(self):
        self.pushes += 1
        self.weights_valid, self._llm_weights_sleeping = True, False

    def generate(self, prompts, images, num_generations, profiler=None):
        if self.enable_sleep_mode and self._llm_weights_sleeping:
            self.sync_weights()  # TRL: "Sleep level 2 discards the weights ... they must be re-pushed"
        assert self.weights_valid, "generated from discarded weights"
        self.generates += 1
        completions = [[5 + i % 3, self.eos_id] for i in range(len(prompts))]
        logprobs = [[[-1.0] for _ in ids] for ids in completions]
        if self.enable_sleep_mode:
            self.sleep(level=2)
        return prompts, completions, logprobs, None


def test_refill_rounds_of_a_step_push_the_weights_once(tiny_model, tokenizer, problems, tmp_path):
    args = tiny_args(
        "dapo",
        tmp_path,
        soft_overlong_punishment=False,
        max_steps=3,
        dynamic_sampling_max_generation_batches=8,
        vllm_importance_sampling_correction=False,
    )
    trainer = DAPOTrainer(
        tiny_model, [even_answer_reward], args=args, train_dataset=problems[0], processing_class=tokenizer
    )
    engine = SleepingEngine(tokenizer.eos_token_id)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, engine, -1
    trainer.train()
    rounds = [h["dynamic_sampling/rounds"] for h in trainer.state.log_history if "dynamic_sampling/rounds" in h]
    assert len(rounds) == 3 and sum(rounds) > 3  # refills happened
    assert engine.generates == sum(rounds)
    assert engine.pushes == 3  # one per optimizer step, not one per round
    assert engine.enable_sleep_mode and not engine._llm_weights_sleeping  # asleep at level 1 between steps
    assert torch.isfinite(torch.tensor([h["loss"] for h in trainer.state.log_history if "loss" in h])).all()


def test_trl_reads_the_sleep_flag_at_each_generate_call():
    """The contract ``engine_awake`` relies on, against the installed TRL: every ``sleep`` / ``wake_up`` of the engine
    in ``VLLMGeneration.generate`` sits under an ``if`` that reads ``self.enable_sleep_mode`` at call time, so turning
    the attribute off between calls keeps the engine awake, and the sleep after generating is at level 2 (the one that
    discards the weights, which ``engine_awake`` avoids). Fails loudly if TRL caches the flag or renames it."""
    import ast
    import inspect
    import textwrap

    from trl.generation.vllm_generation import VLLMGeneration

    tree = ast.parse(textwrap.dedent(inspect.getsource(VLLMGeneration.generate)))
    guarded, calls = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "self.enable_sleep_mode" in ast.unparse(node.test):
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("self.llm.sleep", "self.llm.wake_up"):
            calls.append(node)
    assert calls and all(id(call) in guarded for call in calls), [ast.unparse(c) for c in calls]
    assert "self.llm.sleep(level=2)" in [ast.unparse(c) for c in calls]
    assert "enable_sleep_mode" in inspect.signature(VLLMGeneration.__init__).parameters
