"""The trained batch of dynamic sampling: the kept groups of several rounds joined into one generation batch with the
shapes TRL's loss expects, moving only the rows that must change process, once, as tensors.

Where rows train. Every process computes the same plan from the global keep masks (``plan_rows``): a process trains
the kept rows it generated, in generation order, up to its share of the batch (TRL's number of rows per process); the
rows beyond its share go, in generation order, to the processes short of rows, in process order. Each key then moves
with one ``all_to_all_single`` over the moved rows only (uneven splits), padded to the widest part any process holds;
nothing is pickled. A group whose rows TRL's first round spread over two processes (``num_generations`` not dividing
the rows per process) trains where its rows were generated, so it may train on two processes: its advantages were
TRL's, computed over the whole group before any row moved.

How rows are copied. Each output key is allocated once at its padded width and filled with one ``index_copy_`` per
round (and one for the received rows); dropped rows are never read. Where a key's columns sit comes from TRL's names
for its outputs (``PROMPT_KEYS``, ``COMPLETION_KEYS``, ``PROMPT_COMPLETION_KEYS``): prompts are left-padded,
completions right-padded, and a per-row key (``advantages``, ``image_sizes``, ...) is zero-padded beyond its first
dimension to the largest shape, as a processor pads one batch. Multimodal tensors TRL splits per sample
(``split_pixel_values_by_grid``) move as ragged rows.

Advantages are TRL's, per round, except where they depend on the batch (``trl_ext.grpo.advantages``). Fillers get a
zero loss mask and a zero advantage: they change nothing in the gradient.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate.utils import gather_object
from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

from trl_ext.grpo.advantages import kept_group_advantages, needs_recompute

#: TRL's per-token outputs (``_generate_and_score_completions``) by where their columns sit
PROMPT_KEYS = frozenset({"prompt_ids", "prompt_mask"})
COMPLETION_KEYS = frozenset(
    {
        "completion_ids",
        "completion_mask",
        "tool_mask",
        "old_per_token_logps",
        "ref_per_token_logps",
        "sampling_per_token_logps",
        "importance_sampling_ratio",  # [rows, 1] at the sequence level: then per row (``_layout``)
    }
)
PROMPT_COMPLETION_KEYS = frozenset({"token_type_ids", "mm_token_type_ids"})  # the prompt's columns, then zeros
#: Keys padded with the tokenizer's pad token (everything else is padded with 0: masked positions).
TOKEN_KEYS = ("prompt_ids", "completion_ids")
#: trailing dimensions a per-row tensor may have (LLaVA-NeXT's pixel values: [rows, patches, C, H, W])
MAX_TRAILING_DIMS = 6


@dataclass
class Round:
    """One generation round: TRL's output on this process, the rewards its ``_calculate_rewards`` returned (every
    process's rows, global order), the dynamic-sampling metric and which groups it keeps."""

    output: dict[str, Any]
    rewards_per_func: torch.Tensor  # [global rows, functions], NaN where a function returned None
    metric: torch.Tensor  # [global rows] what decides informativeness (DAPO Eq. 11's accuracy)
    informative: torch.Tensor  # [groups] bool
    seconds: float
    indices: list[int] | None = None  # training-set index of each group's prompt (rounds drawn from the stream)

    @property
    def num_rows(self) -> int:
        return int(self.metric.numel())


def select_groups(rounds: list[Round], num_groups: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(round, group) pairs to train: the first ``num_groups`` informative groups in generation order, and the
    fillers that complete the batch when there were too few (the last uninformative groups generated)."""
    informative, uninformative = [], []
    for r, round_ in enumerate(rounds):
        for g, keep in enumerate(round_.informative.tolist()):
            (informative if keep else uninformative).append((r, g))
    chosen = informative[:num_groups]
    missing = num_groups - len(chosen)
    return chosen, uninformative[len(uninformative) - missing :] if missing else []


@dataclass(frozen=True)
class RowPlan:
    """Every trained row by its global position (the chosen groups' rows in generation order, then the fillers'):
    the round it comes from, its row in that round's output on the process that generated it (``origin``), the
    process that trains it (``dest``) and its row in that process's batch (``slot``). A process's batch holds its own
    rows first, by round, then the rows it receives, by sending process and round: each round's rows, and each
    process's received rows, are one contiguous block."""

    round: torch.Tensor  # [rows]
    local_row: torch.Tensor  # [rows]
    origin: torch.Tensor  # [rows]
    dest: torch.Tensor  # [rows]
    slot: torch.Tensor  # [rows]
    filler: torch.Tensor  # [rows] bool

    def trained_on(self, rank: int) -> torch.Tensor:
        """Global positions of the rows ``rank`` trains, in its batch's order."""
        mine = (self.dest == rank).nonzero().squeeze(1)
        return mine[torch.argsort(self.slot[mine])]

    def moved(self, src: int, dst: int) -> torch.Tensor:
        """Global positions of the rows ``src`` generated and ``dst`` trains, by round, then in generation order."""
        rows = ((self.origin == src) & (self.dest == dst)).nonzero().squeeze(1)
        return rows[torch.argsort(self.round[rows], stable=True)]


def _order_within(labels: torch.Tensor, world: int) -> torch.Tensor:
    """Each element's index among the elements with the same label, in order (0-based)."""
    onehot = F.one_hot(labels, world)
    return (onehot.cumsum(0) * onehot).sum(1) - 1


def plan_rows(
    groups: list[tuple[int, int]], num_fillers: int, rows_per_process: list[int], num_generations: int, world: int
) -> RowPlan:
    """Where each trained row comes from and goes (module docstring): its own rows first, the surplus to the
    processes short of rows. ``rows_per_process``: each round's rows on one process; the last ``num_fillers``
    groups are fillers."""
    group_round = torch.tensor([r for r, _ in groups], dtype=torch.long)
    group_index = torch.tensor([g for _, g in groups], dtype=torch.long)
    round_ = group_round.repeat_interleave(num_generations)
    global_row = group_index.repeat_interleave(num_generations) * num_generations
    global_row += torch.arange(num_generations).repeat(len(groups))
    per_round = torch.tensor(rows_per_process, dtype=torch.long)[round_]
    origin, local_row = global_row // per_round, global_row % per_round
    rows = global_row.numel()
    dest = origin.clone()
    surplus = (_order_within(origin, world) >= rows // world).nonzero().squeeze(1)
    shortfall = (rows // world - torch.bincount(origin, minlength=world)).clamp(min=0)
    dest[surplus] = torch.arange(world).repeat_interleave(shortfall)
    # the batch order (class docstring): own rows, then received rows by sender; by round; by position
    sender = torch.where(origin == dest, 0, origin + 1)
    order = torch.argsort(((dest * (world + 1) + sender) * len(rows_per_process) + round_) * rows + torch.arange(rows))
    slot = torch.empty_like(order)
    slot[order] = _order_within(dest[order], world)
    filler = torch.arange(rows) >= (len(groups) - num_fillers) * num_generations
    return RowPlan(round_, local_row, origin, dest, slot, filler)


def _per_row_values(round_: Round, world: int) -> dict[str, Any]:
    """This process's output of ``round_`` keyed by name, only what has one entry per row (TRL's multimodal split
    first; batch-level scalars such as ``num_items_in_batch`` left out)."""
    rows = round_.num_rows // world
    values = {}
    for key, value in split_pixel_values_by_grid(round_.output).items():
        if value is None or isinstance(value, torch.Tensor) and value.ndim == 0:
            continue
        if len(value) != rows:
            raise ValueError(
                f"Dynamic sampling cannot regroup TRL's generation output {key!r}: its first dimension is {len(value)}, "
                f"not the round's {rows} rows, and TRL's split_pixel_values_by_grid did not split it per sample. "
                "Set dynamic_sampling=False for this model, or report the key with your TRL version."
            )
        values[key] = value
    return values


def _shape_table(values: list[dict[str, Any]], keys: list[str]) -> torch.Tensor:
    """[rounds, keys, MAX_TRAILING_DIMS] the shape beyond the first dimension of each key in each round on this
    process (the largest over samples for per-sample lists; -1 past a key's last dimension): what every process
    needs to size its buffers."""
    table = torch.full((len(values), len(keys), MAX_TRAILING_DIMS), -1, dtype=torch.long)
    for r, round_values in enumerate(values):
        for k, key in enumerate(keys):
            value = round_values[key]
            tensors = value if isinstance(value, list) else [value]
            if not tensors or not isinstance(tensors[0], torch.Tensor):
                continue
            ndim = tensors[0].ndim - 1
            if ndim > MAX_TRAILING_DIMS:
                raise ValueError(
                    f"TRL's generation output {key!r} has {ndim + 1} dimensions; dynamic sampling regroups at most "
                    f"{MAX_TRAILING_DIMS + 1}. Set dynamic_sampling=False for this model."
                )
            if ndim:
                table[r, k, :ndim] = torch.tensor([list(t.shape[1:]) for t in tensors]).amax(0)
    return table


def _layout(key: str, own: torch.Tensor, prompt: torch.Tensor, completion: torch.Tensor) -> str:
    """``prompt``, ``completion``, ``both`` (prompt then completion columns) or ``row`` (per row: zero-padded beyond
    the first dimension), from TRL's name for the key; widths [processes, rounds] of the key, prompt and completion
    everywhere (a completion key only as wide as one column, e.g. a sequence-level ratio, is per row)."""
    if key in PROMPT_KEYS:
        return "prompt"
    if key in COMPLETION_KEYS and bool((own == completion).all()):
        return "completion"
    if key in PROMPT_COMPLETION_KEYS and bool((own == prompt + completion).all()):
        return "both"
    return "row"


def _copy_block(
    dst: torch.Tensor,
    start: int,
    src: torch.Tensor,
    rows: torch.Tensor,
    kind: str,
    src_split: int,
    dst_split: int,
    fill,
) -> None:
    """``src[rows]`` written into the rows ``dst[start:start + len(rows)]`` by ``index_select`` in place, the prompt's
    columns (before ``*_split``) right-aligned and the completion's left-aligned, a per-row tensor into the leading
    corner; only the padding around them is filled. ``dst`` is at least as wide as ``src`` in every part."""
    block = dst[start : start + len(rows)]
    if kind == "row":
        region = block[(slice(None), *(slice(0, n) for n in src.shape[1:]))]
        if region.shape != block.shape:
            block.fill_(fill)
        torch.index_select(src, 0, rows, out=region)
        return
    if kind in ("prompt", "both"):
        block[:, : dst_split - src_split].fill_(fill)
        torch.index_select(src[:, :src_split], 0, rows, out=block[:, dst_split - src_split : dst_split])
    if kind in ("completion", "both"):
        width = src.size(1) - src_split
        torch.index_select(src[:, src_split:], 0, rows, out=block[:, dst_split : dst_split + width])
        block[:, dst_split + width :].fill_(fill)


def _copy_cropped(dst: torch.Tensor, src: torch.Tensor, kind: str, src_split: int, dst_split: int) -> None:
    """Every row of ``src`` into ``dst`` (as many rows), ``src`` being at least as wide: only padding is cut."""
    if kind == "row":
        dst.copy_(src[(slice(None), *(slice(0, n) for n in dst.shape[1:]))])
        return
    if kind in ("prompt", "both"):
        dst[:, :dst_split].copy_(src[:, src_split - dst_split : src_split])
    if kind in ("completion", "both"):
        width = dst.size(1) - dst_split
        dst[:, dst_split:].copy_(src[:, src_split : src_split + width])


def _pad_to(value: torch.Tensor, trailing: list[int]) -> torch.Tensor:
    """``value`` zero-padded beyond its first dimension to ``trailing``."""
    widths = [x for n, t in zip(value.shape[:0:-1], trailing[::-1], strict=True) for x in (0, t - n)]
    return F.pad(value, widths) if any(widths) else value


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Garbage collection paused around the assembly: it allocates tensors, not reference cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _all_to_all(send: torch.Tensor, send_counts: list[int], recv_counts: list[int]) -> torch.Tensor:
    """One ``all_to_all_single`` along the first dimension with uneven splits (bool tensors as bytes)."""
    as_bytes = send.dtype == torch.bool
    send = send.view(torch.uint8) if as_bytes else send
    received = send.new_empty((sum(recv_counts), *send.shape[1:]))
    dist.all_to_all_single(received, send.contiguous(), recv_counts, send_counts)
    return received.view(torch.bool) if as_bytes else received


class _Assembly:
    """One process's batch built from the plan: shapes agreed by all processes (one small gather), its own rows
    copied per round, and the moved rows exchanged once per key."""

    def __init__(self, rounds: list[Round], plan: RowPlan, accelerator: Any, pad_id: int) -> None:
        self.world, self.rank, self.plan, self.pad_id = (
            accelerator.num_processes,
            accelerator.process_index,
            plan,
            pad_id,
        )
        self.values = [_per_row_values(round_, self.world) for round_ in rounds]
        self.keys = list(self.values[0])
        for r, values in enumerate(self.values[1:], start=1):
            if list(values) != self.keys:
                raise ValueError(
                    f"Dynamic sampling's rounds returned different outputs: round 0 {self.keys}, round {r} "
                    f"{list(values)}. TRL's round must return the same keys every time; set dynamic_sampling=False."
                )
        table = _shape_table(self.values, self.keys)
        if self.world > 1:
            table = accelerator.gather(table.to(accelerator.device)).cpu()
        self.shapes = table.view(self.world, len(rounds), len(self.keys), MAX_TRAILING_DIMS)
        widths = self.shapes[..., 0]  # [processes, rounds, keys]
        self.prompt = widths[..., self.keys.index("prompt_ids")]  # [processes, rounds]
        self.completion = widths[..., self.keys.index("completion_ids")]
        self.layout = {
            key: _layout(key, widths[..., k], self.prompt, self.completion) for k, key in enumerate(self.keys)
        }
        self.mine = plan.trained_on(self.rank)
        own = self.mine[plan.origin[self.mine] == self.rank]
        # (first slot, local rows) of each round's own rows, and (round, local rows) per process sent to, in order
        self.own_blocks = [
            (r, int(plan.slot[rows[0]]), plan.local_row[rows])
            for r, rows in enumerate(self._by_round(own))
            if rows.numel()
        ]
        self.sent = [self._by_round(plan.moved(self.rank, d)) if d != self.rank else [] for d in range(self.world)]
        self.came = [plan.moved(s, self.rank) if s != self.rank else own[:0] for s in range(self.world)]
        self.send_counts = [sum(len(rows) for rows in blocks) for blocks in self.sent]
        self.recv_counts = [len(rows) for rows in self.came]
        self.received_from = len(own)  # the received rows' first slot
        self.exchanges = self.world > 1 and bool((plan.origin != plan.dest).any())  # the same answer everywhere
        self.batch_widths = self._widths(self.mine)
        self.widest = int(self.prompt.max()), int(self.completion.max())
        self.own_prompt = self.prompt[self.rank].tolist()  # this process's prompt width in each round
        largest = self.shapes.amax((0, 1)).tolist()  # per key, its largest shape beyond the first dimension
        self.largest = [[n for n in dims if n >= 0] for dims in largest]

    def _by_round(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """``rows`` (ordered by round) split into one tensor per round (empty where none)."""
        counts = torch.bincount(self.plan.round[rows], minlength=len(self.values)).tolist()
        return list(rows.split(counts))

    def _widths(self, rows: torch.Tensor) -> tuple[int, int]:
        """The widest prompt and completion among ``rows``' origins (global positions)."""
        if not rows.numel():
            return 0, 0
        origin, round_ = self.plan.origin[rows], self.plan.round[rows]
        return int(self.prompt[origin, round_].max()), int(self.completion[origin, round_].max())

    def _empty(self, key: str, k: int, count: int, widths: tuple[int, int], like: torch.Tensor) -> torch.Tensor:
        """An uninitialised buffer of ``count`` rows of ``key`` at these prompt and completion widths."""
        trailing = list(self.largest[k])
        kind = self.layout[key]
        if kind != "row":
            trailing[0] = {"prompt": widths[0], "completion": widths[1], "both": sum(widths)}[kind]
        return torch.empty((count, *trailing), dtype=like.dtype, device=like.device)

    def _split(self, key: str, prompt_width: int, tensor: torch.Tensor) -> int:
        """Where the completion's columns start in ``tensor`` (of ``key``) whose prompt part is ``prompt_width`` wide."""
        width = tensor.size(1) if tensor.ndim > 1 else 0
        return {"prompt": width, "both": prompt_width}.get(self.layout[key], 0)

    def _source_split(self, key: str, r: int) -> int:
        """``_split`` of this process's output of round ``r``."""
        return self._split(key, self.own_prompt[r], self.values[r][key])

    def own(self, key: str, k: int) -> torch.Tensor:
        """Key ``key`` (a tensor) of this process's batch, its own rows copied in (one block per round); the rows it
        receives (``receive``) come after them."""
        kind, fill = self.layout[key], self.pad_id if key in TOKEN_KEYS else 0
        out = self._empty(key, k, len(self.mine), self.batch_widths, self.values[0][key])
        out_split = self._split(key, self.batch_widths[0], out)
        for r, start, local_rows in self.own_blocks:
            source = self.values[r][key]
            _copy_block(
                out, start, source, local_rows.to(source.device), kind, self._source_split(key, r), out_split, fill
            )
        return out

    def receive(self, batch: dict[str, Any]) -> None:
        """The moved rows of every tensor key in one ``all_to_all_single``: each row's keys side by side as bytes,
        at the widest widths anywhere (8-byte aligned), then each key's received rows copied after ``batch``'s own."""
        keys = [key for key in self.keys if isinstance(batch[key], torch.Tensor)]
        buffers = {key: self._empty(key, self.keys.index(key), 0, self.widest, batch[key]) for key in keys}
        sizes = {key: math.prod(buffer.shape[1:]) * buffer.element_size() for key, buffer in buffers.items()}
        offsets, row_bytes = {}, 0
        for key in keys:
            offsets[key], row_bytes = row_bytes, row_bytes + -(-sizes[key] // 8) * 8

        def views(raw: torch.Tensor) -> dict[str, torch.Tensor]:
            return {
                key: raw[:, offsets[key] : offsets[key] + sizes[key]]
                .view(buffers[key].dtype)
                .view(len(raw), *buffers[key].shape[1:])
                for key in keys
            }

        device = batch[keys[0]].device
        send = torch.empty((sum(self.send_counts), row_bytes), dtype=torch.uint8, device=device)
        send_views, start = views(send), 0
        splits = {key: self._split(key, self.widest[0], send_views[key]) for key in keys}  # sent and received alike
        for blocks in self.sent:
            for r, rows in enumerate(blocks):
                if rows.numel():
                    local_rows = self.plan.local_row[rows].to(device)
                    for key in keys:
                        fill = self.pad_id if key in TOKEN_KEYS else 0
                        source_split = self._source_split(key, r)
                        _copy_block(
                            send_views[key], start, self.values[r][key], local_rows, self.layout[key], source_split,
                            splits[key], fill,
                        )  # fmt: skip
                    start += len(rows)
        received = views(_all_to_all(send, self.send_counts, self.recv_counts))
        for key in keys:
            out_split = self._split(key, self.batch_widths[0], batch[key])
            _copy_cropped(batch[key][self.received_from :], received[key], self.layout[key], splits[key], out_split)

    def ragged(self, key: str, k: int) -> list[Any]:
        """Key ``key`` of this process's batch where TRL's split made it one entry per sample: tensors zero-padded
        beyond the first dimension to the largest anywhere (moved rows as one ragged exchange), or Python values."""
        plan = self.plan
        tensors = isinstance(self.values[0][key][0], torch.Tensor)
        trailing = self.largest[k] if tensors else []

        def entry(row: int) -> Any:
            value = self.values[int(plan.round[row])][key][int(plan.local_row[row])]
            return _pad_to(value, trailing) if tensors else value

        out = [entry(row) for row in self.mine[: self.received_from].tolist()]
        if not self.exchanges:
            return out
        sent = [int(row) for blocks in self.sent for rows in blocks for row in rows]
        came = [int(row) for rows in self.came for row in rows]
        values = [entry(row) for row in sent]
        if not tensors:  # per-row Python values (TRL's num_images): small, and no tensor among them
            received = dict(gather_object(list(zip(sent, values, strict=True))))
            return out + [received[row] for row in came]
        like = self.values[0][key][0]
        lengths = torch.tensor([v.size(0) for v in values], dtype=torch.long)
        got = _all_to_all(lengths.to(like.device), self.send_counts, self.recv_counts).cpu()
        send_sizes = torch.zeros(self.world, dtype=torch.long).index_add_(0, plan.dest[sent], lengths)
        recv_sizes = torch.zeros(self.world, dtype=torch.long).index_add_(0, plan.origin[came], got)
        send = torch.cat(values) if values else like.new_zeros((0, *trailing))
        return out + list(_all_to_all(send, send_sizes.tolist(), recv_sizes.tolist()).split(got.tolist()))


def assemble(
    rounds: list[Round],
    chosen: list[tuple[int, int]],
    fillers: list[tuple[int, int]],
    accelerator: Any,
    num_generations: int,
    pad_id: int,
    advantage_args: tuple[torch.Tensor, str, str] | None = None,
) -> dict[str, Any]:
    """This process's part of the trained batch: the ``chosen`` groups' rows, then the ``fillers``', placed by
    ``plan_rows`` (module docstring). ``advantage_args``: (reward weights, ``scale_rewards``,
    ``multi_objective_aggregation``), to recompute advantages over the trained groups where they depend on them."""
    groups = chosen + fillers
    world = accelerator.num_processes
    plan = plan_rows(groups, len(fillers), [round_.num_rows // world for round_ in rounds], num_generations, world)
    with _gc_paused():
        assembly = _Assembly(rounds, plan, accelerator, pad_id)
        batch: dict[str, Any] = {}
        for k, key in enumerate(assembly.keys):
            tensor = isinstance(assembly.values[0][key], torch.Tensor)
            batch[key] = assembly.own(key, k) if tensor else assembly.ragged(key, k)
        if assembly.exchanges:
            assembly.receive(batch)
    mine = assembly.mine
    if advantage_args is not None and needs_recompute(*advantage_args[1:]):
        picked = torch.cat(
            [rounds[r].rewards_per_func[g * num_generations : (g + 1) * num_generations] for r, g in groups]
        )
        weights, scale_rewards, aggregation = advantage_args
        advantages = kept_group_advantages(picked, weights, num_generations, scale_rewards, aggregation, plan.filler)
        batch["advantages"] = advantages[mine].to(batch["advantages"].device, batch["advantages"].dtype)
    filler = plan.filler[mine].to(accelerator.device)
    if filler.any():  # in place: these tensors are the assembly's own
        batch["advantages"].masked_fill_(filler, 0.0)
        batch["completion_mask"].masked_fill_(filler.unsqueeze(1), 0)
    loss_mask = batch["completion_mask"] if "tool_mask" not in batch else batch["completion_mask"] * batch["tool_mask"]
    batch["num_items_in_batch"] = accelerator.gather(loss_mask.sum()).sum()
    return unsplit_pixel_values_by_grid(batch)
