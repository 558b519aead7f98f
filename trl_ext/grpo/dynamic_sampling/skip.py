"""Pre-rollout skipping of prompts predicted to give a zero-variance group: GRESO ("Act Only When It Pays", arXiv
2506.02177, Algorithm 1).

Per training-set index the predictor keeps ``z``, the prompt's consecutive zero-variance visits. Before a rollout a
prompt is skipped with probability ``1 - p**z``; the exploration probability ``p`` keeps every prompt a chance to be
re-tested, and after each step moves by ``step`` down (skip more) when the zero-variance fraction of the groups
generated exceeded ``target``, up otherwise, within ``[p_min, 1]``. (GRESO adapts separate probabilities for easy and
hard prompts; one is kept here.) The draws are deterministic given the seed, the index and the draw count, so they
are identical on every process and resume exactly.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class SkipPredictor:
    """GRESO's skip rule over training-set indices (see the module docstring)."""

    seed: int
    target: float = 0.25
    p: float = 0.5
    step: float = 0.01
    p_min: float = 0.05
    streaks: dict[int, int] = field(default_factory=dict)  # index -> consecutive zero-variance visits (z)
    draws: int = 0

    def skip_probability(self, index: int) -> float:
        return 1.0 - self.p ** self.streaks.get(index, 0)

    def should_skip(self, index: int) -> bool:
        """Whether to skip ``index`` at this visit (consumes one deterministic draw)."""
        self.draws += 1
        if not self.streaks.get(index):
            return False
        digest = hashlib.sha256(f"{self.seed}:{index}:{self.draws}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.skip_probability(index)

    def record(self, index: int, zero_variance: bool) -> None:
        """One visit's outcome: extend or reset the prompt's zero-variance streak."""
        if zero_variance:
            self.streaks[index] = self.streaks.get(index, 0) + 1
        else:
            self.streaks.pop(index, None)

    def adapt(self, zero_variance_fraction: float) -> None:
        """Move the exploration probability toward the target zero-variance fraction."""
        if zero_variance_fraction > self.target:
            self.p = max(self.p_min, self.p - self.step)
        else:
            self.p = min(1.0, self.p + self.step)

    def state_dict(self) -> dict[str, Any]:
        return {**asdict(self), "streaks": {str(k): v for k, v in self.streaks.items()}}  # JSON keys are strings

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed, self.target, self.p = state["seed"], state["target"], state["p"]
        self.step, self.p_min, self.draws = state["step"], state["p_min"], state["draws"]
        self.streaks = {int(k): v for k, v in state["streaks"].items()}
