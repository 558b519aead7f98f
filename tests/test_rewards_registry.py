"""Registry: names, options, errors; and the contract every reward keeps with TRL's calling convention."""

from __future__ import annotations

import math
import pickle

import pytest

from trl_ext import rewards
from trl_ext.rewards import available_rewards, get_reward, get_rewards, register_reward
from trl_ext.rewards.math import MathAccuracy

REQUIRED = {
    "accuracy",
    "format",
    "format_strict",
    "format_lenient",
    "process",
    "soft_overlong",
    "length_budget",
    "repetition",
    "code",
    "arithmetic",
}
OPTIONS = {
    "soft_overlong": {"max_completion_len": 8, "soft_punish_cache": 4},
    "length_budget": {"budget": 4},
    "code": {"timeout": 1.0, "num_workers": 2},
}
EXPECTED_NAMES = {name: name for name in REQUIRED} | {"arithmetic": "arithmetic_reward"}


def test_required_names_are_registered():
    assert REQUIRED <= set(available_rewards())
    assert available_rewards() == sorted(available_rewards())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_readable_names_and_pickling(name):
    reward = get_reward(name, **OPTIONS.get(name, {}))
    assert reward.__name__ == EXPECTED_NAMES[name]
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == reward.__name__


def test_unknown_name_names_it_the_known_names_and_a_close_match():
    with pytest.raises(ValueError) as error:
        get_reward("acuracy")
    message = str(error.value)
    assert "'acuracy'" in message and "Did you mean 'accuracy'?" in message and "'format_lenient'" in message
    with pytest.raises(ValueError, match="unknown reward 'zzz'\\. Known rewards"):
        get_reward("zzz")


def test_unknown_options_are_named():
    with pytest.raises(ValueError, match=r"\['max_len'\].*'soft_overlong'.*Did you mean 'max_completion_len'"):
        get_reward("soft_overlong", max_len=10)
    with pytest.raises(ValueError, match=r"\['strict'\].*set by the name 'format_strict'"):
        get_reward("format_strict", strict=False)
    with pytest.raises(ValueError, match=r"\['ngram'\]"):
        get_reward("arithmetic", ngram=3)


def test_options_reach_the_reward():
    accuracy, fmt, lenient = get_rewards(
        ["accuracy", "format", "format_lenient"],
        {"accuracy": {"extraction": "boxed", "name": "acc_boxed"}, "format": {"strict": False}},
    )
    assert isinstance(accuracy, MathAccuracy) and accuracy.extraction == "boxed" and accuracy.__name__ == "acc_boxed"
    assert fmt.__name__ == "format" and fmt.strict is False
    assert lenient.__name__ == "format_lenient" and lenient.strict is False
    assert get_reward("arithmetic") is get_reward("arithmetic_reward") is rewards.arithmetic_reward


def test_get_rewards_rejects_strays_and_strings():
    with pytest.raises(ValueError, match=r"options given for \['format'\]"):
        get_rewards(["accuracy"], {"format": {}})
    with pytest.raises(ValueError, match="must be a list"):
        get_rewards("accuracy")


def test_register_reward():
    class Constant:
        def __init__(self, value: float = 1.0):
            self.value = value
            self.__name__ = "constant"

        def __call__(self, prompts=None, completions=None, **kwargs):
            return [self.value] * len(completions)

    register_reward("test_constant", Constant, overwrite=True)
    assert get_reward("test_constant", value=0.5)(completions=["a", "b"]) == [0.5, 0.5]
    with pytest.raises(ValueError, match="already registered"):
        register_reward("test_constant", Constant)
    with pytest.raises(ValueError, match=r"\['valu'\]"):
        get_reward("test_constant", valu=2)


MALFORMED = [
    "",
    None,
    12345,
    [],
    [{}],
    [{"role": "assistant", "content": None}],
    [{"role": "assistant", "content": [{"type": "text"}, "junk"]}],
    {"content": "\\boxed{"},
    "\x00\udcff" * 10,
    "<think>" * 1000,
    "```python\n" + "(" * 5000,
    "9" * 5000,
]


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_reward_takes_trl_kwargs_and_never_raises_on_model_output(name):
    """TRL calls ``f(prompts=..., completions=..., completion_ids=..., <columns>, trainer_state, log_extra,
    log_metric)``; malformed completions must give a float or None each, never an exception."""
    reward = get_reward(name, **OPTIONS.get(name, {}))
    n = len(MALFORMED)
    metrics = []
    out = reward(
        prompts=["p"] * n,
        completions=MALFORMED,
        completion_ids=[[1, 2, 3]] * n,
        solution=["42"] * n,
        answer=["42"] * n,
        tests=[["assert True"]] * n,
        trainer_state=None,
        log_extra=lambda column, values: None,
        log_metric=lambda key, value: metrics.append((key, value)),
    )
    assert len(out) == n
    assert all(value is None or (isinstance(value, float) and math.isfinite(value)) for value in out)
    assert all(isinstance(value, float) for _, value in metrics)
