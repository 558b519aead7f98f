"""DPO over group-mined preference pairs: the pair miner (``pairs``) and TRL's ``DPOTrainer`` subclass (``trainer``)."""

from trl_ext.dpo.pairs import build_pairs, mine_pairs
from trl_ext.dpo.trainer import DPOConfig, DPOTrainer, train_iterative_dpo

__all__ = ["DPOConfig", "DPOTrainer", "build_pairs", "mine_pairs", "train_iterative_dpo"]
