"""trl-ext: DAPO and GSPO done right over Hugging Face TRL.

Public API (``from trl_ext import DAPOTrainer, DAPOConfig``): presets, drop-in trainers, group-mined DPO, diagnostics.
PPO's rule-reward adapter is ``trl_ext.ppo`` (only trl 1.12 ships ``PPOTrainer``), the reward functions
``trl_ext.rewards``. Names load their module on first use (PEP 562), so ``import trl_ext.rewards`` (the math reward's
helper processes) does not pay for torch, transformers and TRL.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES = {
    "trl_ext.grpo.configs": ["DAPOConfig", "DrGRPOConfig", "GRPOFamilyConfig", "GRPOPaperConfig", "GSPOConfig"],
    "trl_ext.grpo.presets": ["get_preset", "preset_names", "trainer_class_for"],
    "trl_ext.grpo.trainers": ["DAPOTrainer", "GRPOTrainer", "GSPOTokenTrainer", "GSPOTrainer"],
    "trl_ext.grpo.async_rollout": [
        "AsyncDAPOTrainer",
        "AsyncGRPOTrainer",
        "AsyncGSPOTokenTrainer",
        "AsyncGSPOTrainer",
    ],
    "trl_ext.dpo.trainer": ["DPOConfig", "DPOTrainer", "train_iterative_dpo"],
    "trl_ext.dpo.pairs": ["build_pairs", "mine_pairs"],
    "trl_ext.diagnostics.health": ["HealthMonitor", "HealthThresholds"],
    "trl_ext.scripts.probe": ["ProbeArguments", "probe_model", "run_probe"],
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "AsyncDAPOTrainer",
    "AsyncGRPOTrainer",
    "AsyncGSPOTokenTrainer",
    "AsyncGSPOTrainer",
    "DAPOConfig",
    "DAPOTrainer",
    "DPOConfig",
    "DPOTrainer",
    "DrGRPOConfig",
    "GRPOFamilyConfig",
    "GRPOPaperConfig",
    "GRPOTrainer",
    "GSPOConfig",
    "GSPOTokenTrainer",
    "GSPOTrainer",
    "HealthMonitor",
    "HealthThresholds",
    "ProbeArguments",
    "build_pairs",
    "get_preset",
    "mine_pairs",
    "preset_names",
    "probe_model",
    "run_probe",
    "train_iterative_dpo",
    "trainer_class_for",
]
assert sorted(__all__) == sorted(_WHERE)  # one list of names, two views


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'trl_ext' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # static analysis and IDEs see the real names
    from trl_ext.diagnostics.health import HealthMonitor, HealthThresholds
    from trl_ext.dpo.pairs import build_pairs, mine_pairs
    from trl_ext.dpo.trainer import DPOConfig, DPOTrainer, train_iterative_dpo
    from trl_ext.grpo.async_rollout import AsyncDAPOTrainer, AsyncGRPOTrainer, AsyncGSPOTokenTrainer, AsyncGSPOTrainer
    from trl_ext.grpo.configs import DAPOConfig, DrGRPOConfig, GRPOFamilyConfig, GRPOPaperConfig, GSPOConfig
    from trl_ext.grpo.presets import get_preset, preset_names, trainer_class_for
    from trl_ext.grpo.trainers import DAPOTrainer, GRPOTrainer, GSPOTokenTrainer, GSPOTrainer
    from trl_ext.scripts.probe import ProbeArguments, probe_model, run_probe
