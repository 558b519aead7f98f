"""trl-ext: DAPO and GSPO done right over Hugging Face TRL.

Public API: presets (configs), drop-in trainers, group-mined DPO, diagnostics.
``from trl_ext import DAPOTrainer, DAPOConfig``. PPO's rule-reward adapter lives in ``trl_ext.ppo`` (imported on
demand, since only trl 1.12 ships ``PPOTrainer``).
"""

from trl_ext.diagnostics import HealthMonitor, HealthThresholds, ProbeArguments, probe_model, run_probe
from trl_ext.dpo import DPOConfig, DPOTrainer, build_pairs, mine_pairs, train_iterative_dpo
from trl_ext.grpo import (
    DAPOConfig,
    DAPOTrainer,
    DrGRPOConfig,
    GRPOFamilyConfig,
    GRPOPaperConfig,
    GRPOTrainer,
    GSPOConfig,
    GSPOTokenTrainer,
    GSPOTrainer,
    get_preset,
    preset_names,
    trainer_class_for,
)

__version__ = "0.1.0"

__all__ = [
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
