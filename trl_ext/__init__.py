"""trl-ext: DAPO and GSPO done right over Hugging Face TRL.

Public API: the presets (configs) and the drop-in trainers. ``from trl_ext import DAPOTrainer, DAPOConfig``.
"""

from trl_ext.presets import (
    DAPOConfig,
    DrGRPOConfig,
    GRPOFamilyConfig,
    GRPOPaperConfig,
    GSPOConfig,
    get_preset,
    preset_names,
)
from trl_ext.trainers import DAPOTrainer, GRPOTrainer, GSPOTokenTrainer, GSPOTrainer, trainer_class_for

__version__ = "0.1.0"

__all__ = [
    "DAPOConfig",
    "DAPOTrainer",
    "DrGRPOConfig",
    "GRPOFamilyConfig",
    "GRPOPaperConfig",
    "GRPOTrainer",
    "GSPOConfig",
    "GSPOTokenTrainer",
    "GSPOTrainer",
    "get_preset",
    "preset_names",
    "trainer_class_for",
]
