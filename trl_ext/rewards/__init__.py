"""Rule-based, verifiable rewards with TRL's reward-function signature (``prompts, completions, **kwargs``).

Every reward takes TRL's keyword arguments (dataset columns, ``completion_ids``, ``trainer_state``, ``log_metric``,
``log_extra``), accepts plain-text and conversational completions, returns one float per completion (``None``:
cannot be scored) and never raises on malformed model output. Get them by name for recipes::

    from trl_ext.rewards import get_rewards
    reward_funcs = get_rewards(["accuracy", "format"], {"accuracy": {"extraction": "boxed"}})

See ``rewards/README.md`` for the list, the options and the code sandbox's threat model.
"""

from trl_ext.rewards.arithmetic import arithmetic_reward
from trl_ext.rewards.code import CodeReward
from trl_ext.rewards.code_format import CodeFormat
from trl_ext.rewards.format import ProcessReward, ThinkFormat
from trl_ext.rewards.length import LengthBudget, Repetition, SoftOverlong
from trl_ext.rewards.length_scaled import CosineLength, KimiLength
from trl_ext.rewards.math import MathAccuracy
from trl_ext.rewards.registry import available_rewards, get_reward, get_rewards, register_reward
from trl_ext.rewards.sandbox import sandbox_report
from trl_ext.rewards.tag_count import TagCount
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
