"""Looking at a model and a run: the pre-flight probe (``probe``), the training health monitor (``health``) and the
held-out greedy accuracy used before, during and after RL (``held_out``). Public names are re-exported by
``trl_ext``."""
