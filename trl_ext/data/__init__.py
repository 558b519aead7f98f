"""Dataset layouts -> ``prompt`` and a reference column, and prompts formatted for the model: the one place that
maps columns, used by every recipe, the probe and held-out evaluation.

- ``layouts``: the recognized layouts (GSM8K, MATH, DAPO-Math-17k, DeepScaleR, MBPP, HumanEval, ...), the flags'
  mapping (``dataset_prompt_column``, ``dataset_answer_column``) and the reference as a final answer;
- ``prompts``: text -> conversation when the tokenizer has a chat template (``system_prompt`` first);
- ``loading``: the demo, a file, a folder or a Hub dataset, mapped by its layout (``load_task_data``), with a
  held-out split carved from data that has none (``carve_held_out``).
"""

from trl_ext.data.layouts import Layout, apply_layout, detect_layout, reference_answer
from trl_ext.data.loading import (
    DEMO_LAYOUT,
    NO_HELD_OUT,
    TaskData,
    cap_held_out,
    carve_held_out,
    held_out_label,
    held_out_size,
    is_data_file,
    load_data,
    load_task_data,
)
from trl_ext.data.prompts import format_prompts, has_chat_template

__all__ = [
    "DEMO_LAYOUT",
    "Layout",
    "TaskData",
    "apply_layout",
    "NO_HELD_OUT",
    "cap_held_out",
    "carve_held_out",
    "detect_layout",
    "format_prompts",
    "has_chat_template",
    "held_out_label",
    "held_out_size",
    "is_data_file",
    "load_data",
    "load_task_data",
    "reference_answer",
]
