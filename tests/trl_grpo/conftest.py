"""The harness that runs TRL's own GRPO test file (``test_grpo_trainer.py`` here, vendored unchanged) twice: with
``trl.GRPOTrainer`` and with ``trl_ext.DAPOTrainer`` + dynamic sampling. One harness for both kinds; every test id
ends in ``[trl.GRPOTrainer]`` or ``[DAPOTrainer+DS]``.

Per test, the autouse ``kind`` fixture:

- swaps the test module's ``GRPOConfig`` / ``GRPOTrainer`` for the kind's pair: TRL's, or ``DAPOTrainer`` with
  ``DAPOConfig(**the same fields, dynamic_sampling=True, soft_overlong_punishment=False, num_minibatches=1)``
  (``tests/test_trl_suite.py``'s convention: no extra reward function, so TRL's reward-name assertions hold; one
  optimizer step per generation batch, as TRL's default; ``num_generations`` TRL's default 8 where a test leaves it
  unset, DAPOConfig's own being 16). A trainer built without ``args`` gets the same treatment (TRL's default
  ``GRPOConfig``, or ``DAPOTrainer``'s default ``DAPOConfig`` with those fields);
- forces ``use_cpu=True, bf16=False`` on every config (no GPU here; TRL's bf16 default needs one);
- swaps ``load_dataset`` for the ``trl-internal-testing/zen*`` datasets rebuilt in code (``trl_suite_models``), with
  ``ZEN_ROWS`` train rows (TRL's 3 default epochs then stay 3 steps; ``ZEN_ROWS_FOR`` names the tests that need more);
- runs the test from a folder holding ``trl-internal-testing/<name>`` stand-ins (``trl_suite_models.build``: random
  weights, tokenizers built in code), so that TRL's ``from_pretrained("trl-internal-testing/...")`` finds them as local
  folders. The stand-ins the test names are built before it runs (once per session, shared by xdist workers). The Qwen
  text models keep Qwen's 152k vocabulary (and ids) only for the tests that hard-code Qwen token ids (their fake
  ``generate``); the others get the same tokens and templates in a ~2k vocabulary (``SMALL_VOCAB_BUILDERS``), which
  makes a CPU training step several times cheaper.

Nothing downloads. What this machine cannot provide is skipped for both kinds, with the reason: TRL's own markers
(GPU, vLLM, liger-kernel, bitsandbytes), a model with no stand-in (the test stops at loading it; see
``pytest_runtest_call``), a stand-in that cannot be built here (Qwen2-VL's processor needs torchvision). By test name,
for both kinds alike: ``OPT_IN`` (the slowest cases, run with ``TRL_EXT_TRL_SUITE=1``) and ``TRL_RELEASE_FAILS``
(tests that fail with ``trl.GRPOTrainer`` itself on a supported release: expected failures there).

The vendored file is TRL's newest test file at the commit above, for both supported TRL releases (1.12 and 1.16).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import re
from pathlib import Path

import pytest
import transformers
import trl
from datasets import DatasetDict, IterableDatasetDict
from filelock import FileLock
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from transformers.utils import is_torchvision_available
from trl_suite_models import (
    BUILDERS,
    build,
    zen_conversational_prompt_only,
    zen_image,
    zen_multi_image,
    zen_standard_prompt_only,
)

from trl_ext import DAPOConfig, DAPOTrainer

KINDS = ["trl.GRPOTrainer", "DAPOTrainer+DS"]
DS_FIELDS = dict(dynamic_sampling=True, soft_overlong_punishment=False, num_minibatches=1)
CPU = dict(use_cpu=True, bf16=False, disable_tqdm=True)
TRL_NUM_GENERATIONS = trl.GRPOConfig.__dataclass_fields__["num_generations"].default
ZEN_ROWS = 1  # train rows of each zen dataset (TRL's: 17)
ZEN_TEST_ROWS = 1  # test rows (TRL's: 2)
#: Tests that need more train rows than ZEN_ROWS, for both kinds.
ZEN_ROWS_FOR = {
    "test_train_loss_types": 2,  # gradient_accumulation_steps=2: a generation batch of 2 prompts
    "test_train_with_adaptive_entropy_gradient_accumulation": 2,  # the same
    "test_prepare_input_called_with_correct_data": 17,  # asserts TRL's first 12 prompts and 48 training steps
    "test_train_vlm_and_importance_sampling": 2,  # steps_per_generation=2: a generation batch of 2 prompts
}
#: The slowest cases, opt-in (``TRL_EXT_TRL_SUITE=1``) for both kinds: each trains a Qwen stand-in with Qwen's 152k
#: vocabulary (its fake ``generate`` hard-codes Qwen ids) over multi-turn completions, 20 s to 6 min a case; or starts
#: dataloader worker processes (1 min). Together, with -n 2 on 2 shared cores: 9.5-11.5 minutes on trl 1.16 (its
#: chunked log-prob backward over 152k ids: test_train_with_multiple_environments alone 3-6 min), 3.5 on trl 1.12;
#: the rest of the file takes about 1 minute.
OPT_IN = {
    "test_train_with_tools": "152k-vocabulary multi-turn training",
    "test_train_with_multiple_environments": "152k-vocabulary multi-turn training, 24 steps",
    "test_train_with_environment_factory": "152k-vocabulary multi-turn training",
    "test_train_with_environment_owned_reward": "152k-vocabulary multi-turn training",
    "test_train_with_malformed_tool_calls": "152k-vocabulary multi-turn training",
    "test_train_multiple_dataloader_workers": "starts dataloader worker processes",
}
#: Tests of the TRL snapshot that fail with trl.GRPOTrainer itself on a supported release (the snapshot is newer than
#: the release): expected failures there, for both kinds (not strict). Test name: (releases, reason).
TRL_RELEASE_FAILS = {
    "test_generate_prefers_rollout_func": (
        ">=1.13",
        "the snapshot's bare trainer has no eos_token_ids, which trl 1.16's _generate reads",
    ),
    "test_generate_rollout_func_syncs_vllm_weights_when_needed": (
        ">=1.13",
        "the snapshot's bare trainer has no eos_token_ids, which trl 1.16's _generate reads",
    ),
    "test_entropy_bonus_flows_gradients": (
        ">=1.13",
        "trl 1.16's entropies carry grad with the entropy bonus off (the snapshot detaches them)",
    ),
    "test_liger_kernel_with_peft_non_lm_head_target_allowed": (
        ">=1.13",
        "trl 1.16 raises no ImportError at construction when liger-kernel is missing",
    ),
    "test_liger_kernel_with_peft_modules_to_save_lm_head_allowed": (
        ">=1.13",
        "trl 1.16 raises no ImportError at construction when liger-kernel is missing",
    ),
    "test_liger_kernel_with_peft_prompt_learning_raises": (
        ">=1.13",
        "trl 1.16 has no prompt-learning guard for Liger",
    ),
}
#: Stand-ins trl_suite_models builds only with torchvision installed (the reason, for the skip).
NEEDS_TORCHVISION = {
    f"trl-internal-testing/tiny-{name}": "its processor holds a video processor, which transformers builds only with "
    "torchvision"
    for name in ("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration")
}
MODEL_ID = re.compile(r"trl-internal-testing/tiny-[\w.-]+")
QWEN_SPECIAL_ID = re.compile(r"\b1516[4-9]\d\b")  # <|endoftext|> 151643, <|im_end|> 151645, <tool_call> 151657


def make_config(kind: str):
    """The kind's stand-in for ``GRPOConfig(...)``: a ``trl.GRPOConfig`` or a ``DAPOConfig`` with dynamic sampling."""

    def config(*args, **kwargs):
        kwargs.update(CPU)
        if kind == "trl.GRPOTrainer":
            return trl.GRPOConfig(*args, **kwargs)
        kwargs.setdefault("num_generations", TRL_NUM_GENERATIONS)
        return DAPOConfig(*args, **{**kwargs, **DS_FIELDS})

    return config


# ---------------------------------------------------------------------------------------------------------------------
# Datasets


def _zen(path: str, name: str | None, rows: int, offset: int = 0):
    """``rows`` rows of a zen dataset from ``offset`` on (the test split: the prompts after the train rows)."""
    if path == "trl-internal-testing/zen" and name == "standard_prompt_only":
        return zen_standard_prompt_only(offset + rows).select(range(offset, offset + rows))
    if path == "trl-internal-testing/zen" and name == "conversational_prompt_only":
        return zen_conversational_prompt_only(offset + rows).select(range(offset, offset + rows))
    if path == "trl-internal-testing/zen-image" and name == "conversational_prompt_only" and not offset:
        return zen_image(rows)
    if path == "trl-internal-testing/zen-multi-image" and name == "conversational_prompt_only" and not offset:
        return zen_multi_image(rows)
    pytest.skip(f"no offline stand-in for dataset {path!r}, config {name!r}")


def load_dataset(
    path: str,
    name: str | None = None,
    split: str | None = None,
    streaming: bool = False,
    *,
    rows: int = ZEN_ROWS,
    **kwargs,
):
    """``datasets.load_dataset`` for TRL's zen datasets, rebuilt in code (train: ``rows``; test: the next
    ``ZEN_TEST_ROWS``)."""
    splits = {"train": lambda: _zen(path, name, rows), "test": lambda: _zen(path, name, ZEN_TEST_ROWS, rows)}
    if split is not None:
        dataset = splits[split]()
        return dataset.to_iterable_dataset() if streaming else dataset
    if streaming:
        return IterableDatasetDict({k: v().to_iterable_dataset() for k, v in splits.items()})
    return DatasetDict({k: v() for k, v in splits.items()})


# ---------------------------------------------------------------------------------------------------------------------
# Model stand-ins


@pytest.fixture(scope="session")
def standin_root(tmp_path_factory) -> Path:
    """One folder per session, shared by the xdist workers (their basetemps' parent), keyed on the stand-ins' source
    and the transformers release that saves them."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    source = Path(inspect.getfile(build)).read_bytes() + transformers.__version__.encode()
    return base / f"trl-standins-{hashlib.sha256(source).hexdigest()[:12]}"


def _body(item) -> str:
    """The test function's source without its decorators (a parametrize list names models the case may not use)."""
    source = inspect.getsource(item.function)
    return source[re.search(r"^\s*(async )?def ", source, re.MULTILINE).start() :]


def _param_ids(item) -> set[str]:
    """The ``trl-internal-testing`` models among the test's parameters."""
    callspec = getattr(item, "callspec", None)
    values = callspec.params.values() if callspec else ()
    return {m for value in values if isinstance(value, str) for m in MODEL_ID.findall(value)}


def _model_ids(item) -> set[str]:
    """The ``trl-internal-testing`` models a test names: in its body and its parameters."""
    return set(MODEL_ID.findall(_body(item))) | _param_ids(item)


def _hard_codes_qwen_ids(item) -> bool:
    """Whether the test writes Qwen token ids itself (a fake ``generate``: ``<|im_end|>`` is 151645)."""
    return QWEN_SPECIAL_ID.search(_body(item)) is not None


def _buildable(model_id: str) -> bool:
    return model_id in BUILDERS and (model_id not in NEEDS_TORCHVISION or is_torchvision_available())


def _build(model_id: str, root: Path, small_vocab: bool) -> None:
    folder = root / "trl-internal-testing"
    with FileLock(str(folder / f"{model_id.split('/')[-1]}.lock")):
        build(model_id, folder, small_vocab=small_vocab)


@pytest.fixture(autouse=True, params=KINDS)
def kind(request, monkeypatch, standin_root):
    """The trainer kind this run of the test uses (see the module docstring)."""
    kind = request.param
    module = request.module
    monkeypatch.setattr(module, "GRPOConfig", make_config(kind))
    monkeypatch.setattr(module, "GRPOTrainer", trl.GRPOTrainer if kind == "trl.GRPOTrainer" else DAPOTrainer)
    rows = ZEN_ROWS_FOR.get(request.node.originalname, ZEN_ROWS)
    monkeypatch.setattr(module, "load_dataset", functools.partial(load_dataset, rows=rows))
    # a trainer built without args: TRL's GRPOTrainer builds its module's GRPOConfig, DAPOTrainer its _default_config
    monkeypatch.setattr(trl.trainer.grpo_trainer, "GRPOConfig", make_config("trl.GRPOTrainer"))
    monkeypatch.setattr(DAPOTrainer, "_default_config", staticmethod(make_config("DAPOTrainer+DS")))
    # Qwen's 152k vocabulary only where the test hard-codes Qwen ids: elsewhere its output layer is most of a CPU step
    small_vocab = not _hard_codes_qwen_ids(request.node)
    root = standin_root / ("small-vocab" if small_vocab else "qwen-vocab")
    (root / "trl-internal-testing").mkdir(parents=True, exist_ok=True)
    for model_id in sorted(_model_ids(request.node)):
        if _buildable(model_id):
            _build(model_id, root, small_vocab)
    monkeypatch.chdir(root)
    return kind


def _hub_miss(error: BaseException | None) -> bool:
    """Whether ``error`` (or what caused it) is a Hub look-up that found nothing local (offline: no download)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if type(error).__name__ == "LocalEntryNotFoundError" or (
            isinstance(error, OSError) and MODEL_ID.search(str(error))
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that stops at loading a model with no stand-in here is skipped (for both kinds), not failed."""
    try:
        return (yield)
    except Exception as error:
        # the model the case is parametrized with, else those its body names (a body may name others in a condition)
        missing = sorted(m for m in _param_ids(item) if not _buildable(m))
        missing = missing or sorted(m for m in _model_ids(item) if not _buildable(m))
        if not missing or not _hub_miss(error):
            raise
        why = ", ".join(f"{m} ({NEEDS_TORCHVISION[m]})" if m in NEEDS_TORCHVISION else m for m in missing)
        pytest.skip(f"no offline stand-in built here for {why}")


def pytest_collection_modifyitems(config, items):
    """OPT_IN and TRL_RELEASE_FAILS, by test name: the same marker on both kinds' cases."""
    opted_in = os.environ.get("TRL_EXT_TRL_SUITE") == "1"
    for item in items:
        if item.nodeid.split("::")[0].endswith("trl_grpo/test_grpo_trainer.py"):
            name = getattr(item, "originalname", item.name)
            if name in OPT_IN and not opted_in:
                item.add_marker(pytest.mark.skip(reason=f"opt-in (TRL_EXT_TRL_SUITE=1): {OPT_IN[name]}"))
            releases, why = TRL_RELEASE_FAILS.get(name, ("", ""))
            if releases and Version(trl.__version__) in SpecifierSet(releases):
                reason = f"fails with trl.GRPOTrainer {trl.__version__} too: {why}"
                item.add_marker(pytest.mark.xfail(reason=reason, strict=False))
