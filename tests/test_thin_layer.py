"""How much of TRL the GRPO-family trainers depend on, counted from the code: at most 8 TRL / transformers methods
overridden and at most 10 TRL-private members touched anywhere under ``trl_ext/`` (names that TRL's ``GRPOTrainer``
or transformers' ``Trainer`` define as ``self._x`` or ``def _x``). Each private member still used has a test in
``tests/test_trl_contract.py`` that fails loudly when its shape changes."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import transformers
import trl

import trl_ext
from trl_ext.grpo import async_rollout, trainers

PACKAGE = Path(trl_ext.__file__).parent

GRPO_FAMILY = [
    trainers.GRPOTrainer,
    trainers.DAPOTrainer,
    trainers.GSPOTrainer,
    trainers.GSPOTokenTrainer,
    async_rollout.AsyncGRPOTrainer,
    async_rollout.AsyncDAPOTrainer,
    async_rollout.AsyncGSPOTrainer,
    async_rollout.AsyncGSPOTokenTrainer,
]

#: The TRL-private members trl_ext relies on, each guarded in tests/test_trl_contract.py.
EXPECTED_PRIVATE = {
    "_buffered_inputs",
    "_calculate_rewards",
    "_generate_and_score_completions",
    "_get_output_dir",
    "_get_per_token_logps_and_entropies",
    "_metrics",
    "_save_checkpoint",
    "_step",
    "_tokenize_prompts",
    "_total_train_tokens",
}


def trl_private_names() -> set[str]:
    """Names TRL's GRPOTrainer or transformers' Trainer define as ``self._x`` or ``def _x``."""
    source = inspect.getsource(trl.GRPOTrainer) + inspect.getsource(transformers.Trainer)
    names = set(re.findall(r"self\.(_[A-Za-z]\w*)", source)) | set(re.findall(r"def (_[A-Za-z]\w*)", source))
    return {name for name in names if not name.startswith("__")}


def names_used_in_package() -> dict[str, set[str]]:
    """Every attribute, method or ``getattr`` string name used in trl_ext's code (docstrings and comments excluded),
    with the files that use it."""
    used: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Attribute):
                names.append(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.append(node.name)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in {"getattr", "hasattr", "setattr"}:
                if (
                    len(node.args) > 1
                    and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str)
                ):
                    names.append(node.args[1].value)
            for name in names:
                used.setdefault(name, set()).add(str(path.relative_to(PACKAGE)))
    return used


def overridden_trl_methods(cls: type) -> set[str]:
    """Methods of TRL's GRPOTrainer (or its bases) that a class defined in trl_ext redefines in ``cls``'s MRO
    (``object``'s own, such as ``__new__``, are not TRL's)."""
    trl_methods = {
        name
        for name in dir(trl.GRPOTrainer)
        if callable(getattr(trl.GRPOTrainer, name, None))
        and getattr(trl.GRPOTrainer, name) is not getattr(object, name, None)
    }
    ours = [klass for klass in cls.__mro__ if klass.__module__.startswith("trl_ext.")]
    return {name for klass in ours for name in vars(klass) if name in trl_methods and name != "__init_subclass__"}


def test_at_most_8_trl_methods_overridden_per_trainer():
    for cls in GRPO_FAMILY:
        overridden = overridden_trl_methods(cls)
        assert len(overridden) <= 8, f"{cls.__name__} overrides {len(overridden)} TRL methods: {sorted(overridden)}"


def test_at_most_10_trl_private_members_touched():
    touched = trl_private_names() & set(names_used_in_package())
    assert len(touched) <= 10, f"{len(touched)} TRL-private members used under trl_ext/: {sorted(touched)}"
    assert touched == EXPECTED_PRIVATE, (
        f"new: {sorted(touched - EXPECTED_PRIVATE)}, gone: {sorted(EXPECTED_PRIVATE - touched)} (update "
        "EXPECTED_PRIVATE and tests/test_trl_contract.py)"
    )


def test_no_method_of_torch_trl_or_transformers_is_replaced_at_run_time():
    """No assignment of a function onto an object or class (``obj.step = ...``, ``types.MethodType``)."""
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text()
        assert "types.MethodType" not in source, path
        assert not re.search(r"\.(step|forward|generate|load_weights)\s*=\s*", source), path


def test_the_counter_sees_a_private_name():
    """The counter itself works: an attribute access to a TRL-private name is found."""
    assert "_metrics" in names_used_in_package()
    assert {"_metrics", "_generate_and_score_completions"} <= trl_private_names()


# -- vLLM (trl_ext/generation): private members of TRL's VLLMGeneration, vLLM and torch, and module globals set -------

#: Underscored members of objects trl_ext does not define, touched in trl_ext/generation/, each with its guard:
#: TRL's weight stream and sleep flag (tests/test_vllm_sync.py: the sync-shape and wake-up tests), torch's own
#: set_num_threads behind the public name vLLM's CPU worker replaces (the restore test).
EXPECTED_GENERATION_PRIVATE = {"_iter_named_params", "_llm_weights_sleeping", "_C"}
#: ``module.attribute = ...`` under trl_ext/generation/: torch's set_num_threads put back after vLLM replaced it
#: (vllm_sync.restore_set_num_threads) and TRL's client class inside ``file_weight_sync()`` (vllm_server).
EXPECTED_MODULE_GLOBALS = {"torch.set_num_threads", "generation.VLLMClient"}


def _own_names() -> set[str]:
    """Names trl_ext defines itself: functions, classes, and attributes it assigns (``self._x = ...``)."""
    own: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr.startswith("_"):
                if not (isinstance(node.value, ast.Name) and node.value.id in {"adopted", "generation"}):
                    own.add(node.attr)
    return own


def test_generation_touches_only_the_counted_private_members_of_trl_vllm_and_torch():
    touched = set()
    for path in (PACKAGE / "generation").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                touched.add(node.attr)
    touched -= _own_names() - EXPECTED_GENERATION_PRIVATE
    assert touched == EXPECTED_GENERATION_PRIVATE, (
        f"new: {sorted(touched - EXPECTED_GENERATION_PRIVATE)}, gone: {sorted(EXPECTED_GENERATION_PRIVATE - touched)}"
    )


def test_generation_sets_only_the_counted_module_globals():
    found = set()
    for path in (PACKAGE / "generation").glob("*.py"):
        tree = ast.parse(path.read_text())
        modules = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                   if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names}  # fmt: skip
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if target.value.id in modules:
                        found.add(f"{target.value.id}.{target.attr}")
    assert found == EXPECTED_MODULE_GLOBALS, f"new: {sorted(found - EXPECTED_MODULE_GLOBALS)}"
