"""The supported TRL range (1.12 to 1.16): what the package declares, what it imports, the TRL internals it wraps,
and what each end of the range gives (PPO on 1.12 only, with a clear message elsewhere)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest
import torch
import trl
from packaging.requirements import Requirement
from packaging.version import Version

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRL = Version(trl.__version__)
HAS_PPO = TRL < Version("1.13")


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _trl_requirement(lines: list[str]) -> Requirement:
    return next(r for r in map(Requirement, lines) if r.name == "trl")


def test_declared_range_covers_both_tested_ends_and_this_trl():
    project = _pyproject()
    core = _trl_requirement(project["dependencies"]).specifier
    assert "1.12.0" in core and "1.16.0" in core and "1.17.0" not in core
    assert trl.__version__ in core
    ppo = _trl_requirement(project["optional-dependencies"]["ppo"]).specifier
    assert list(ppo.filter(["1.12.0", "1.13.0", "1.16.0"])) == ["1.12.0"]
    # the vllm extra must not pin a TRL the core range (or the ppo extra) conflicts with
    vllm = _trl_requirement(project["optional-dependencies"]["vllm"])
    assert "vllm" in vllm.extras
    assert all(v in vllm.specifier for v in ("1.12.0", "1.16.0"))


def test_import_loads_nothing_from_trl_experimental():
    """TRL removes experimental modules without notice (trl.experimental.gspo_token went in 1.14): importing trl_ext
    must load none beyond what TRL's own trainers load."""
    code = (
        "import sys, trl\n"
        "from trl import DPOTrainer, GRPOTrainer, SFTTrainer\n"
        "before = {m for m in sys.modules if m.startswith('trl.experimental')}\n"
        "import trl_ext, trl_ext.grpo.trainers, trl_ext.dpo, trl_ext.grpo.presets, trl_ext.ppo, trl_ext.cli, trl_ext.recipe.grpo\n"
        "print(sorted({m for m in sys.modules if m.startswith('trl.experimental')} - before))\n"
    )
    env = {**os.environ, "PYTHONPATH": REPO}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


# -- the TRL internals GSPO-token wraps ------------------------------------------------------------------------


def test_trl_compute_loss_reads_old_logps_after_the_policy_forward():
    """GSPO-token (trl_ext.grpo.gspo_token) replaces the batch's old log-probabilities inside TRL's policy forward
    (``_get_per_token_logps_and_entropies``), which only works if ``_compute_loss`` reads them afterwards and forms
    ``log_ratio = per_token_logps - old_per_token_logps`` at the token level. Fails loudly if TRL changes that."""
    source = inspect.getsource(trl.GRPOTrainer._compute_loss)
    forward = source.index("self._get_per_token_logps_and_entropies(")
    read_old = source.index('inputs.get("old_per_token_logps")')
    ratio = source.index("log_ratio = per_token_logps - old_per_token_logps")
    token_level = source.index('if self.importance_sampling_level == "token":')
    assert forward < read_old < ratio < token_level
    assert source.count("self._get_per_token_logps_and_entropies(") == 1
    params = list(inspect.signature(trl.GRPOTrainer._get_per_token_logps_and_entropies).parameters)
    assert params[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"]
    assert list(inspect.signature(trl.GRPOTrainer._compute_loss).parameters) == ["self", "model", "inputs"]


def test_gspo_token_old_logps_give_eq_13_log_ratio():
    from trl_ext.grpo.gspo_token import gspo_token_old_logps

    logps = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, -9.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.5, -3.0], [-0.5, -0.5, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    log_ratio = logps - gspo_token_old_logps(logps, old, mask)  # what TRL forms
    # log s_i = mean over unmasked tokens of log(pi / pi_old): (0.5 + 0.5 + 0) / 3 and (0 + 0.25) / 2
    expected = torch.tensor([[1 / 3] * 3, [0.125] * 3])
    torch.testing.assert_close(log_ratio.detach(), expected)
    log_ratio.sum().backward()  # d log_ratio_t / d logp_t = 1 (pi_t / sg[pi_t]), nothing through sg[s_i]
    torch.testing.assert_close(logps.grad, torch.ones_like(logps))
    on_policy = logps - gspo_token_old_logps(logps, None, mask)
    torch.testing.assert_close(on_policy.detach(), torch.zeros_like(logps))


def test_gspo_token_config_maps_to_the_token_level_every_trl_accepts(tmp_path):
    from trl_ext import GSPOConfig

    settings = dict(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, num_generations=4)
    legacy = GSPOConfig(importance_sampling_level="sequence_token", **settings)  # TRL 1.12's experimental spelling
    assert legacy.gspo_token and legacy.importance_sampling_level == "token"
    token = GSPOConfig(gspo_token=True, **settings)
    assert token.importance_sampling_level == "token"
    # a config rebuilt from its own values (checkpoints, TrlParser) keeps meaning GSPO-token
    again = GSPOConfig(gspo_token=True, importance_sampling_level=token.importance_sampling_level, **settings)
    assert again.gspo_token and again.importance_sampling_level == "token"


def test_sequence_token_level_without_our_switch_fails_at_construction(tiny_model, tokenizer, problems, tmp_path):
    from trl_ext import GRPOTrainer

    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        per_device_train_batch_size=8,
        num_generations=4,
        importance_sampling_level="sequence_token",
    )
    with pytest.raises(ValueError, match=r"GSPOConfig\(gspo_token=True\)"):
        GRPOTrainer(tiny_model, [lambda completions, **kw: [0.0] * len(completions)], args=args,
                    train_dataset=problems[0], processing_class=tokenizer)  # fmt: skip


# -- DPO: TRL >= 1.15's fused LM head ---------------------------------------------------------------------------


def test_next_token_logps_from_fused_log_probs_or_logits():
    from types import SimpleNamespace

    from trl_ext.dpo.trainer import _next_token_logps

    input_ids = torch.tensor([[0, 2, 1]])
    logits = torch.tensor([[[0.0, 1.0, 2.0], [1.0, 1.0, 1.0], [5.0, 0.0, 0.0]]])
    from_logits = _next_token_logps(SimpleNamespace(logits=logits), input_ids)
    expected = torch.log_softmax(logits[0, :2], -1)[[0, 1], [2, 1]].unsqueeze(0)  # log p(2 | pos 0), log p(1 | pos 1)
    torch.testing.assert_close(from_logits, expected)
    fused = SimpleNamespace(log_probs=torch.tensor([[-0.1, -0.2]]), logits=None)  # TRL >= 1.15: already gathered
    torch.testing.assert_close(_next_token_logps(fused, input_ids), torch.tensor([[-0.1, -0.2]]))


# -- PPO: trl 1.12 only ---------------------------------------------------------------------------------------


@pytest.mark.skipif(HAS_PPO, reason="this TRL has PPO (1.12): the message is for newer TRL")
def test_ppo_on_newer_trl_fails_at_construction_naming_the_install_line(tokenizer):
    from datasets import Dataset

    from trl_ext.ppo import RuleRewardModel

    with pytest.raises(ImportError) as info:
        RuleRewardModel(
            [lambda completions, **kw: [0.0] * len(completions)], tokenizer, Dataset.from_dict({"prompt": ["1+1="]})
        )
    message = str(info.value)
    assert f"trl=={trl.__version__}" in message and 'pip install -e ".[ppo]"' in message and "1.12" in message
    recipe = subprocess.run(
        [sys.executable, os.path.join(REPO, "recipes", "ppo.py"), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert recipe.returncode != 0 and 'pip install -e ".[ppo]"' in recipe.stderr


@pytest.mark.skipif(not HAS_PPO, reason='PPO needs trl 1.12 (removed in 1.13): pip install "trl-ext[ppo]"')
def test_ppo_is_available_on_trl_1_12():
    from trl_ext.reliability.checks import require_ppo

    config, trainer = require_ppo()
    assert trainer.__name__ == "PPOTrainer" and config.__name__ == "PPOConfig"
