"""Seeded, resumable streams of training prompts for the rounds TRL's sampler does not draw: dynamic sampling's
refills (DAPO, arXiv 2503.14476, section 3.2) and overlapped generation's batches.

A stream is identical on every process (same seed, same state): each process reads the same prompts and takes its
own slice. Its position is part of every checkpoint, so a resumed run reads on where the uninterrupted one did.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from datasets import IterableDataset


@dataclass
class PromptStream:
    """A seeded, resumable stream of training-set indices for refill rounds (an endless sequence of permutations)."""

    num_prompts: int
    seed: int
    epoch: int = 0
    position: int = 0

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.num_prompts, generator=generator).tolist()
            chunk = order[self.position : self.position + n - len(out)]
            out.extend(chunk)
            self.position += len(chunk)
            if self.position >= self.num_prompts:
                self.epoch, self.position = self.epoch + 1, 0
        return out

    def state_dict(self) -> dict[str, int]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("num_prompts") != self.num_prompts:
            raise ValueError(
                f"The checkpoint's dynamic-sampling prompt stream was built over {state.get('num_prompts')} prompts, "
                f"but the training set has {self.num_prompts}. Resume with the same train_dataset, or start a new run "
                "in a fresh output_dir."
            )
        self.seed, self.epoch, self.position = state["seed"], state["epoch"], state["position"]


class IterablePromptStream:
    """A seeded, resumable stream of rows of an ``IterableDataset`` for refill rounds, read epoch after epoch (as
    verl draws them from its dataloader), from a second pass so that TRL's own iteration and resume are untouched.
    Its position is the rows read in the current epoch: a resumed run reopens the epoch and skips that many."""

    def __init__(self, dataset: IterableDataset, seed: int, shuffle: bool = True) -> None:
        self.dataset, self.seed, self.shuffle = dataset, seed, shuffle
        self.epoch = 0
        self.position = 0
        self._iterator: Any = None

    def _open(self) -> None:
        dataset = self.dataset
        if self.shuffle:
            dataset = dataset.shuffle(seed=self.seed)  # a new object: the trainer's dataset keeps its own epoch
            dataset.set_epoch(self.epoch)
        self._iterator = iter(dataset)
        for _ in range(self.position):
            next(self._iterator)

    def take_rows(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < n:
            if self._iterator is None:
                self._open()
            try:
                row = next(self._iterator)
            except StopIteration:
                if self.position == 0:
                    raise ValueError(
                        "dynamic sampling: the train_dataset stream yielded no row to refill from."
                    ) from None
                self.epoch, self.position, self._iterator = self.epoch + 1, 0, None
                continue
            out.append(row)
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "iterable", "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "iterable":
            raise ValueError(
                "The checkpoint's dynamic-sampling prompt stream was built over a map-style dataset, but the "
                "train_dataset is now an IterableDataset. Resume with the same train_dataset, or start a new run in a "
                "fresh output_dir."
            )
        self.seed, self.epoch, self.position, self._iterator = state["seed"], state["epoch"], state["position"], None
