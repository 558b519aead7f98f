"""Rule-based, verifiable rewards with TRL's reward-function signature (``prompts, completions, **kwargs``): one float
per completion (``None``: cannot be scored), never raising on malformed model output. ``get_rewards(["accuracy",
"format"], {"accuracy": {"extraction": "boxed"}})`` builds them by name; ``rewards/README.md`` documents them all.
"""

from trl_ext.rewards.arithmetic import arithmetic_reward
from trl_ext.rewards.code import CodeFormat, CodeReward
from trl_ext.rewards.format import ProcessReward, TagCount, ThinkFormat
from trl_ext.rewards.length import LengthBudget, Repetition, SoftOverlong
from trl_ext.rewards.length_scaled import CosineLength, KimiLength
from trl_ext.rewards.math import MathAccuracy
from trl_ext.rewards.registry import available_rewards, get_reward, get_rewards, register_reward
from trl_ext.rewards.sandbox import sandbox_report
from trl_ext.rewards.text import completion_text

__all__ = [
    "CodeFormat",
    "CodeReward",
    "CosineLength",
    "KimiLength",
    "LengthBudget",
    "MathAccuracy",
    "ProcessReward",
    "Repetition",
    "SoftOverlong",
    "TagCount",
    "ThinkFormat",
    "arithmetic_reward",
    "available_rewards",
    "completion_text",
    "get_reward",
    "get_rewards",
    "register_reward",
    "sandbox_report",
]
