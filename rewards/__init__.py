"""Compatibility shim: the reward functions now live in ``trl_ext.rewards``.

The import name ``rewards`` is taken on the package index by an unrelated project, so installing ``trl-ext`` next to
it collided. ``pip install trl-ext`` installs only ``trl_ext`` now; write ``from trl_ext.rewards import ...``. In a
source checkout (this folder on ``sys.path``, as when running ``python recipes/<recipe>.py`` from the repository
root) the old ``from rewards import ...`` and ``from rewards.<module> import ...`` still work through this shim,
which aliases every submodule. See README "Migration".
"""

import importlib
import sys

from trl_ext.rewards import *  # noqa: F403  (the public names, re-exported unchanged)
from trl_ext.rewards import __all__  # noqa: F401

for _module in (
    "arithmetic",
    "checkers",
    "code",
    "code_format",
    "extract",
    "format",
    "io_tests",
    "length",
    "length_scaled",
    "math",
    "registry",
    "sandbox",
    "tag_count",
    "text",
):
    sys.modules[f"{__name__}.{_module}"] = importlib.import_module(f"trl_ext.rewards.{_module}")
