"""The one table of GRPO-family presets: name -> (config class, trainer class, fixed overrides).

Everything that chooses an algorithm by name reads it (``get_preset``, ``trainer_class_for``, ``trl-ext <name>``,
``--preset``, ``preset:`` in a YAML). Adding a preset is one config class and one row (docs/RECIPES.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import trl

from trl_ext.errors import did_you_mean
from trl_ext.grpo.async_rollout import OVERLAPPED
from trl_ext.grpo.configs import DAPOConfig, DrGRPOConfig, GRPOFamilyConfig, GRPOPaperConfig, GSPOConfig
from trl_ext.grpo.trainers import DAPOTrainer, GRPOTrainer, GSPOTokenTrainer, GSPOTrainer


@dataclass(frozen=True)
class Preset:
    """One row: the config class holding the paper's defaults, the trainer that runs it, and fields the preset fixes
    on top of the class defaults (``gspo_token`` shares ``GSPOConfig`` and differs by one switch)."""

    config: type[GRPOFamilyConfig]
    trainer: type[GRPOTrainer]
    overrides: dict[str, Any] = field(default_factory=dict)
    summary: str = ""


PRESETS: dict[str, Preset] = {
    "grpo": Preset(GRPOPaperConfig, GRPOTrainer, summary="GRPO, DeepSeekMath (arXiv 2402.03300)"),
    "dr_grpo": Preset(DrGRPOConfig, GRPOTrainer, summary="Dr. GRPO (arXiv 2503.20783)"),
    "dapo": Preset(DAPOConfig, DAPOTrainer, summary="DAPO (arXiv 2503.14476)"),
    "gspo": Preset(GSPOConfig, GSPOTrainer, summary="GSPO (arXiv 2507.18071)"),
    "gspo_token": Preset(GSPOConfig, GSPOTokenTrainer, {"gspo_token": True}, summary="GSPO-token (GSPO Eq. 13)"),
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def lookup(name: str) -> Preset:
    """The table row of ``name`` (``-`` and ``_`` interchangeable, any case); unknown names raise, listing the known."""
    key = name.lower().replace("-", "_")
    if key not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}. Known presets: {preset_names()}.{did_you_mean(key, PRESETS)}")
    return PRESETS[key]


def get_preset(name: str, **overrides: Any) -> GRPOFamilyConfig:
    """Build the config of preset ``name`` with ``overrides`` applied (unknown fields raise, naming the field)."""
    row = lookup(name)
    known = {f.name for f in fields(row.config) if f.init}
    unknown = sorted(set(overrides) - known)
    if unknown:
        hints = "".join(did_you_mean(u, sorted(known)) for u in unknown)
        raise ValueError(f"Unknown field(s) {unknown} for preset {name!r} ({row.config.__name__}).{hints}")
    return row.config(**{**row.overrides, **overrides})


def trainer_class_for(args: trl.GRPOConfig) -> type[GRPOTrainer]:
    """The trainer class of the row whose config class is the nearest base of ``type(args)`` and whose fixed overrides
    all hold on ``args`` (most overrides wins a tie); ``GRPOTrainer`` for a plain ``trl.GRPOConfig``. With
    ``async_generation=True``, the overlapped variant of that class (``AsyncDAPOTrainer``, ...)."""
    mro = type(args).__mro__
    best: tuple[int, int] | None = None
    chosen: type[GRPOTrainer] = GRPOTrainer
    for row in PRESETS.values():
        if row.config not in mro or any(getattr(args, k, None) != v for k, v in row.overrides.items()):
            continue
        rank = (-mro.index(row.config), len(row.overrides))
        if best is None or rank > best:
            best, chosen = rank, row.trainer
    if getattr(args, "async_generation", False):
        return OVERLAPPED.get(chosen, chosen)
    return chosen
