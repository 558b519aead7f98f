"""Small local files in the column layouts of the datasets users train on (``../shared/DATASETS.md``), filled with
the demo's arithmetic problems (``"17+25="``), so that the demo's warm start can answer them: accuracy is clearly
above zero when a layout is wired right and zero when it is not. The Hub cannot be reached: these stand in for it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from trl_ext.demo import DemoTaskConfig, make_problems

# a chat template that renders a conversation as the demo model's prompt: the user turns' text, nothing else
DEMO_CHAT_TEMPLATE = "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"


def _gsm8k(prompt: str, answer: int) -> dict[str, Any]:
    a, b = prompt[:-1].split("+")
    return {"question": prompt, "answer": f"{a} plus {b} is <<{a}+{b}={answer}>>{answer}.\n#### {answer}"}


def _math(prompt: str, answer: int) -> dict[str, Any]:
    return {"problem": prompt, "level": "Level 1", "type": "Prealgebra", "solution": f"We add: $\\boxed{{{answer}}}$."}


def _math500(prompt: str, answer: int) -> dict[str, Any]:
    return {
        "problem": prompt,
        "solution": f"Adding, we get $\\boxed{{{answer}}}$.",
        "answer": str(answer),
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": f"test/prealgebra/{answer}.json",
    }


def _dapo(prompt: str, answer: int) -> dict[str, Any]:
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": prompt, "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": str(answer), "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": prompt},
    }


def _deepscaler(prompt: str, answer: int) -> dict[str, Any]:
    # a worked solution without \boxed{}: the final answer must come from `answer`, not from `solution`
    return {"problem": prompt, "answer": str(answer), "solution": f"First add the tens, then the ones: {prompt}"}


def _conversational(prompt: str, answer: int) -> dict[str, Any]:
    return {"prompt": [{"role": "user", "content": prompt}], "answer": str(answer)}


def _mbpp(prompt: str, answer: int) -> dict[str, Any]:
    # the demo model writes digits, which are valid Python: `assert True` passes for them, `assert False` never
    test = "assert True" if answer % 2 == 0 else "assert False"
    return {
        "task_id": answer,
        "text": prompt,
        "code": str(answer),
        "test_list": [test],
        "test_setup_code": "",
        "challenge_test_list": [],
    }


def _humaneval(prompt: str, answer: int) -> dict[str, Any]:
    check = "assert candidate(-1) == 1" if answer % 2 == 0 else "assert candidate(-1) == 2"
    return {
        "task_id": f"HumanEval/{answer}",
        "prompt": prompt,
        "canonical_solution": str(answer),
        "test": f"def check(candidate):\n    {check}\n",
        "entry_point": "abs",
    }


def _apps(prompt: str, answer: int) -> dict[str, Any]:
    # stdin/stdout: the program reads nothing and must print the sum (input_output is JSON text, as on the Hub)
    tests = {"inputs": [f"{prompt}\n"], "outputs": [f"{answer}\n"]}
    return {
        "problem_id": answer,
        "question": prompt,
        "solutions": json.dumps([f"print({answer})"]),
        "input_output": json.dumps(tests),
        "difficulty": "introductory",
        "url": "",
        "starter_code": "",
    }


def _taco(prompt: str, answer: int) -> dict[str, Any]:
    row = _apps(prompt, answer)
    del row["problem_id"], row["url"]
    return {**row, "tags": "['Math']", "source": "codeforces", "time_limit": "1 second", "memory_limit": "256 MB"}


def _livecodebench(prompt: str, answer: int) -> dict[str, Any]:
    return {
        "question_title": prompt,
        "question_content": prompt,
        "platform": "atcoder",
        "question_id": str(answer),
        "contest_date": "2024-01-01T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps([{"input": f"{prompt}\n", "output": f"{answer}\n", "testtype": "stdin"}]),
        "private_test_cases": "",
        "metadata": "{}",
    }


def _deepcoder(prompt: str, answer: int) -> dict[str, Any]:
    return {"problem": prompt, "tests": json.dumps([{"input": "", "output": str(answer), "testtype": "stdin"}])}


def _open_r1_code(prompt: str, answer: int) -> dict[str, Any]:
    case = {"input": "", "output": f"{answer}\n", "type": "stdin_stdout"}
    return {
        "problem": prompt,
        "verification_info": {"language": "python", "test_cases": [case]},
        "gold_standard_solution": f"```python\nprint({answer})\n```",
    }


LAYOUTS: dict[str, Callable[[str, int], dict[str, Any]]] = {
    "gsm8k": _gsm8k,
    "math": _math,
    "math500": _math500,
    "dapo_math": _dapo,
    "deepscaler": _deepscaler,
    "conversational": _conversational,
    "mbpp": _mbpp,
    "humaneval": _humaneval,
    "apps": _apps,
    "taco": _taco,
    "livecodebench": _livecodebench,
    "deepcoder": _deepcoder,
    "open_r1_code": _open_r1_code,
}
IO_CODE_LAYOUTS = {  # layout file -> (recognized layout, the reward's layout of its tests)
    "apps": ("APPS / TACO", "apps"),
    "taco": ("APPS / TACO", "apps"),
    "livecodebench": ("LiveCodeBench", "livecodebench"),
    "deepcoder": ("DeepCoder", "livecodebench"),
    "open_r1_code": ("open-r1 verifiable coding", "open-r1"),
}
CHAT_LAYOUTS = {"dapo_math", "conversational"}  # prompts are chat messages: they need a chat template


def write_layout(folder: str, layout: str, num_train: int = 64, num_test: int = 48) -> str:
    """``folder/<layout>/train.jsonl`` and ``test.jsonl`` (the demo's problems in ``layout``); returns the folder."""
    train, test = make_problems(DemoTaskConfig(num_train=num_train, num_eval=num_test))
    path = os.path.join(folder, layout)
    os.makedirs(path, exist_ok=True)
    for split, data in (("train", train), ("test", test)):
        with open(os.path.join(path, f"{split}.jsonl"), "w") as f:
            for prompt, answer in zip(data["prompt"], data["answer"], strict=True):
                f.write(json.dumps(LAYOUTS[layout](prompt, answer)) + "\n")
    return path
