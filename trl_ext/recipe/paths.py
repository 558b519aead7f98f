"""Where the recipes live: ``recipes/`` next to the package (a source checkout or an editable install). A module of
its own, free of torch, so that ``trl-ext --help`` stays instant."""

from __future__ import annotations

import os

RECIPES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "recipes")
