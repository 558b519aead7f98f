"""Looking at a model and a run: the pre-flight probe (``probe``), the training health monitor (``health``),
evaluation as the papers report it (``evaluation``, ``eval_metrics``, ``eval_report``: ``trl-ext eval``'s pass@1
(greedy), avg@K, pass@k and maj@K) and its greedy mode during training (``held_out``). Public names are re-exported by
``trl_ext``."""
