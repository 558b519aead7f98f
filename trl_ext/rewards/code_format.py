"""Import path kept for :class:`~trl_ext.rewards.code.CodeFormat`."""

from trl_ext.rewards.code import CodeFormat  # noqa: F401
