"""DPO over group-mined preference pairs: the pair miner (``pairs``) and TRL's ``DPOTrainer`` subclass with length
diagnostics and iterative rounds (``trainer``). Public names are re-exported by ``trl_ext``."""
