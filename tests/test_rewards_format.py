"""Format, process and arithmetic rewards against hand-computed tables."""

from __future__ import annotations

import pytest

from trl_ext.rewards.arithmetic import arithmetic_reward, completion_text
from trl_ext.rewards.format import ProcessReward, ThinkFormat, count_steps

# (completion, strict, lenient, answer_tags)
FORMAT_CASES = [
    ("<think>\nreason\n</think>\nanswer", 1.0, 1.0, False),
    ("<think>reason</think>answer", 0.0, 1.0, False),  # strict wants the newlines
    ("reason\n</think>\nanswer", 0.0, 1.0, False),  # <think> was in the prompt (R1 / Qwen3 chat templates)
    ("  <think>\nreason\n</think>\nanswer", 0.0, 1.0, False),  # leading whitespace
    ("<think>\nreason\n</think>\n", 0.0, 0.0, False),  # no answer
    ("<think>\n\n</think>\nanswer", 0.0, 0.0, False),  # empty reasoning
    ("</think>answer", 0.0, 0.0, False),  # no reasoning at all
    ("<think>\na\n</think>\nb<think>c</think>", 0.0, 0.0, False),  # two think blocks
    ("<think>\na\n</think>\nb\n</think>", 0.0, 0.0, False),  # closed twice
    ("text <think>\nr\n</think>\na", 0.0, 0.0, False),  # text before the block
    ("<think>\nnever closed", 0.0, 0.0, False),
    ("answer only", 0.0, 0.0, False),
    ("<think>\nr\n</think>\n<answer>\n42\n</answer>", 1.0, 1.0, True),
    ("<think>\nr\n</think>\n<answer>\n42\n</answer>\n", 1.0, 1.0, True),  # trailing newline is fine
    ("<think>\nr\n</think>\n<answer>42</answer>", 0.0, 1.0, True),
    ("<think>\nr\n</think>\n<answer>\n42\n</answer> and more", 0.0, 1.0, True),  # strict: answer ends it
    ("<think>\nr\n</think>\n<answer>\n\n</answer>", 0.0, 0.0, True),  # empty answer
    ("<think>\nr\n</think>\n42", 0.0, 0.0, True),  # no answer tags
    ([{"role": "assistant", "content": "<think>\nr\n</think>\na"}], 1.0, 1.0, False),
    ([{"role": "assistant", "content": [{"type": "text", "text": "<think>r</think>a"}]}], 0.0, 1.0, False),
    (None, 0.0, 0.0, False),
    ([], 0.0, 0.0, False),
]


@pytest.mark.parametrize(("completion", "strict", "lenient", "answer_tags"), FORMAT_CASES)
def test_format_table(completion, strict, lenient, answer_tags):
    assert ThinkFormat(strict=True, answer_tags=answer_tags)(completions=[completion]) == [strict]
    assert ThinkFormat(strict=False, answer_tags=answer_tags)(completions=[completion]) == [lenient]


def test_format_names():
    assert ThinkFormat().__name__ == "format_strict"
    assert ThinkFormat(strict=False).__name__ == "format_lenient"


# (completion, hand-computed credit with min_steps=3): closed 0.25 + reasoning 0.25 + steps 0.25*min(1,k/3) + answer 0.25
PROCESS_CASES = [
    ("<think>\nStep 1: add\nStep 2: carry\nStep 3: check\n</think>\nThe answer is 42", 1.0),
    ("<think>\nFirst, add.\nThen, check.\n</think>\n\\boxed{5}", 0.25 + 0.25 + 0.25 * 2 / 3 + 0.25),
    ("<think>\nI just know it.\n</think>\nno idea", 0.5),
    ("<think>\n1. a\n2. b\n3. c\n4. d", 0.5),  # unclosed: reasoning and steps only
    ("<think>\n- a\n- b\n</think>\n<think>x</think>", 0.25 + 0.25 * 2 / 3),  # two blocks: not closed once
    ("<think>\n\n</think>\n7", 0.5),  # closed and answered, but nothing reasoned
    ("42", 0.25),  # no tags: the text is the reasoning
    ("", 0.0),
    (None, 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), PROCESS_CASES)
def test_process_table(completion, expected):
    assert ProcessReward(min_steps=3)(completions=[completion]) == [pytest.approx(expected)]


def test_count_steps():
    text = "Step 1: x\n  2) y\n* z\nFinally, w\nnot a step\n3.5 is a number\nstep two"
    assert count_steps(text) == 4


def test_process_rejects_bad_min_steps():
    with pytest.raises(ValueError, match="min_steps"):
        ProcessReward(min_steps=0)


def test_arithmetic_demo_reward():
    completions = ["42", " 42<eos>", "4 2", "-3", "", None, [{"role": "assistant", "content": "17"}], "9" * 5000, "7"]
    answers = [42, "42", 42, -3, 1, 1, 17, 9, "seven"]
    assert arithmetic_reward(["p"] * 9, completions, answers, completion_ids=None, trainer_state=None) == [
        1.0,
        1.0,
        0.0,
        1.0,
        0.0,
        0.0,
        1.0,
        0.0,
        0.0,
    ]
    assert arithmetic_reward.__name__ == "arithmetic_reward"
    assert completion_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) == "a"
