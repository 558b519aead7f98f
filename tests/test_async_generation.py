"""Issue 24: generation that overlaps training (``async_generation``), over TRL's vLLM server mode.

vLLM cannot run here: TRL's own ``VLLMGeneration`` runs for real (server mode: its gathers, broadcasts, weight
streaming and slicing), and only the HTTP client it builds, ``VLLMClient``, is replaced by ``StandInClient``, an
in-process engine that samples digits from a generator seeded by the prompt and by a digest of the weights it was last
sent. So a completion says which weights generated it, and a resumed run regenerates nothing differently.

Also a ``torchrun --nproc_per_node 2`` script (``python -m torch.distributed.run ... tests/test_async_generation.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from helpers import tiny_args  # noqa: E402


def even_answer_reward(completions, answer, **kwargs):
    """Informative only for prompts whose answer is even ([0, 1, 0, 1] per group); constant 0 otherwise, so dynamic
    sampling drops about half the groups and refills."""
    return [float(i % 2) if int(a) % 2 == 0 else 0.0 for i, a in enumerate(answer)]


def digit_reward(completions, **kwargs):
    """The first digit of the completion / 9: varies within groups, so no group is dropped."""
    out = []
    for c in completions:
        digits = [ch for ch in c if ch.isdigit()]
        out.append(int(digits[0]) / 9 if digits else 0.0)
    return out


def weights_digest(named: dict[str, torch.Tensor] | torch.nn.Module) -> str:
    items = named.named_parameters() if isinstance(named, torch.nn.Module) else named.items()
    h = hashlib.sha256()
    for name, tensor in sorted(items, key=lambda kv: kv[0]):
        h.update(name.encode())
        h.update(tensor.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


class StandInClient:
    """Stands in for ``trl.generation.vllm_client.VLLMClient`` (same constructor and methods TRL's server mode calls).
    Completions depend only on (prompt, digest of the last weights pushed); ``delay`` seconds per request emulate
    generation time. Records every request (prompts, the weights digest) and checks that no weight update ever lands
    while a request is being generated."""

    instances: list[StandInClient] = []
    delay = 0.0

    def __init__(self, base_url=None, group_port=None, connection_timeout=None, **kwargs):
        self.tokenizer = None
        self.digest = "initial"
        self.weights: dict[str, torch.Tensor] = {}
        self.requests: list[dict] = []
        self.syncs = 0
        self._busy = threading.Lock()
        self.overlapping_syncs = 0
        StandInClient.instances.append(self)

    # What the stand-in engine has nothing to do for (no NCCL group, no prefix cache).
    def init_communicator(self, device=None):
        pass

    def close_communicator(self):
        pass

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def reset_prefix_cache(self):
        pass

    def update_named_params(self, metadata, iterator):
        if self._busy.locked():
            self.overlapping_syncs += 1
        self.weights = {name: tensor.detach().clone() for name, tensor in iterator}
        self.digest = weights_digest(self.weights)
        self.syncs += 1

    def generate(self, prompts, features=None, n=1, max_tokens=16, **params):
        with self._busy:
            if self.delay:
                time.sleep(self.delay)
            digits = list(range(10, 20))  # the demo tokenizer's digit ids are looked up below
            if self.tokenizer is not None:
                digits = self.tokenizer.convert_tokens_to_ids(list("0123456789"))
            completions, logprobs = [], []
            for prompt in prompts:
                seed = int(hashlib.sha256(f"{prompt}|{self.digest}".encode()).hexdigest()[:12], 16)
                generator = torch.Generator().manual_seed(seed)
                for _ in range(n):
                    length = int(torch.randint(1, max_tokens + 1, (1,), generator=generator))
                    picks = torch.randint(0, 10, (length,), generator=generator).tolist()
                    completions.append([digits[i] for i in picks])
                    logprobs.append([[-2.3] for _ in picks])
            self.requests.append({"prompts": [list(p) for p in prompts], "digest": self.digest, "n": n})
            return {"prompt_ids": [list(p) for p in prompts], "completion_ids": completions, "logprobs": logprobs}


@pytest.fixture
def engine(monkeypatch, tokenizer):
    """TRL's VLLMGeneration with the stand-in client (and vLLM reported installed)."""
    import trl.generation.vllm_generation as vllm_generation

    import trl_ext.reliability.checks

    StandInClient.instances.clear()
    StandInClient.delay = 0.0
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "VLLMClient", StandInClient)
    monkeypatch.setattr(trl_ext.reliability.checks, "vllm_installed", lambda: True)
    yield StandInClient


def server_args(preset, tmp_path, **overrides):
    settings = dict(use_vllm=True, vllm_mode="server", soft_overlong_punishment=False)
    if not preset.lower().startswith("dapo"):
        settings.pop("soft_overlong_punishment")
        settings["beta"] = 0.0  # no reference model to load (the tiny model has no path)
    settings.update(overrides)
    return tiny_args(preset, tmp_path, **settings)


def build(preset, tmp_path, model, tokenizer, dataset, reward=even_answer_reward, trainer_class=None, **overrides):
    from trl_ext import trainer_class_for

    args = server_args(preset, tmp_path, **overrides)
    cls = trainer_class or trainer_class_for(args)
    trainer = cls(model, [reward], args=args, train_dataset=dataset, processing_class=tokenizer)
    client = getattr(trainer.vllm_generation, "vllm_client", None) if args.use_vllm else None
    inner = getattr(client, "_client", client)
    if inner is not None:
        inner.tokenizer = tokenizer
    return trainer, inner


def fresh_model(tokenizer):
    """The conftest's tiny model, built from seed 0 (two runs start from the same weights)."""
    from trl_ext.demo import DemoModelConfig, build_model

    torch.manual_seed(0)
    config = DemoModelConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1
    )
    return build_model(tokenizer, config)


def history(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


# -- construction ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(use_vllm=False), "use_vllm=False the policy generates with transformers"),
        (dict(vllm_mode="colocate"), "colocate mode keeps the synchronous path"),
        (dict(vllm_importance_sampling_correction=False), "Set vllm_importance_sampling_correction=True"),
        (dict(max_staleness=0), "Set max_staleness >= 1"),
    ],
)
def test_construction_errors_name_the_fix(tmp_path, overrides, message):
    settings = dict(use_vllm=True, vllm_mode="server", async_generation=True)
    settings.update(overrides)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny_args("grpo", tmp_path, **settings)


def test_defaults_are_off_with_one_step_bound(tmp_path):
    args = tiny_args("dapo", tmp_path)
    assert args.async_generation is False and args.max_staleness == 1


def test_gspo_warns_that_sequence_ratios_object(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="trl_ext.grpo.async_rollout"):
        tiny_args("gspo", tmp_path, use_vllm=True, vllm_mode="server", async_generation=True)
    assert "sequence-level ratio (GSPO)" in caplog.text


def test_truncated_sampling_with_is_correction_warns(tiny_model, tokenizer, problems, tmp_path, engine, caplog):
    from trl_ext.grpo.async_checks import truncated_sampling, warn_truncated_importance_sampling

    args = server_args("grpo", tmp_path, top_p=0.9, top_k=20, min_p=0.05)
    assert truncated_sampling(args) == ["top_p=0.9", "top_k=20", "min_p=0.05"]
    with caplog.at_level(logging.WARNING, logger="trl_ext.grpo.async_rollout"):
        build("grpo", tmp_path, tiny_model, tokenizer, problems[0], top_p=0.9)
    assert "TRL issue #6789" in caplog.text and "top_p=0.9" in caplog.text
    assert not warn_truncated_importance_sampling(server_args("grpo", tmp_path))  # full distribution: silent
    off = server_args("grpo", tmp_path, top_p=0.9, vllm_importance_sampling_correction=False)
    assert not warn_truncated_importance_sampling(off)
    assert warn_truncated_importance_sampling(server_args("grpo", tmp_path, generation_kwargs={"top_k": 5}))


def test_trainer_level_checks(tiny_model, tokenizer, problems, tmp_path, engine):
    from datasets import IterableDataset

    stream = IterableDataset.from_generator(lambda: iter(problems[0]))
    with pytest.raises(ValueError, match="async_generation=True does not support a IterableDataset"):
        build("grpo", tmp_path, tiny_model, tokenizer, stream, async_generation=True, max_steps=1)
    # 3 groups of 4 per generation batch cannot be split over... one process always can: the rule is per process
    from trl_ext.grpo.async_checks import check_async_trainer

    trainer, _ = build("grpo", tmp_path, tiny_model, tokenizer, problems[0], async_generation=True)
    trainer.accelerator.state.num_processes = 3  # 2 groups per batch over 3 processes
    try:
        with pytest.raises(ValueError, match="does not split over 3 processes"):
            check_async_trainer(trainer)
    finally:
        trainer.accelerator.state.num_processes = 1


# -- TRL's hooks we wrap: fail loudly when their shape changes ------------------------------------------------------


def test_trl_server_mode_hooks_keep_their_shape(tiny_model, tokenizer, problems, tmp_path, engine):
    """The sampling parameters we submit ahead are exactly those TRL's VLLMGeneration passes to the client; TRL still
    gates its own weight sync on ``_last_loaded_step``; ``_tokenize_prompts`` returns (ids, images, fields)."""
    import inspect

    import trl

    from trl_ext.grpo.prefetching_client import engine_sampling_params

    trainer, client = build("grpo", tmp_path, tiny_model, tokenizer, problems[0])
    seen = {}
    original = client.generate

    def recording(prompts, features=None, **params):
        seen.update(params)
        return original(prompts, features=features, **params)

    client.generate = recording
    ids = trainer._tokenize_prompts([problems[0][0]["prompt"]] * 4)
    assert len(ids) == 3 and ids[1] is None
    trainer.vllm_generation.generate(prompts=ids[0], images=None, num_generations=4)
    assert seen == engine_sampling_params(trainer.vllm_generation, 4)
    assert trainer._last_loaded_step == -1
    source = inspect.getsource(trl.GRPOTrainer._generate_single_turn)
    assert "self._last_loaded_step" in source and "sync_weights" in source
    assert "_step" in inspect.getsource(trl.GRPOTrainer.training_step)


def test_prefetching_client_refuses_weight_updates_in_flight():
    """Weights reach the server only through ``sync``, never while a request is in flight; TRL's own per-step update
    is absorbed (its parameter iterator still consumed: the ZeRO-3 gathers are collectives)."""
    from trl_ext.grpo.prefetching_client import PrefetchingClient

    release = threading.Event()
    updates = []

    class Slow:
        def generate(self, prompts, **params):
            release.wait(5)
            return {"prompts": prompts}

        def update_named_params(self, metadata, params):
            updates.append(list(params))
            return "ok"

        def reset_prefix_cache(self):
            updates.append("reset")

    client = PrefetchingClient(Slow())
    client.submit([[1, 2]], {"n": 2})
    assert client.in_flight == 1 and not client.ready()
    with pytest.raises(RuntimeError, match="weights are synced only between rollouts"):
        client.sync(lambda: client.update_named_params([], iter([("w", 1)])))
    walked = []
    assert client.update_named_params([], (walked.append(i) or ("w", i) for i in range(3))) is None
    assert walked == [0, 1, 2] and updates == [] and client.absorbed_updates == 1  # TRL's own sync: absorbed
    release.set()
    with pytest.raises(RuntimeError, match="other sampling parameters"):
        client.generate(prompts=[[1, 2]], n=3)
    client.submit([[1, 2]], {"n": 2})
    assert client.generate(prompts=[[1, 2]], n=2) == {"prompts": [[1, 2]]}
    client.sync(lambda: (client.update_named_params([], iter([("w", 1)])), client.reset_prefix_cache()))
    assert updates == [[("w", 1)], "reset"] and client.direct_calls == 0
    client.close()


# -- switched off: exactly today's trainer --------------------------------------------------------------------------


def _train_and_record(trainer):
    trainer.train()
    weights = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    logs = [
        {k: v for k, v in h.items() if "time" not in k and "runtime" not in k and "per_second" not in k}
        for h in trainer.state.log_history
    ]
    return weights, logs


def test_switched_off_is_bit_for_bit_trls_trainer(tokenizer, problems, tmp_path, engine):
    """``async_generation=False`` (the default) without dynamic sampling: ``trl.GRPOTrainer``'s step through TRL's
    vLLM server path, bit for bit (weights and logs); no ``async/*`` metric."""
    import trl

    runs = {}
    for name, cls in {"ours": None, "trl": trl.GRPOTrainer}.items():
        trainer, _ = build(
            "dapo",
            tmp_path / name,
            fresh_model(tokenizer),
            tokenizer,
            problems[0],
            trainer_class=cls,
            dynamic_sampling=False,
            max_steps=3,
            async_generation=False,
        )
        runs[name] = _train_and_record(trainer)
    for key, value in runs["ours"][0].items():
        assert torch.equal(value, runs["trl"][0][key]), key
    ours = [{k: v for k, v in h.items() if k in t} for h, t in zip(runs["ours"][1], runs["trl"][1], strict=True)]
    assert ours == runs["trl"][1]
    assert not any(k.startswith("async/") for h in runs["ours"][1] for k in h)


# -- switched on ----------------------------------------------------------------------------------------------------


class StepWeights:
    """A callback recording the weights' digest at the start of each optimizer step (what generation used)."""

    def __init__(self):
        self.digests = []

    def __call__(self, trainer):
        from transformers import TrainerCallback

        outer = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args, state, control, model=None, **kwargs):
                outer.digests.append(weights_digest(trainer.model))

        return Callback()


def test_overlapped_rollout_is_one_step_stale(tiny_model, tokenizer, problems, tmp_path, engine):
    """Batch k+1 is generated by weights that started batch k (checked on the engine's own record, not on our
    metric); weights are pushed once per step and never while a request is being generated; staleness is logged."""
    trainer, client = build(
        "grpo", tmp_path, tiny_model, tokenizer, problems[0], reward=digit_reward, async_generation=True, max_steps=4
    )
    steps = StepWeights()
    trainer.add_callback(steps(trainer))
    engine.delay = 0.05
    trainer.train()
    assert client.overlapping_syncs == 0
    assert client.syncs == 4  # one per generation batch (steps_per_generation = 1)
    # 4 batches trained, each one round; no unused rollout is started after the last
    assert len(client.requests) == 4
    digests = [r["digest"] for r in client.requests]
    # batch 0: weights of step 0 (synchronous start); batch k >= 1: weights at the start of step k - 1
    assert digests[0] == steps.digests[0] and digests[1] == steps.digests[0]
    assert digests[2:] == steps.digests[1:3]
    assert len(set(steps.digests)) == 4  # the weights did move every step
    assert history(trainer, "async/staleness") == [0.0, 1.0, 1.0, 1.0]
    assert all("sampling/importance_sampling_ratio/mean" in h for h in trainer.state.log_history[:-1])


def overlapped_refills(tmp_path, model, tokenizer, dataset, **overrides):
    """DAPO with ``async_generation`` for 4 steps, where ``even_answer_reward`` drops about half the groups."""
    settings = dict(async_generation=True, max_steps=4, dynamic_sampling_max_generation_batches=4)
    return build("dapo", tmp_path, model, tokenizer, dataset, **settings, **overrides)


def test_prefetched_first_round_is_sized_from_the_informative_rate(tiny_model, tokenizer, problems, tmp_path, engine):
    """With dynamic sampling, the round generated while the previous batch trains is the loop's first round, sized
    from the running informative rate (more groups than the batch once groups are dropped), one batch stale."""
    trainer, client = overlapped_refills(tmp_path, tiny_model, tokenizer, problems[0])
    trainer.train()
    rounds = history(trainer, "dynamic_sampling/rounds")
    generated = history(trainer, "dynamic_sampling/generated_groups")
    assert len(rounds) == 4 and generated[0] >= 2
    assert max(generated[1:]) > 2  # a prefetched round larger than the batch once the rate is below 1
    assert history(trainer, "async/staleness") == [0.0, 1.0, 1.0, 1.0]
    assert client.overlapping_syncs == 0
    assert all(h["dynamic_sampling/filler_groups"] == 0 for h in trainer.state.log_history if "reward" in h)


def test_refill_ahead_covers_the_first_rounds_likely_shortfall():
    """Hand-computed: shortfall = 16 - 0.35 x 32 + sqrt(32 x 0.35 x 0.65) = 7.5 -> 8 informative groups ->
    ceil(8 / 0.35 x 1.05) = 24 groups; none when the first round is surely enough (rate 1); at rate 0.7 after 24
    groups: 16 - 16.8 + 2.24 -> 2 -> ceil(2 / 0.7 x 1.05) = 3; the budget left bounds it (40 - 32 = 8)."""
    from trl_ext.grpo.dynamic_sampling.sizing import refill_ahead_groups

    assert refill_ahead_groups(0.35, 32, 16, 1.05, 1, cap=32, budget=64) == 24
    assert refill_ahead_groups(1.0, 16, 16, 1.05, 1, cap=32, budget=64) == 0
    assert refill_ahead_groups(0.7, 24, 16, 1.05, 1, cap=32, budget=64) == 3
    assert refill_ahead_groups(0.35, 32, 16, 1.05, 2, cap=32, budget=40) == 8


def test_ahead_rounds_go_as_trls_batch_then_half_batches():
    """Hand-computed: at rate 0.35 the first round is ceil(16 / 0.35 x 1.05) = 48 groups, capped at 32, and its refill
    24 (above): 56 groups, sent as 16 and then five half batches of 8. At rate 0.7 on two processes: 24 groups and a
    refill of ceil(16 - 16.8 + 2.24 = 1.44 -> 2 / 0.7 x 1.05) = 3, rounded up to 4: 28 = 16 + 8 + 4. At rate 1 the
    margin's extra group goes as a round of its own, dropped when the batch fills."""
    from trl_ext.grpo.dynamic_sampling.sizing import ahead_round_sizes

    assert ahead_round_sizes(0.35, 16, 1.05, 1, cap=32, budget=64) == [16, 8, 8, 8, 8, 8]
    assert ahead_round_sizes(0.7, 16, 1.05, 2, cap=32, budget=64) == [16, 8, 4]
    assert ahead_round_sizes(1.0, 16, 1.05, 1, cap=32, budget=64) == [16, 1]
    assert ahead_round_sizes(0.35, 16, 1.05, 1, cap=32, budget=16) == [16]  # no budget beyond TRL's batch


def test_refill_rounds_are_submitted_ahead(tiny_model, tokenizer, problems, tmp_path, engine):
    """Once groups are dropped, a refill round is submitted behind the first one while the previous batch trains:
    the step takes it without asking the engine again, or drops it unused. Every request the engine answered was
    trained on or counted as dropped, and none was answered while weights were pushed."""
    trainer, client = overlapped_refills(tmp_path, tiny_model, tokenizer, problems[0])
    trainer.train()
    prefetching = trainer.vllm_generation.vllm_client
    rounds = history(trainer, "dynamic_sampling/rounds")
    unused = history(trainer, "async/unused_rounds")
    assert len(rounds) == len(unused) == 4
    refills_ahead = sum(rounds) - len(rounds) - prefetching.direct_calls  # refills TRL got from a prefetched answer
    assert refills_ahead + sum(unused) >= 1
    assert len(client.requests) == sum(rounds) + sum(unused)
    assert client.overlapping_syncs == 0


# -- exact resume with a rollout in flight --------------------------------------------------------------------------


def _comparable(logs):
    skip = ("time", "runtime", "per_second")
    return [{k: v for k, v in h.items() if not any(s in k for s in skip)} for h in logs if "loss" in h]


@pytest.mark.parametrize("dynamic_sampling", [False])
def test_exact_resume_with_a_rollout_in_flight(tokenizer, problems, tmp_path, engine, dynamic_sampling):
    """A checkpoint at step 2 holds the rollout of batch 3 (generated with step 2's starting weights, which the
    checkpoint does not hold): the resumed run trains it and ends with the uninterrupted run's weights and logs."""
    from trl_ext.grpo.async_rollout import ASYNC_ROLLOUT_FILE, ASYNC_STATE_FILE

    settings = dict(
        async_generation=True, dynamic_sampling=dynamic_sampling, max_steps=4, save_strategy="steps", save_steps=2
    )
    full, _ = build("dapo", tmp_path / "full", fresh_model(tokenizer), tokenizer, problems[0], **settings)
    full.train()
    checkpoint = tmp_path / "full" / "out" / "checkpoint-2"
    assert (checkpoint / ASYNC_ROLLOUT_FILE).exists()  # the answer of the round in flight
    state = json.loads((checkpoint / ASYNC_STATE_FILE).read_text())
    assert state["prefetched"] is not None

    resumed, client = build("dapo", tmp_path / "full", fresh_model(tokenizer), tokenizer, problems[0], **settings)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    for (name, a), b in zip(full.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), name
    assert _comparable(resumed.state.log_history)[-2:] == _comparable(full.state.log_history)[-2:]
    # the resumed run generated only the batch after the saved one (batch 3), with the resumed weights
    assert len(client.requests) >= 1 and client.syncs >= 1


# -- two processes --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_under_torchrun(tmp_path):
    """``torchrun --nproc_per_node 2`` (gloo, CPU): overlapped rollouts with dynamic-sampling refills across two
    processes; the script asserts the world size, equal weights on both ranks and the staleness."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ASYNC_TEST_OUT": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join([REPO, HERE, env.get("PYTHONPATH", "")])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = os.path.abspath(__file__)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}", script]
    result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["staleness_max"] == [0.0, 1.0, 1.0, 1.0]
    assert min(summary["kept"]) < 1.0  # groups were dropped: the loop's first round was prefetched larger
    assert summary["weights_equal_across_ranks"]
    assert summary["overlapping_syncs"] == 0


def _torchrun_main() -> None:
    import torch.distributed as dist
    import trl.generation.vllm_generation as vllm_generation

    import trl_ext.reliability.checks
    from trl_ext.demo import DemoTaskConfig, build_tokenizer, make_problems

    vllm_generation.is_vllm_available = lambda *a, **k: True
    vllm_generation.VLLMClient = StandInClient
    trl_ext.reliability.checks.vllm_installed = lambda: True
    out = os.environ["ASYNC_TEST_OUT"]
    tokenizer = build_tokenizer()
    problems = make_problems(DemoTaskConfig(max_operand=9, num_train=60, num_eval=20))
    model = fresh_model(tokenizer)

    class Path(str):
        def __truediv__(self, other):
            return os.path.join(self, other)

    trainer, client = build(
        "dapo",
        Path(out),
        model,
        tokenizer,
        problems[0],
        async_generation=True,
        max_steps=4,
        per_device_train_batch_size=4,
        ddp_backend="gloo",
    )
    world = trainer.accelerator.num_processes
    assert world == 2 and dist.get_world_size() == 2
    trainer.train()
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    gathered = [torch.zeros_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    if trainer.accelerator.is_main_process:
        summary = {
            "world_size": world,
            "staleness_max": history(trainer, "async/staleness"),
            "rounds": history(trainer, "dynamic_sampling/rounds"),
            "kept": history(trainer, "dynamic_sampling/kept_group_frac"),
            "weights_equal_across_ranks": all(torch.equal(gathered[0], g) for g in gathered[1:]),
            "overlapping_syncs": client.overlapping_syncs,
        }
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    from helpers import torchrun_script  # run as a script: tests/ is on sys.path

    with torchrun_script():
        _torchrun_main()


# -- the health monitor reads TRL's sampling/* metrics --------------------------------------------------------------


def test_health_monitor_alerts_on_engine_trainer_mismatch():
    """``sampling/importance_sampling_ratio/*`` and ``sampling/sampling_logp_difference/*`` (logged by TRL under vLLM's
    importance-sampling correction): a sustained gap warns once, naming truncated sampling and staleness as causes;
    a small gap, or a run without those metrics, stays quiet."""
    from types import SimpleNamespace

    from trl_ext.diagnostics.health import HealthMonitor

    def log(ratio, gap, **extra):
        return {
            "sampling/importance_sampling_ratio/mean": ratio,
            "sampling/importance_sampling_ratio/min": ratio / 2,
            "sampling/importance_sampling_ratio/max": ratio * 2,
            "sampling/sampling_logp_difference/mean": gap,
            **extra,
        }

    monitor = HealthMonitor()
    args = SimpleNamespace(top_p=0.9, top_k=0, min_p=None, learning_rate=1e-6)
    stream = [
        log(1.0, 0.01),
        log(1.02, 0.03),
        log(0.8, 0.02),
        log(0.8, 0.02),
        log(1.0, 0.3, **{"async/staleness": 1.0}),
    ]
    flags = [monitor.check(logs, step=i + 1, args=args)["health/sampling_mismatch"] for i, logs in enumerate(stream)]
    assert flags == [0.0, 0.0, 0.0, 1.0, 1.0]  # patience 2: the second log off in a row
    (event,) = monitor.events
    assert event.condition == "sampling_mismatch" and event.step == 4
    assert "mean importance ratio 0.800 (min 0.4, max 1.6)" in event.message
    assert "top_p=0.9" in event.message and "TRL issue #6789" in event.message
    quiet = HealthMonitor()
    assert "health/sampling_mismatch" not in quiet.check({"loss": 0.1}, step=1)
    staleness = HealthMonitor()
    for i in range(2):
        staleness.check(log(1.0, 0.3, **{"async/staleness": 1.0}), step=i + 1, args=SimpleNamespace())
    assert "1 generation batch(es) old (async_generation)" in staleness.events[0].message
