"""What TRL's vLLM path needs to run everywhere vLLM runs (docs/VLLM.md): set-up checks (``vllm_setup``), a colocate
weight sync that works where the engine repacks its weights (``vllm_sync``), a file weight sync for server mode without
NCCL (``vllm_server``). This ``__init__`` imports nothing, so the set-up checks do not load TRL or torch."""
