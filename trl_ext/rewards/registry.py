"""Reward functions by name, for recipes (``reward_funcs: [accuracy, format]``), as open-r1's ``get_reward_funcs``:
each carries a readable ``__name__`` (TRL logs ``rewards/<name>/mean``), and parameterised rewards are instances of
small classes, not closures, so they pickle into worker processes. Names and options: ``rewards/README.md``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trl_ext.errors import did_you_mean
from trl_ext.rewards.arithmetic import arithmetic_reward
from trl_ext.rewards.code import CodeFormat, CodeReward
from trl_ext.rewards.format import ProcessReward, TagCount, ThinkFormat
from trl_ext.rewards.length import LengthBudget, Repetition, SoftOverlong
from trl_ext.rewards.length_scaled import CosineLength, KimiLength
from trl_ext.rewards.math import MathAccuracy


@dataclass(frozen=True)
class _Entry:
    factory: Callable[..., Callable]
    defaults: dict[str, Any] = field(default_factory=dict)  # overridable by options
    fixed: dict[str, Any] = field(default_factory=dict)  # set by the name itself

    def accepted(self) -> set[str] | None:
        """Option names the factory takes (None: anything, it has ``**kwargs``)."""
        try:
            parameters = inspect.signature(self.factory).parameters.values()
        except (TypeError, ValueError):
            return None
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            return None
        names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        return names - set(self.fixed)

    def build(self, options: dict[str, Any]) -> Callable:
        return self.factory(**{**self.defaults, **options, **self.fixed})


_REGISTRY: dict[str, _Entry] = {
    "accuracy": _Entry(MathAccuracy),
    "format": _Entry(ThinkFormat, defaults={"name": "format"}),
    "format_strict": _Entry(ThinkFormat, fixed={"strict": True}),
    "format_lenient": _Entry(ThinkFormat, fixed={"strict": False}),
    "process": _Entry(ProcessReward),
    "soft_overlong": _Entry(SoftOverlong),
    "length_budget": _Entry(LengthBudget),
    "repetition": _Entry(Repetition),
    "code": _Entry(CodeReward),
    "code_format": _Entry(CodeFormat),
    "tag_count": _Entry(TagCount),
    "len_reward": _Entry(KimiLength),
    "cosine": _Entry(CosineLength),
    "arithmetic": _Entry(lambda: arithmetic_reward),  # a reward itself, no options
    "arithmetic_reward": _Entry(lambda: arithmetic_reward),  # alias: the demo reward's logged __name__
}


def register_reward(name: str, factory: Callable[..., Callable], overwrite: bool = False, **fixed: Any) -> None:
    """Make ``factory(**options)`` available as ``name``; ``fixed`` keyword options are set by the name."""
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"reward {name!r} is already registered; pass overwrite=True to replace it")
    _REGISTRY[name] = _Entry(factory, fixed=fixed)


def available_rewards() -> list[str]:
    """Registered reward names, sorted."""
    return sorted(_REGISTRY)


def get_reward(name: str, /, **options: Any) -> Callable:
    """The reward function registered as ``name``, built with ``options``; a ``ValueError`` names a bad name or
    option, with a close match."""
    if name not in _REGISTRY:
        hint = did_you_mean(name, _REGISTRY)
        raise ValueError(f"unknown reward {name!r}.{hint} Known rewards: {available_rewards()}")
    entry = _REGISTRY[name]
    accepted = entry.accepted()
    if accepted is not None:
        unknown = sorted(set(options) - accepted)
        if unknown:
            fixed = sorted(set(unknown) & set(entry.fixed))
            note = f" ({fixed} is set by the name {name!r})" if fixed else ""
            hint = did_you_mean(unknown[0], sorted(accepted), cutoff=0.5)
            raise ValueError(
                f"unknown option(s) {unknown} for reward {name!r}{note}.{hint} It accepts {sorted(accepted)}"
            )
    return entry.build(options)


def get_rewards(names: list[str], options: dict[str, dict[str, Any]] | None = None) -> list[Callable]:
    """Rewards for a recipe's ``reward_funcs`` list; ``options`` maps a name to its keyword options."""
    if isinstance(names, str):
        raise ValueError(f"reward names must be a list, got the string {names!r}; write [{names!r}]")
    options = dict(options or {})
    stray = sorted(set(options) - set(names))
    if stray:
        raise ValueError(f"options given for {stray}, which are not in the reward list {list(names)}")
    return [get_reward(name, **(options.get(name) or {})) for name in names]
