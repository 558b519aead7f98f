"""Input/output code tests: each layout (APPS/TACO, LiveCodeBench/DeepCoder, open-r1) with correct, wrong, partially
correct, timing-out, EOF-reading and debug-printing solutions; call-based problems; values that are not tests."""

from __future__ import annotations

import json

import pytest

from trl_ext.rewards import checkers
from trl_ext.rewards.code import CodeReward, read_tests
from trl_ext.rewards.io_tests import IOTests, parse_io_tests

# the problem: read n, print 2n; four cases
INPUTS = ["1\n", "2\n", "3\n", "10\n"]
OUTPUTS = ["2\n", "4\n", "6\n", "20\n"]
LAYOUT_VALUES = {
    "apps": json.dumps({"inputs": INPUTS, "outputs": OUTPUTS}),
    "livecodebench": json.dumps(
        [{"input": i, "output": o, "testtype": "stdin"} for i, o in zip(INPUTS, OUTPUTS, strict=True)]
    ),
    "open-r1": {
        "language": "python",
        "test_cases": [
            {"input": i, "output": o, "type": "stdin_stdout"} for i, o in zip(INPUTS, OUTPUTS, strict=True)
        ],
    },
}


def fenced(code: str) -> str:
    return f"```python\n{code}```"


# (solution, reward by hand: passed cases / 4, status)
SOLUTIONS = {
    "correct": ("print(int(input()) * 2)\n", 1.0, "ok"),
    "main_guard": ("def main():\n    print(int(input()) * 2)\nif __name__ == '__main__':\n    main()\n", 1.0, "ok"),
    "read_all": ("import sys\nprint(int(sys.stdin.read()) * 2)\n", 1.0, "ok"),
    "trailing_spaces": ("print(str(int(input()) * 2) + '   ')\n", 1.0, "ok"),
    "wrong": ("print(int(input()) * 3)\n", 0.0, "ok"),
    "partial": ("n = int(input())\nprint(n * 2 if n < 3 else n)\n", 0.5, "ok"),  # cases 1 and 2
    "times_out_on_3": ("n = int(input())\nwhile n == 3:\n    pass\nprint(n * 2)\n", 0.75, "timeout"),
    "reads_past_eof": ("n = int(input())\nextra = input()\nprint(n * 2)\n", 0.0, "ok"),  # EOFError, no hang
    "debug_prints": ("n = int(input())\nprint('n =', n)\nprint(n * 2)\n", 0.0, "ok"),
    "raises": ("raise ValueError('no')\n", 0.0, "ok"),
    "exit_after_answer": ("import sys\nprint(int(input()) * 2)\nsys.exit(0)\n", 1.0, "ok"),
    "exit_builtin": ("print(int(input()) * 2)\nexit()\n", 1.0, "ok"),
}


@pytest.fixture(scope="module")
def reward():
    return CodeReward(timeout=0.5, num_workers=2, program_timeout=10.0)


@pytest.mark.parametrize("layout", list(LAYOUT_VALUES))
def test_stdin_layouts_score_every_kind_of_solution(reward, layout):
    names = list(SOLUTIONS)
    metrics, extra = {}, {}
    out = reward(
        completions=[fenced(SOLUTIONS[name][0]) for name in names],
        tests=[LAYOUT_VALUES[layout]] * len(names),
        log_metric=metrics.__setitem__,
        log_extra=extra.__setitem__,
    )
    assert dict(zip(names, out, strict=True)) == {name: SOLUTIONS[name][1] for name in names}
    assert dict(zip(names, extra["code_status"], strict=True)) == {name: SOLUTIONS[name][2] for name in names}
    assert metrics["code/timeout_frac"] == 1 / len(names)
    eof = reward.last_results[names.index("reads_past_eof")]
    assert eof.errors == ("error",) * 4  # EOFError ends each case at once: not a timeout


def test_the_layout_is_recognized_and_nameable():
    assert read_tests(LAYOUT_VALUES["apps"]).layout == "apps"
    assert read_tests(LAYOUT_VALUES["livecodebench"]).layout == "livecodebench"
    assert read_tests(LAYOUT_VALUES["open-r1"]).layout == "open-r1"
    assert read_tests(LAYOUT_VALUES["open-r1"]["test_cases"]).layout == "open-r1"  # the bare list of cases
    assert read_tests(LAYOUT_VALUES["apps"], "livecodebench") is None  # named layout, value in another one
    assert read_tests(LAYOUT_VALUES["livecodebench"], "apps") is None
    assert read_tests('["assert f(1) == 1"]') == ["assert f(1) == 1"]  # JSON list of asserts stays asserts
    with pytest.raises(ValueError, match="tests_format"):
        CodeReward(tests_format="mbpp", num_workers=1)


def test_numbers_by_each_checkers_rule():
    """APPS accepts numbers within np.allclose's tolerance; LiveCodeBench wants equal Decimals; open-r1 equal text."""
    assert checkers.apps_stdout("0.3333333333\n", "0.333333")  # |diff| 3.3e-7 <= 1e-8 + 1e-5 * 0.333333
    assert not checkers.apps_stdout("0.34\n", "0.333333")  # 6.7e-3 > 3.3e-6, and 0.34 vs 0.333 after rounding
    assert not checkers.livecodebench_stdout("0.3333333333", "0.333333")
    assert checkers.livecodebench_stdout("1.50 2", "1.5 2.0")  # Decimal('1.50') == Decimal('1.5')
    assert not checkers.open_r1_stdout("1.50", "1.5")
    assert checkers.apps_stdout("a  b\n\n c\n", "a b\nc")  # tokens; empty lines dropped
    assert not checkers.apps_stdout("b a", "a b")  # order counts here (APPS's set check would pass it)
    assert not checkers.livecodebench_stdout("4\n\n", "4\n5")
    assert checkers.open_r1_stdout("  4  \n5\n\n", "4\n5")
    assert not checkers.open_r1_stdout("4\n5\ndebug", "4\n5")  # open-r1's zip would ignore the extra line
    assert checkers.apps_call([3, 1], [[3, 1]]) and checkers.apps_call(7, [7]) and not checkers.apps_call(7, [8])
    assert checkers.livecodebench_call([1, 2], [1, 2]) and not checkers.livecodebench_call([[1, 2]], [1, 2])


def test_apps_rounding_check():
    # APPS's last check rounds numbers to 3 decimals: 0.3334 and 0.333333 round to 0.333 and 0.333
    assert round(0.3334, 3) == round(0.333333, 3)
    assert checkers.apps_stdout("0.3334", "0.333333")
    assert not checkers.apps_stdout("0.3336", "0.333333")  # 0.334 vs 0.333


CALL_APPS = json.dumps({"fn_name": "add", "inputs": [[1, 2], [3, 4], [0, 0]], "outputs": [[3], [7], [0]]})
CALL_LCB = json.dumps(
    [
        {"input": f"{a}\n{b}", "output": str(a + b), "testtype": "functional", "metadata": {"func_name": "add"}}
        for a, b in ((1, 2), (3, 4), (0, 0))
    ]
)
CALL_SOLUTIONS = {
    "function": ("def add(a, b):\n    return a + b\n", 1.0),
    "leetcode_class": ("class Solution:\n    def add(self, a, b):\n        return a + b\n", 1.0),
    "wrong": ("def add(a, b):\n    return a - b\n", 1 / 3),  # only add(0, 0) is right
    "prints_but_returns_right": ("def add(a, b):\n    print('debug', a)\n    return a + b\n", 1.0),
    "times_out_on_3": ("def add(a, b):\n    while a == 3:\n        pass\n    return a + b\n", 2 / 3),
    "reads_stdin": ("def add(a, b):\n    return int(input()) + a + b\n", 0.0),  # EOF at once
    "missing_function": ("def plus(a, b):\n    return a + b\n", 0.0),
    "unserializable": ("def add(a, b):\n    return {a + b}\n", 0.0),
    "main_block_does_not_run": ("def add(a, b):\n    return a + b\nif __name__ == '__main__':\n    1 / 0\n", 1.0),
}


@pytest.mark.parametrize("tests", [CALL_APPS, CALL_LCB], ids=["apps", "livecodebench"])
def test_call_based_cases(reward, tests):
    names = list(CALL_SOLUTIONS)
    out = reward(completions=[fenced(CALL_SOLUTIONS[n][0]) for n in names], tests=[tests] * len(names))
    assert dict(zip(names, out, strict=True)) == {n: CALL_SOLUTIONS[n][1] for n in names}


NOT_TESTS = [
    '{"foo": 1}',  # JSON text in no known layout
    {"a": 1},  # a dict
    [{"in": "1", "out": "2"}],  # cases with unknown fields
    json.dumps({"inputs": ["1"], "outputs": ["2", "3"]}),  # lengths differ
    json.dumps({"inputs": [], "outputs": []}),
    {"language": "cpp", "test_cases": [{"input": "1", "output": "2", "type": "stdin_stdout"}]},
    [{"input": "1", "output": "2", "testtype": "functional"}],  # functional without a function name
    [{"input": "1", "output": "2", "testtype": "stdin"}, {"input": "1", "output": "2", "testtype": "functional"}],
    '{"inputs": ["1"], "outputs": ',  # broken JSON: not an assert program either
]


def test_values_that_are_not_tests_score_none_and_are_counted(reward):
    metrics = {}
    any_program = fenced("print(2)\n")
    out = reward(completions=[any_program] * len(NOT_TESTS), tests=NOT_TESTS, log_metric=metrics.__setitem__)
    assert out == [None] * len(NOT_TESTS)
    assert metrics["code/unscorable_frac"] == 1.0


def test_apps_json_is_no_longer_a_test_program_that_passes_anything(reward):
    """The bug of the issue: APPS JSON in the tests column ran as one test program, so any program scored 1.0."""
    wrong = fenced("import sys\nprint(sys.stdin.read()[::-1])\n")
    assert reward(completions=[wrong], tests=[LAYOUT_VALUES["apps"]]) == [0.0]


def test_output_cap_and_case_limits():
    reward = CodeReward(timeout=1.0, max_output_kb=1, num_workers=1)
    big = fenced("print('x' * 5000)\nprint(int(input()) * 2)\n")
    assert reward(completions=[big], tests=[LAYOUT_VALUES["apps"]]) == [0.0]
    assert reward.last_results[0].errors == ("output_limit",) * 4
    memory = CodeReward(timeout=2.0, memory_mb=256, num_workers=1)
    hog = fenced("n = int(input())\nx = bytearray(2**30) if n == 2 else 0\nprint(n * 2)\n")
    assert memory(completions=[hog], tests=[LAYOUT_VALUES["apps"]]) == [0.75]
    assert memory.last_results[0].errors[1] == "error"  # MemoryError in that case only


def test_more_cases_than_open_files():
    """Every case runs, however many: the runner once leaked a descriptor per case and crashed past max_open_files."""
    reward = CodeReward(timeout=1.0, max_open_files=16, num_workers=1)
    n = 40
    tests = {"inputs": [f"{i}\n" for i in range(n)], "outputs": [f"{2 * i}\n" for i in range(n)]}
    assert reward(completions=[fenced(SOLUTIONS["correct"][0])], tests=[tests]) == [1.0]
    assert reward.last_results[0].errors == ("ok",) * n


def test_parse_io_tests_fields():
    tests = parse_io_tests(CALL_LCB)
    assert tests == IOTests("livecodebench", ("[1, 2]", "[3, 4]", "[0, 0]"), (3, 7, 0), "add")
    apps = parse_io_tests({"inputs": [["1", "2"]], "outputs": [["3", "4"]]})
    assert apps == IOTests("apps", ("1\n2",), ("3\n4",))  # lists of lines joined, as APPS's run_test does
    single = parse_io_tests({"fn_name": "f", "inputs": [5], "outputs": [6]})
    assert single.inputs == ("[5]",)
    with pytest.raises(ValueError, match="layout"):
        parse_io_tests([], "taco")
