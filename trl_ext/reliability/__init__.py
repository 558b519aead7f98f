"""What keeps a run from failing late or silently: construction checks (``checks``), guarded reward functions
(``reward_guard``), atomic checkpoints (``checkpoints``), graceful preemption (``preemption``, a callback any Trainer
can take) and ``reliable.Reliable``, the one class any TRL trainer can put first in its bases."""
