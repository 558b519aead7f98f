"""What TRL's vLLM path needs to run everywhere vLLM runs: set-up checks at construction (``vllm_setup``) and a
colocate weight sync that works where the engine repacks its weights, vLLM's CPU build included (``vllm_sync``);
for server mode without NCCL, a weight sync through a file (``vllm_server``).
This ``__init__`` imports nothing, so the set-up checks do not load TRL or torch."""
