"""Import path kept for :class:`~trl_ext.rewards.format.TagCount` and its markers."""

from trl_ext.rewards.format import ANSWER_MARKERS, THINK_MARKERS, TagCount  # noqa: F401
