"""The GRPO family: preset configs (``configs``), trainers (``trainers``), the one preset table (``presets``),
dynamic sampling and its group maths (``dynamic_sampling``, ``group_filter``) and GSPO-token (``gspo_token``)."""

from trl_ext.grpo.configs import DAPOConfig, DrGRPOConfig, GRPOFamilyConfig, GRPOPaperConfig, GSPOConfig
from trl_ext.grpo.presets import PRESETS, Preset, get_preset, preset_names, trainer_class_for
from trl_ext.grpo.trainers import DAPOTrainer, GRPOTrainer, GSPOTokenTrainer, GSPOTrainer

__all__ = [
    "PRESETS",
    "DAPOConfig",
    "DAPOTrainer",
    "DrGRPOConfig",
    "GRPOFamilyConfig",
    "GRPOPaperConfig",
    "GRPOTrainer",
    "GSPOConfig",
    "GSPOTokenTrainer",
    "GSPOTrainer",
    "Preset",
    "get_preset",
    "preset_names",
    "trainer_class_for",
]
