"""open-r1's shaping rewards that trl-ext lacked: tag_count, Kimi k1.5's len_reward, the cosine length reward and a
code-format reward, against values computed by hand from the definitions in their docstrings."""

from __future__ import annotations

import math

import pytest

from trl_ext.rewards import get_reward
from trl_ext.rewards.code_format import CodeFormat
from trl_ext.rewards.length_scaled import CosineLength, KimiLength
from trl_ext.rewards.tag_count import TagCount


def given_correctness(prompts=None, completions=None, ok=None, **kwargs):
    """A stand-in accuracy reward: the dataset column ``ok`` says which completions are right (None: unscorable)."""
    return list(ok)


FULL = "<think>\nx\n</think>\n<answer>\ny\n</answer>"


@pytest.mark.parametrize(
    ("text", "quarters", "halves"),
    [
        (FULL, 1.0, 1.0),
        ("<think>\nx\n</think>\ny", 0.5, 1.0),  # no answer tags
        ("<think>\n<think>\nx\n</think>\n<answer>\ny\n</answer>", 0.75, 0.5),  # "<think>\n" twice earns nothing
        ("<think>x</think><answer>y</answer>", 0.0, 0.0),  # no newlines: no marker matches
        ("x\n</think>\n<answer>\ny", 0.5, 0.5),  # "\n</think>\n" and "\n<answer>\n"
        ("", 0.0, 0.0),
    ],
)
def test_tag_count(text, quarters, halves):
    assert TagCount()(completions=[text]) == [quarters]
    assert TagCount(answer_tags=False)(completions=[[{"role": "assistant", "content": text}]]) == [halves]


def test_kimi_length_reward_by_hand():
    reward = KimiLength(accuracy=given_correctness)
    # group "a": lengths 10, 20, 30 -> lambda = 0.5, 0.0, -0.5; right, wrong, right -> 0.5, min(0, 0.0), -0.5
    # group "b": lengths 10, 30 -> lambda = 0.5, -0.5; wrong, right -> min(0, 0.5) = 0, -0.5
    # group "c": equal lengths -> 0; an unscorable completion -> None
    prompts = ["a", "a", "a", "b", "b", "c", "c", "c"]
    ids = [[0] * n for n in (10, 20, 30, 10, 30, 5, 5, 5)]
    ok = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, None]
    out = reward(prompts=prompts, completions=["x"] * 8, completion_ids=ids, ok=ok)
    assert out == [0.5, 0.0, -0.5, 0.0, -0.5, 0.0, 0.0, None]
    assert reward.last_unit == "tokens"
    # without completion_ids: whitespace words; one group when no prompts are given
    words = reward(completions=["a b", "a b c d", "a b c"], ok=[0.0, 1.0, 1.0])
    assert words == [0.0, -0.5, 0.0]  # lambda 0.5 (wrong -> 0), -0.5, 0.0
    assert reward.last_unit == "words"


def test_cosine_length_reward_by_hand():
    reward = CosineLength(max_len=100, accuracy=given_correctness)
    ids = [[0] * n for n in (0, 25, 50, 100, 200, 0, 50, 100)]
    ok = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    out = reward(completions=["x"] * 8, completion_ids=ids, ok=ok)
    # correct: 0.5 + 0.5 * 0.5 * (1 + cos(pi t / 100)); wrong: -0.5 + 0.5 * (-1.0 + 0.5) * (1 + cos(pi t / 100))
    expected = [1.0, 0.5 + 0.25 * (1 + math.cos(math.pi / 4)), 0.75, 0.5, 0.5, -1.0, -0.75, -0.5]
    assert out == pytest.approx(expected, abs=1e-12)
    assert expected[1] == pytest.approx(0.9267766953)
    capped = CosineLength(max_len=100, exceed_penalty=-2.0, accuracy=given_correctness)
    assert capped(completions=["x"] * 2, completion_ids=[[0] * 99, [0] * 100], ok=[1.0, 1.0])[1] == -2.0
    assert reward(completions=["x"], completion_ids=[[0]], ok=[None]) == [None]
    with pytest.raises(ValueError, match="max_len"):
        CosineLength(max_len=0, accuracy=given_correctness)


@pytest.mark.parametrize(
    ("text", "language", "think_format", "expected"),
    [
        ("```python\ndef f():\n    return 1\n```", "python", False, 1.0),
        ("Here:\n```py\nx = 1\n```\ndone", "python", False, 1.0),
        ("```python\ndef f(:\n```", "python", False, 0.0),  # does not parse
        ("```python\nx = 1\n```\n```python\nif\n```", "python", False, 0.0),  # the last block is the answer
        ("```\nx = 1\n```", "python", False, 0.0),  # no language label
        ("```js\nlet x = 1\n```", "python", False, 0.0),
        ("<think>\n```python\nx = 1\n```", "python", False, 0.0),  # reasoning never closed
        ("```cpp\nint main() {}\n```", "cpp", False, 1.0),  # fence only for other languages
        ("```python\nx = 1\n```", "python", True, 0.0),  # the strict think format is required
        ("<think>\nplan\n</think>\n```python\nx = 1\n```", "python", True, 1.0),
        ("```python\n\n```", "python", False, 0.0),  # empty block
    ],
)
def test_code_format(text, language, think_format, expected):
    assert CodeFormat(language, think_format)(completions=[text]) == [expected]


def test_each_is_registered_by_name():
    assert get_reward("tag_count").__name__ == "tag_count"
    assert get_reward("code_format", language="cpp").labels == {"cpp"}
    assert get_reward("len_reward", accuracy=given_correctness).__name__ == "len_reward"
    assert get_reward("cosine", max_len=10, accuracy=given_correctness).max_len == 10
    with pytest.raises(ValueError, match="language"):
        CodeFormat("")


def test_default_correctness_is_the_math_accuracy_reward():
    reward = get_reward("len_reward", solution_column="answer")
    texts = ["\\boxed{2}", "so the answer is \\boxed{3} here"]  # 1 and 6 words: lambda 0.5 and -0.5
    assert reward(prompts=["p", "p"], completions=texts, answer=["2", "2"]) == [0.5, -0.5]
