"""Math accuracy: a table of equivalent forms, extraction modes, and timeouts that hold off the main thread."""

from __future__ import annotations

import pickle
import sys
import threading
import time

import pytest

from trl_ext.rewards.extract import boxed_contents, braces_balanced, extract_answer, gold_answer, last_number
from trl_ext.rewards.math import MathAccuracy, _Worker, reference_unscorable, signals_usable

# (reference, completion, expected reward, options)
CASES = [
    # plain integers, each extraction convention
    ("42", "The answer is 42.", 1.0, {}),
    ("42", "Adding them: 40 + 2.\n#### 42", 1.0, {}),
    ("42", "so we get $\\boxed{42}$", 1.0, {}),
    ("42", "After adding, 40 + 2 = 42", 1.0, {}),
    ("42", "**Final Answer:** **42**", 1.0, {}),
    ("42", [{"role": "assistant", "content": "\\boxed{42}"}], 1.0, {}),
    # fractions and decimals
    ("\\frac{1}{2}", "\\boxed{0.5}", 1.0, {}),
    ("0.5", "\\boxed{\\frac{1}{2}}", 1.0, {}),
    ("\\frac{1}{2}", "The answer is 1/2.", 1.0, {}),
    ("\\frac{3}{4}", "\\boxed{\\dfrac{3}{4}}", 1.0, {}),
    ("0.75", "\\boxed{3/4}", 1.0, {}),
    ("1.5", "\\boxed{1.50}", 1.0, {}),
    ("\\frac{1}{3}", "\\boxed{0.33}", 0.0, {}),
    # percentages
    ("50\\%", "The answer is 50%.", 1.0, {}),
    ("50", "\\boxed{50\\%}", 1.0, {}),
    # thousands separators, currency, scientific notation, units
    ("1000", "#### 1,000", 1.0, {}),
    ("1,000", "\\boxed{1000}", 1.0, {}),
    ("18", "She earns $18 a day.\n#### $18", 1.0, {}),
    ("1500", "The answer is 1.5e3", 1.0, {}),
    ("5", "\\boxed{5 \\text{ cm}}", 1.0, {}),
    ("5", "The answer is 5 apples.", 1.0, {}),
    # negative numbers
    ("-3", "\\boxed{-3}", 1.0, {}),
    ("-3", "\\boxed{3}", 0.0, {}),
    ("-\\frac{1}{4}", "\\boxed{\\frac{-1}{4}}", 1.0, {}),
    ("-0.25", "The answer is -1/4", 1.0, {}),
    # LaTeX: radicals, polynomials, constants, equations, sets
    ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\frac{1}{\\sqrt{2}}}", 1.0, {}),
    ("2\\sqrt{3}", "\\boxed{\\sqrt{12}}", 1.0, {}),
    ("x^2+2x+1", "\\boxed{(x+1)^2}", 1.0, {}),
    ("\\pi", "\\boxed{\\pi}", 1.0, {}),
    ("\\pi", "\\boxed{3.14}", 0.0, {}),
    ("3", "\\boxed{x = 3}", 1.0, {}),
    ("\\infty", "\\boxed{\\infty}", 1.0, {}),
    ("2, -2", "\\boxed{\\pm 2}", 1.0, {}),
    # multiple boxed answers: the last one counts by default, the set of all with multiple_boxed="all"
    ("4", "\\boxed{3}. Wait, that is wrong: \\boxed{4}", 1.0, {}),
    ("3", "\\boxed{3} or maybe \\boxed{4}", 0.0, {}),
    ("2, -2", "x = \\boxed{2} or x = \\boxed{-2}", 1.0, {"multiple_boxed": "all"}),
    ("2", "\\boxed{2} or \\boxed{3}", 0.0, {"multiple_boxed": "all"}),
    ("7", "\\boxed{7}, and again \\boxed{7}", 1.0, {"multiple_boxed": "all"}),
    # think blocks: only the text after </think> counts; an unclosed block has no answer
    ("42", "<think>maybe 41</think>The answer is 42", 1.0, {}),
    ("42", "<think>The answer is 42", 0.0, {}),
    ("42", "<think>The answer is 42</think>I cannot say.", 0.0, {}),
    # no answer, nonsense, malformed output
    ("42", "", 0.0, {}),
    ("42", "I don't know.", 0.0, {}),
    ("42", "\\boxed{banana}", 0.0, {}),
    ("42", "\\boxed{", 0.0, {}),
    ("42", "}}}{{{\\\\$$$ ####", 0.0, {}),
    ("42", None, 0.0, {}),
    ("42", 12345, 0.0, {}),
    ("42", "9" * 5000, 0.0, {}),
    # references: full GSM8K and MATH solutions, and unparseable references (None: cannot be scored)
    ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "The answer is 72", 1.0, {}),
    ("so the result is $\\boxed{\\frac{1}{3}}$.", "\\boxed{1/3}", 1.0, {}),
    ("", "\\boxed{42}", None, {}),
    ("\\boxed{}", "\\boxed{42}", None, {}),
    # unscorable references (reference_unscorable): broken LaTeX or nothing to compare; text answers still compare
    ("unparseable_latex", "\\boxed{unparseable_latex}", None, {}),  # markup, no expression: only a copy would score
    ("\\frac{", "\\boxed{42}", None, {}),  # unbalanced braces
    ("2\\sqrt{", "\\boxed{2}", None, {}),  # unbalanced, though math-verify reads the prefix 2
    ("???", "\\boxed{???}", None, {}),  # no letter, digit or math symbol
    ("Paris", "The answer is Paris.", 1.0, {}),
    ("Paris", "\\boxed{London}", 0.0, {}),
    ("C++", "\\boxed{C++}", 1.0, {}),  # no expression, no markup: compared as text
    ("C++", "\\boxed{Java}", 0.0, {}),
    # extraction modes
    ("42", "The answer is 42", 0.0, {"extraction": "boxed"}),
    ("42", "\\boxed{42}", 0.0, {"extraction": "gsm8k"}),
    ("42", "#### 42", 1.0, {"extraction": "gsm8k"}),
    ("42", "Answer: 42", 1.0, {"extraction": "answer_is"}),
    ("42", "I got 41, then fixed it to 42", 1.0, {"extraction": "last_number"}),
    ("42", "\\boxed{41} but 42", 1.0, {"extraction": ["last_number", "boxed"]}),
    ("42", "$\\boxed{42}$", 1.0, {"extraction": "math_verify"}),  # exactly trl.rewards.accuracy_reward
    ("42", "42", 0.0, {"extraction": "math_verify"}),  # TRL requires an anchor (boxed, "answer is", ...)
]


@pytest.mark.parametrize(("solution", "completion", "expected", "options"), CASES)
def test_math_table(solution, completion, expected, options):
    reward = MathAccuracy(**options)
    assert reward(prompts=["q"], completions=[completion], solution=[solution]) == [expected]


def test_table_is_large_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize(
    ("gold", "parsed", "unscorable"),
    [
        ("$42$", (42, "42"), False),
        ("$Paris$", (object(), "Paris"), False),  # any expression: scored
        ("$C++$", ("C++",), False),  # text only, no markup, has letters: compared as text
        ("$∞$", ("∞",), False),  # a math symbol is comparable
        ("$x^$", ("x^",), True),  # markup, no expression
        ("$unparseable_latex$", ("unparseable_latex",), True),
        ("$2\\sqrt{$", (2, "2\\sqrt{"), True),  # unbalanced, whatever was read
        ("$---$", ("---",), True),  # punctuation only
        ("$$", (), True),  # nothing parsed
    ],
)
def test_reference_unscorable_rule(gold, parsed, unscorable):
    assert reference_unscorable(gold, parsed) is unscorable


def test_braces_balanced_skips_escaped_braces():
    assert braces_balanced("\\frac{1}{2}") and braces_balanced("\\{1, 2\\}") and braces_balanced("\\{")
    assert not braces_balanced("\\frac{") and not braces_balanced("}{") and not braces_balanced("a}")


def test_batch_with_trl_kwargs_and_metrics():
    logged = {}
    reward = MathAccuracy()
    out = reward(
        prompts=["a", "b", "c", "d"],
        completions=["\\boxed{1}", "\\boxed{2}", "nothing", "\\boxed{4}"],
        answer=["1", "3", "3", ""],  # GSM8K-style column name: used when there is no `solution` column
        completion_ids=[[1], [2], [3], [4]],
        trainer_state=None,
        log_extra=lambda column, values: None,
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert out == [1.0, 0.0, 0.0, None]
    assert reward.last_statuses == ["correct", "wrong", "no_answer", "gold_unparseable"]
    assert logged == {"accuracy/no_answer_frac": 0.25, "accuracy/timeout_frac": 0.0, "accuracy/unscorable_frac": 0.25}


def test_missing_column_names_it():
    with pytest.raises(ValueError, match="'solution'"):
        MathAccuracy(solution_column="solution")(prompts=["q"], completions=["1"], answer=["1"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"extraction": "boxd"}, "extraction strategy"),
        ({"timeout_backend": "thread"}, "timeout_backend"),
        ({"parse_timeout": 0.5}, "parse_timeout"),
        ({"multiple_boxed": "first"}, "multiple_boxed"),
    ],
)
def test_bad_options_fail_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        MathAccuracy(**options)


def test_extraction_helpers():
    assert boxed_contents("\\boxed{\\frac{a}{b}} and \\fbox{2} and \\boxed 7 and \\boxed{x") == [
        "\\frac{a}{b}",
        "2",
        "7",
    ]
    assert boxed_contents("\\boxed{\\{1\\}}") == ["\\{1\\}"]
    assert last_number("from 3 to -4.5 or 1,250 then 3/4") == "3/4"
    assert last_number("version 2.0.1 has 12%") == "12%"
    assert extract_answer("\\boxed{1}\n#### 2") == ("$1$", "boxed")
    assert extract_answer("#### 2\nThe answer is 3") == ("$2$", "gsm8k")
    assert extract_answer("the answer is probably 5 apples") == ("$5 apples$", "answer_is")
    assert gold_answer("work... #### 1,000") == "$1,000$"


def test_extraction_is_linear_on_pathological_text():
    text = "\\boxed{" * 20000 + "answer is " * 20000 + "1," * 20000
    start = time.monotonic()
    extract_answer(text)
    assert time.monotonic() - start < 2.0


def test_backend_choice_follows_the_thread():
    reward = MathAccuracy()
    assert signals_usable() and reward.backend() == "signal"
    seen = {}
    thread = threading.Thread(target=lambda: seen.update(usable=signals_usable(), backend=reward.backend()))
    thread.start()
    thread.join()
    assert seen == {"usable": False, "backend": "process"}


def test_signal_backend_refuses_a_thread():
    reward = MathAccuracy(timeout_backend="signal")
    errors = []

    def call():
        try:
            reward(completions=["\\boxed{1}"], solution=["1"])
        except RuntimeError as error:
            errors.append(str(error))

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert errors and "main thread" in errors[0]


def test_off_main_thread_scores_like_main_thread_and_does_not_hang():
    """In a thread, TRL's accuracy_reward runs math-verify without timeouts; we score in a helper process instead.

    ``9^{9^{9^9}}`` makes sympy's comparison run for hours without a timeout; here it is cut at verify_timeout.
    """
    completions = ["\\boxed{0.5}", "The answer is 3", "#### 7", "\\boxed{9^{9^{9^{9}}}}"]
    solutions = ["\\frac{1}{2}", "4", "7", "5"]
    reward = MathAccuracy(parse_timeout=1, verify_timeout=1, num_workers=2)
    main = reward(completions=completions, solution=solutions)
    out = {}

    def call():
        start = time.monotonic()
        out["rewards"] = reward(completions=completions, solution=solutions)
        out["seconds"] = time.monotonic() - start
        out["statuses"] = list(reward.last_statuses)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(timeout=60)
    reward.close()
    assert not thread.is_alive()
    assert main == out["rewards"] == [1.0, 0.0, 1.0, 0.0]
    assert out["statuses"][3] == "timeout"
    assert out["seconds"] < 30  # helper start-up (sympy import) plus one 1-second timeout, on a loaded 2-core box


def test_helper_that_hangs_in_c_is_killed_and_replaced():
    """A hang that alarms cannot interrupt (here: SIGALRM blocked) is cut by the parent's hard deadline."""
    hang = (
        "import json, signal, sys, time\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
        "print(json.dumps({'ready': True}), flush=True)\n"
        "for line in sys.stdin:\n"
        "    if 'hang' in line: time.sleep(600)\n"
        "    print(json.dumps({'reward': 1.0, 'status': 'correct'}), flush=True)\n"
    )
    worker = _Worker([sys.executable, "-c", hang])
    assert worker.request({"text": "fine"}, timeout=30) == {"reward": 1.0, "status": "correct"}
    first = worker.proc.pid
    start = time.monotonic()
    assert worker.request({"text": "hang"}, timeout=0.5) is None
    assert time.monotonic() - start < 5
    assert worker.proc is None
    assert worker.request({"text": "fine again"}, timeout=30) == {"reward": 1.0, "status": "correct"}
    assert worker.proc.pid != first
    worker.kill()


def test_helper_with_a_broken_stdin_scores_none_instead_of_raising():
    deaf = "import os, time\nos.close(0)\nprint('{\"ready\": true}', flush=True)\ntime.sleep(30)\n"
    worker = _Worker([sys.executable, "-c", deaf])
    assert worker.request({"text": "x"}, timeout=5) is None
    assert worker.proc is None


def test_pickles_without_its_helpers():
    reward = MathAccuracy(timeout_backend="process", extraction=["boxed", "gsm8k"], name="acc_boxed")
    assert reward(completions=["\\boxed{2}"], solution=["2"]) == [1.0]
    clone = pickle.loads(pickle.dumps(reward))
    reward.close()
    assert clone.__name__ == "acc_boxed" and clone._workers is None
    assert clone(completions=["#### 3"], solution=["3"]) == [1.0]
    clone.close()
