"""Code reward correctness: right, wrong, partial, syntax error, timeout, and the test/code formats it accepts."""

from __future__ import annotations

import pickle
import time

import pytest

from trl_ext.rewards.code import CodeReward, extract_code, normalize_tests

ADD = "```python\ndef add(a, b):\n    return a + b\n```"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]


@pytest.fixture(scope="module")
def reward():
    return CodeReward(timeout=1.0, num_workers=2)


# (completion, tests, expected reward, expected status)
CASES = [
    (ADD, TESTS, 1.0, "ok"),
    ("```python\ndef add(a, b):\n    return a - b\n```", TESTS, 0.0, "ok"),  # wrong
    (
        "```python\ndef add(a, b):\n    return a + b if a > 0 else a\n```",
        TESTS,
        2 / 3,
        "ok",
    ),  # partially right: add(-1, 1) fails
    ("```python\ndef add(a, b)\n    return a + b\n```", TESTS, 0.0, "syntax_error"),
    ("```python\ndef add(a, b):\n    while a > 1:\n        pass\n    return a + b\n```", TESTS, 2 / 3, "timeout"),
    ("```python\nraise RuntimeError('at import')\n```", TESTS, 0.0, "solution_error"),
    ("```python\nimport numpy_does_not_exist\n```", TESTS, 0.0, "solution_error"),
    # the model's own "main" does not run (the solution is imported as a module) and stdin is empty
    (
        "```python\ndef add(a, b):\n    return a + b\nif __name__ == '__main__':\n    print(add(*map(int, input().split())))\n```",
        TESTS,
        1.0,
        "ok",
    ),
    ("def add(a, b):\n    return a + b", TESTS, 1.0, "ok"),  # no fences: the whole text
    ("<think>\nsimple\n</think>\n" + ADD, TESTS, 1.0, "ok"),
    ("<think>\n" + ADD, TESTS, 0.0, "no_code"),  # reasoning never closed
    ("Here is the code:\n```js\nfunction add(a, b) { return a + b }\n```", TESTS, 0.0, "no_code"),
    ("```python\n```", TESTS, 0.0, "no_code"),
    ([{"role": "assistant", "content": ADD}], TESTS, 1.0, "ok"),
    (None, TESTS, 0.0, "no_code"),
    # tests as a program string: each top-level assert closes one test, set-up lines belong to the next assert
    (
        ADD,
        "import math\nassert add(1, 2) == 3\nx = add(2, 2)\nassert x == 5\nassert math.isclose(add(0.1, 0.2), 0.3)",
        2 / 3,
        "ok",
    ),
    (
        ADD,
        "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\ncheck(add)",
        1.0,
        "ok",
    ),
    # tests that cannot be used: the example cannot be scored
    (ADD, None, None, "unscorable"),
    (ADD, [], None, "unscorable"),
    (ADD, "assert add(1, 2) ==", None, "unscorable"),
]


@pytest.mark.parametrize(("completion", "tests", "expected", "status"), CASES)
def test_code_table(reward, completion, tests, expected, status):
    out = reward(prompts=["p"], completions=[completion], tests=[tests], completion_ids=[[1]], trainer_state=None)
    assert out == [pytest.approx(expected) if expected is not None else None]
    result = reward.last_results[0]
    assert (result.status if result is not None else ("no_code" if out == [0.0] else "unscorable")) == status


def test_batch_metrics_and_status_column(reward):
    metrics, extra = {}, {}
    completions = [ADD, "```python\nwhile True: pass\n```", "```python\ndef add(\n```", "```python\nadd = 1\n```"]
    out = reward(
        completions=completions,
        tests=[TESTS] * 4,
        log_metric=lambda name, value: metrics.__setitem__(name, value),
        log_extra=lambda column, values: extra.__setitem__(column, values),
    )
    assert out == [1.0, 0.0, 0.0, 0.0]
    assert metrics == {
        "code/timeout_frac": 0.25,
        "code/error_frac": 0.25,
        "code/sandbox_error_frac": 0.0,
        "code/unscorable_frac": 0.0,
    }
    assert extra == {"code_status": ["ok", "timeout", "syntax_error", "ok"]}


def test_runs_in_parallel():
    """Eight programs that each wait 0.5 s take about 1 s on four workers, not 4 s."""
    reward = CodeReward(timeout=2.0, num_workers=4)
    code = "```python\nimport time\ntime.sleep(0.5)\ndef f():\n    return 1\n```"
    start = time.monotonic()
    out = reward(completions=[code] * 8, tests=[["assert f() == 1"]] * 8)
    elapsed = time.monotonic() - start
    assert out == [1.0] * 8
    assert elapsed < 3.0, elapsed


def test_extract_code():
    text = "a\n```python\nx = 1\n```\nthen\n```py\ny = 2\n```\n```bash\nls\n```"
    assert extract_code(text) == "y = 2\n"
    assert extract_code(text, "all") == "x = 1\n\n\ny = 2\n"
    assert extract_code("```python\nx = 1") == "x = 1"  # truncated fence
    assert extract_code("<think>```python\nbad = 1\n```</think>```python\ngood = 1\n```") == "good = 1\n"
    with pytest.raises(ValueError, match="code_block"):
        extract_code("x", "first")


def test_normalize_tests():
    assert normalize_tests(["assert f()", "", None]) == ["assert f()"]
    assert normalize_tests("x = 1\nassert x\ny = 2\nassert y\nprint(3)") == [
        "x = 1\nassert x",
        "y = 2\nassert y\nprint(3)",
    ]
    assert normalize_tests("assert (\n  1\n)\nassert 2") == ["assert (\n  1\n)", "assert 2"]
    assert normalize_tests("check(f)") == ["check(f)"]
    # programs that check nothing are not tests: they would pass any solution (JSON text is valid Python)
    for bad in (None, "", "  ", "assert (", 3, [], '{"inputs": ["1"], "outputs": ["2"]}', "x = 1"):
        assert normalize_tests(bad) is None


def test_pickle_round_trip(reward):
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == "code"
    assert clone(completions=[ADD], tests=[TESTS]) == [1.0]
