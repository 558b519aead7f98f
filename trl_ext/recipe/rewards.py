"""The reward functions of a run (registry names or reward models), the task reward that fits the data, and the rule
reward that scores held-out accuracy (never a learned reward: it is what a learned reward stands in for)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from trl_ext.data import Layout
from trl_ext.errors import UserError, as_user_errors
from trl_ext.reliability.reward_guard import reward_columns
from trl_ext.reliability.zero_reward import ZeroRewardWatch
from trl_ext.reward_model import is_reward_model, load_reward_model, looks_like_model
from trl_ext.rewards import available_rewards, get_rewards
from trl_ext.rewards.arithmetic import arithmetic_reward


def reward_functions(names: list[str], options: dict | str | None = None) -> list:
    """Reward callables by registry name (``options``: a mapping or its JSON text); another name that is a folder or
    a Hub id is loaded as a reward model (``trl_ext.reward_model``), and one that is neither fails naming both."""
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except json.JSONDecodeError as error:
            raise UserError(
                f"reward_options={options!r} is not valid JSON; write e.g. "
                '\'{"length_budget": {"budget": 3}}\' or set it as a mapping in the YAML config.'
            ) from error
    known = set(available_rewards())
    rules = [n for n in names if n in known]
    with as_user_errors(ValueError):  # an option a reward does not take: the registry names it and the closest
        built = iter(get_rewards(rules, {k: v for k, v in (options or {}).items() if k in rules}) if rules else [])
    funcs = []
    for name in names:
        if name in known:
            funcs.append(next(built))
            continue
        if not looks_like_model(name):
            with as_user_errors(ValueError):
                get_rewards([name])  # raises: unknown reward, with the known names and the closest one
        try:
            funcs.append(load_reward_model(name))
        except ValueError as error:
            raise UserError(
                f"reward {name!r} is neither a registry name ({', '.join(sorted(known))}) nor a loadable reward "
                f"model: {error} Give a registry name, or a folder written by `trl-ext reward` (or any "
                "AutoModelForSequenceClassification checkpoint)."
            ) from error
    return funcs


def gold_reward(funcs: Sequence[Callable], script_args: Any, layout: Layout) -> Callable | None:
    """The rule reward that scores held-out accuracy: the first rule among ``funcs``; with only reward models, the
    task reward of the data (the gold a learned reward stands in for); None when there is none."""
    rule = next((f for f in funcs if not is_reward_model(f)), None)
    if rule is not None or script_args.dataset_name is None:
        return rule
    if layout.reference_column is None:
        return None
    return reward_functions([layout.task_rewards[0]])[0]


def task_rewards(script_args: Any, layout: Layout | None) -> tuple[list, list[str]]:
    """``(reward functions, names)`` of a run: ``reward_funcs`` when given, else ``layout.task_rewards``; the first
    rule function is wrapped in ``ZeroRewardWatch`` (a warning when it scores nothing in the first steps)."""
    names = list(getattr(script_args, "reward_funcs", None) or [])
    if not names:
        if layout is None:
            raise ValueError("task_rewards: no reward_funcs named and no data layout to choose the task reward from.")
        if layout.reference_column is None:
            raise UserError(
                f"the dataset has no reference column that trl-ext recognizes ({layout.describe()}), so no task reward "
                "can score it. Name the column with the final answer, --dataset_answer_column <column> (a dotted path "
                "reaches a nested field), or choose rewards with --reward_funcs (trl_ext.rewards.available_rewards())."
            )
        names = list(layout.task_rewards)
    funcs = reward_functions(names, getattr(script_args, "reward_options", None))
    index = next((i for i, f in enumerate(funcs) if not is_reward_model(f)), None)
    if index is not None:  # the first rule reward (a reward model's scores are never all zero)
        first = funcs[index]
        column = getattr(first, "solution_column", None) or getattr(first, "tests_column", None)
        funcs[index] = ZeroRewardWatch(first, column or next(iter(reward_columns(first) or []), None))
    return funcs, names


def evaluation_reward(script_args: Any, layout: Layout, reward: Callable | None = None) -> Callable | None:
    """The reward held-out evaluation scores with: ``arithmetic_reward`` on the demo, else ``reward`` or the
    ``gold_reward`` of the run's rewards; None when no reward is named and the data has no reference column."""
    if script_args.dataset_name is None:
        return arithmetic_reward
    if reward is not None:
        return reward
    if not getattr(script_args, "reward_funcs", None) and layout.reference_column is None:
        return None
    return gold_reward(task_rewards(script_args, layout)[0], script_args, layout)
