"""Dataset layouts -> ``prompt`` and a reference column (``layouts``), loading (``loading``) and prompts formatted
for the model (``prompts``): the one place that maps columns, for every recipe, the probe and held-out evaluation."""

from trl_ext.data.layouts import Layout, apply_layout, detect_layout, reference_answer
from trl_ext.data.loading import (
    TaskData,
    cap_held_out,
    held_out_label,
    held_out_size,
    is_data_file,
    load_data,
    load_task_data,
)
from trl_ext.data.prompts import format_prompts

__all__ = [
    "Layout",
    "TaskData",
    "apply_layout",
    "cap_held_out",
    "detect_layout",
    "format_prompts",
    "held_out_label",
    "held_out_size",
    "is_data_file",
    "load_data",
    "load_task_data",
    "reference_answer",
]
