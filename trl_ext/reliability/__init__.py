"""What keeps a run from failing late or silently: construction checks (``checks``), guarded reward functions
(``reward_guard``), atomic checkpoints with one extra-state mechanism (``checkpoints``), and the trainer mixin that
wires them into the GRPO trainers (``mixin``)."""
