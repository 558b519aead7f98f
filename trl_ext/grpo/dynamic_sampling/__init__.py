"""DAPO dynamic sampling (arXiv 2503.14476, section 3.2, Eq. 11) over TRL's ``GRPOTrainer``.

- ``loop``: the algorithm, one function (``sample_informative_batch``) over TRL's own round;
- ``sampler``: its state across steps and its decisions on plain tensors (``DynamicSampler``);
- ``batch``: the kept groups of several rounds assembled into one batch, regrouped by TRL's per-sample structure;
- ``sizing``: right-sized refill rounds; ``groups``: which groups are informative; ``prompts``: the refill stream;
- ``skip``: GRESO's skipping of prompts predicted to be uninformative (opt-in);
- ``step_gate``: an optimizer step whose window trained no token changes nothing;
- ``setup``: all of it built for a trainer, and its checkpointed state.
"""
