"""Dataset layouts -> the columns the trainers read: ``prompt`` and the reference (``answer`` or ``tests``).

A layout is recognized from the column names (the first fitting row of ``_KNOWN``; docs/YOUR_DATA.md), or mapped
with ``dataset_prompt_column`` / ``dataset_answer_column``. Input/output tests are written to ``tests`` as JSON text
in the dataset's own layout, judged by the ``code`` reward with that dataset's checker rule (LiveCodeBench's pickled
``private_test_cases`` are not read). A reference that cannot be read becomes ``None``: unscorable, never 0.0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from datasets import Dataset

from trl_ext.errors import UserError, did_you_mean
from trl_ext.rewards.extract import boxed_contents, gsm8k_answer
from trl_ext.scoring import is_conversational

MATH_REWARDS = ("accuracy",)
CODE_REWARDS = ("code",)


@dataclass(frozen=True)
class Layout:
    """How one dataset layout maps its source columns (a dotted path reaches nested fields) to ``prompt`` and a
    reference column; ``reference_rule`` says how the reference is read (``"final answer"``, ``"after '####'"``,
    ``"last \\boxed{}"``, ``"asserts"``, ``"check(entry_point)"``); ``task``: math, code or arithmetic (the demo)."""

    name: str
    prompt_column: str
    reference_column: str | None
    reference_rule: str = "final answer"
    task: str = "math"
    extra_columns: tuple[str, ...] = field(default_factory=tuple)  # other columns the layout requires
    solution_column: str | None = None  # a worked solution, SFT's completion (GSM8K's answer, MATH's solution)

    @property
    def required_columns(self) -> set[str]:
        """The columns a dataset must have to be in this layout (the top level of a dotted path)."""
        sources = [self.prompt_column, self.reference_column, *self.extra_columns]
        return {path.split(".")[0] for path in sources if path is not None}

    @property
    def target_column(self) -> str:
        """The column the reference is written to: ``answer`` (math rewards) or ``tests`` (the code reward)."""
        return "tests" if self.task == "code" else "answer"

    @property
    def task_rewards(self) -> tuple[str, ...]:
        """The registry names of the reward that fits the layout, the default when no ``reward_funcs`` is given."""
        return {"code": CODE_REWARDS, "arithmetic": ("arithmetic",)}.get(self.task, MATH_REWARDS)

    def describe(self) -> str:
        """``"GSM8K layout: question -> prompt, answer after '####' -> reference"`` (the opening line's data part)."""
        prompt = "prompt" if self.prompt_column == "prompt" else f"{self.prompt_column} -> prompt"
        if self.reference_column is None:
            return f"{self.name} layout: {prompt}, no reference column"
        rule = "" if self.reference_rule in ("final answer", "as is") else f" {self.reference_rule}"
        target = "tests" if self.task == "code" else "reference"
        return f"{self.name} layout: {prompt}, {self.reference_column}{rule} -> {target}"


# The recognized layouts, tried in order: the first whose required columns the dataset has.
_OPEN_R1_CODE = Layout(
    "open-r1 verifiable coding",
    "problem",
    "verification_info",
    "(stdin/stdout, open-r1 checker)",
    task="code",
    solution_column="gold_standard_solution",
)
IO_CODE_LAYOUTS = ("APPS / TACO", "LiveCodeBench", "DeepCoder", "open-r1 verifiable coding")
_KNOWN: list[Layout] = [
    Layout("APPS / TACO", "question", "input_output", "(stdin/stdout or call-based, APPS checker)", task="code"),
    Layout(
        "LiveCodeBench",
        "question_content",
        "public_test_cases",
        "(stdin or functional, LiveCodeBench checker)",
        task="code",
    ),
    Layout("DeepCoder", "problem", "tests", "(LiveCodeBench or APPS checker)", task="code"),
    _OPEN_R1_CODE,
    replace(_OPEN_R1_CODE, prompt_column="prompt"),
    Layout("DAPO-Math-17k", "prompt", "reward_model.ground_truth", "final answer"),
    Layout("GSM8K", "question", "answer", "after '####'", solution_column="answer"),
    Layout(
        "problem + answer (MATH-500 / DeepScaleR / OpenR1-Math)",
        "problem",
        "answer",
        "final answer",
        solution_column="solution",
    ),
    Layout("MATH (problem + solution)", "problem", "solution", "last \\boxed{}", solution_column="solution"),
    Layout("MBPP", "text", "test_list", "asserts", task="code", solution_column="code"),  # test_setup_code optional
    Layout("HumanEval", "prompt", "test", "check(entry_point)", task="code", extra_columns=("entry_point",)),
    Layout("prompt + answer", "prompt", "answer", "final answer"),
    Layout("prompt + solution", "prompt", "solution", "final answer"),
    Layout("prompt + tests", "prompt", "tests", "asserts", task="code"),
]

_PROMPT_CANDIDATES = ("prompt", "problem", "question", "query", "instruction", "input", "text", "messages")


def get_path(row: dict[str, Any], path: str) -> Any:
    """``row["a"]["b"]`` for ``path="a.b"`` (a dict, or a JSON text of one, at each level); None when absent."""
    value: Any = row
    for part in path.split("."):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return None
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _check_column(path: str, columns: list[str], flag: str) -> None:
    top = path.split(".")[0]
    if top not in columns:
        hint = did_you_mean(top, columns, cutoff=0.5)
        raise UserError(f"{flag}={path!r}: the dataset has no column {top!r} (columns: {columns}).{hint}")


def detect_layout(
    dataset: Dataset, prompt_column: str | None = None, answer_column: str | None = None, strict: bool = True
) -> Layout:
    """The layout of ``dataset``: the flags' mapping when given, else the first recognized layout of ``_KNOWN``. When
    nothing fits, a ``UserError`` naming the flags, unless ``strict=False`` (SFT text, DPO pairs) keeps it as it is."""
    columns = list(dataset.column_names)
    known = next((layout for layout in _KNOWN if layout.required_columns <= set(columns)), None)
    if prompt_column is None and answer_column is None:
        if known is not None:
            return known
        if "prompt" in columns:  # TRL's own layout, reference unknown (a custom reward may need none)
            return Layout("prompt only", "prompt", None)
        if not strict:
            return Layout("as given", "prompt", None)
        guess = next((c for c in _PROMPT_CANDIDATES if c in columns), columns[0] if columns else "<column>")
        raise UserError(
            f"the dataset's layout is not one trl-ext recognizes (columns: {columns}). Name its columns: "
            f"--dataset_prompt_column {guess} --dataset_answer_column <column with the final answer> (a dotted path "
            "reaches a nested field, e.g. reward_model.ground_truth), or the same keys in the YAML config."
        )
    if prompt_column is not None:
        _check_column(prompt_column, columns, "dataset_prompt_column")
    if answer_column is not None:
        _check_column(answer_column, columns, "dataset_answer_column")
    base = known or Layout("custom", prompt_column or "prompt", None)
    if prompt_column is None and "prompt" not in columns and known is None:
        raise UserError(
            f"dataset_answer_column={answer_column!r} is set, but no column holds the prompts (columns: {columns}): "
            "add --dataset_prompt_column <column>."
        )
    return Layout(
        "custom" if known is None else f"{base.name}, remapped",
        prompt_column or base.prompt_column,
        answer_column or base.reference_column,
        "final answer" if answer_column is not None else base.reference_rule,
        task=base.task if answer_column is None else "math",
        extra_columns=base.extra_columns if answer_column is None else (),
    )


def reference_answer(value: Any) -> str | None:
    """A math reference as final-answer text: after the last ``####`` (GSM8K), else the last ``\\boxed{}`` (MATH),
    else the text itself. ``None`` for anything that is not an answer, so the accuracy reward counts it unscorable."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if "####" in text:
        return gsm8k_answer(text)  # the rest of the line, stripped; None when empty
    boxes = boxed_contents(text)
    if boxes:
        return boxes[-1].strip() or None
    return text


def _io_tests_text(value: Any, row: dict[str, Any]) -> str | None:
    """Input/output tests as JSON text in their own layout; a row-level ``metadata.func_name`` (LiveCodeBench) is
    copied into each functional case that lacks one. ``None`` for an empty value or text that is not JSON."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not value:
        return None
    name = get_path(row, "metadata.func_name")  # the metadata dict, or its JSON text (LiveCodeBench)
    if name and isinstance(value, list):
        value = [
            {**case, "fn_name": case.get("fn_name") or name}
            if isinstance(case, Mapping) and case.get("testtype") == "functional"
            else case
            for case in value
        ]
    return json.dumps(value)


def _code_tests(layout: Layout, row: dict[str, Any]) -> Any:
    """The ``tests`` value the code reward reads (MBPP's set-up code before each assert, HumanEval's
    ``check(<entry_point>)`` after its program, input/output tests as JSON text), else the column as it is."""
    tests = get_path(row, layout.reference_column)
    if layout.name in IO_CODE_LAYOUTS:
        return _io_tests_text(tests, row)
    if layout.name == "MBPP" and isinstance(tests, list):
        setup = row.get("test_setup_code") or ""
        return [f"{setup}\n{t}" if setup else t for t in tests]
    if layout.name == "HumanEval" and isinstance(tests, str) and row.get("entry_point"):
        return f"{tests}\ncheck({row['entry_point']})\n"
    return tests


def _prompt_value(layout: Layout, row: dict[str, Any]) -> Any:
    prompt = get_path(row, layout.prompt_column)
    if layout.name == "MBPP" and isinstance(prompt, str):  # MBPP's own prompt: the task, then the tests to pass
        return prompt + "\nYour code should pass these tests:\n" + "\n".join(row.get("test_list") or [])
    starter = row.get("starter_code")
    if layout.name in IO_CODE_LAYOUTS and isinstance(prompt, str) and isinstance(starter, str) and starter.strip():
        return f"{prompt}\n\nUse this starter code:\n```python\n{starter.rstrip()}\n```"  # names the function
    return prompt


def apply_layout(dataset: Dataset, layout: Layout, with_completion: bool = False) -> Dataset:
    """``dataset`` with ``prompt`` and the reference as ``answer`` (math) or ``tests`` (code), other columns kept (TRL
    passes them to the rewards); ``with_completion`` (SFT) also writes the worked solution as ``completion``."""
    completion = (
        with_completion
        and layout.solution_column is not None
        and layout.solution_column in dataset.column_names
        and "completion" not in dataset.column_names
    )
    unchanged_prompt = layout.prompt_column == "prompt"
    if unchanged_prompt and (
        layout.reference_column is None or layout.reference_column == layout.target_column == "tests"
    ):
        return _checked_prompts(dataset, layout)
    target = layout.target_column

    def convert(row: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt": _prompt_value(layout, row)}
        if layout.reference_column is not None:
            if layout.task == "code":
                out[target] = _code_tests(layout, row)
            else:
                out[target] = reference_answer(get_path(row, layout.reference_column))
        if completion:
            out["completion"] = str(row[layout.solution_column])
        return out

    return _checked_prompts(dataset.map(convert, desc="mapping columns"), layout)


def _checked_prompts(mapped: Dataset, layout: Layout) -> Dataset:
    first = mapped[0]["prompt"] if len(mapped) and "prompt" in mapped.column_names else None
    if first is not None and not isinstance(first, str) and not is_conversational(first):
        raise UserError(
            f"the prompt column {layout.prompt_column!r} holds {type(first).__name__} values; prompts must be text or "
            "a list of chat messages ({'role', 'content'}). Name the right column with --dataset_prompt_column."
        )
    return mapped
