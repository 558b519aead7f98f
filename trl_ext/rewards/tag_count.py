"""Tag-count reward: partial credit for each well-formed ``<think>`` / ``<answer>`` tag (open-r1's ``tag_count_reward``),
a dense signal toward the strict format (``ThinkFormat(answer_tags=True)``); a repeated marker earns nothing.
"""

from __future__ import annotations

from trl_ext.rewards.text import TextReward

THINK_MARKERS = ("<think>\n", "\n</think>\n")
ANSWER_MARKERS = ("\n<answer>\n", "\n</answer>")


class TagCount(TextReward):
    """``(markers present exactly once) / (markers counted)``: quarters with answer tags, halves without."""

    def __init__(self, answer_tags: bool = True, name: str = "tag_count"):
        self.answer_tags = answer_tags
        self.markers = THINK_MARKERS + (ANSWER_MARKERS if answer_tags else ())
        self.__name__ = name

    def score(self, text: str) -> float:
        return sum(text.count(marker) == 1 for marker in self.markers) / len(self.markers)
