"""Moved to ``trl_ext.grpo.moe`` (beside the trainers that attach it); this name stays for old imports."""

from trl_ext.grpo.moe import *  # noqa: F403
from trl_ext.grpo.moe import __all__  # noqa: F401
