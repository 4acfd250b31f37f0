"""Token-budget batches of similar-length sentences (sec. 5.1: "Sentence pairs were batched
together by approximate sequence length. Each training batch contained a set of sentence
pairs containing approximately 25000 source tokens and 25000 target tokens").

Conventions the model relies on (pad_id 0, bos_id 2, eos_id 3 from `aiayn.data.vocab`):

    src     = tokens + [eos]            (batch, src_len), right-padded with pad_id
    tgt_in  = [bos] + tokens            (batch, tgt_len), right-padded with pad_id
    tgt_out = tokens + [eos]            (batch, tgt_len), right-padded with pad_id

so an example's source size is `len(src_ids) + 1` and its target size `len(tgt_ids) + 1`.

The budget counts padding: for each side, `batch size * longest size in the batch` is at
most `max_tokens`. That is the memory the model actually allocates, so a budget that holds
cannot run out of memory on one odd batch. Sorting by (target, source) length before
cutting keeps padding small (a few percent), and the batch *order* is shuffled with a
recorded seed (`seed + epoch`), so each epoch differs and any epoch can be replayed.

Decisions, stated once:
- One batcher, `token_batches`, cuts every order into batches: the training sampler's and
  the dev loss's (sorted by target, then source size), and, through `longest_first_batches`,
  translation's and dev BLEU's (longest source first).
- In training, an example that alone exceeds `max_tokens` is an error at the sampler's
  construction (with its index and length), never silently dropped: the length filter of
  `aiayn prepare` is the place to drop long pairs, and counts them. Translation cannot
  drop a line: such a sentence is decoded in a batch of its own.
- Distributed ranks: rank r takes batches r, r + w, r + 2w, ... of the shuffled epoch. So
  that every rank gets the same number of batches without dropping or repeating examples,
  the remainder is removed by splitting the largest batches (by sentence count) in two
  until the count is a multiple of w. Every example is then seen exactly once per epoch
  across the ranks, on disjoint batches; a split batch only holds fewer tokens.
- `state_dict()` is (epoch, index): the next batch is `index` of epoch `epoch`. All ranks
  are at the same index, so rank 0's state restores every rank.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from aiayn.config import ModelConfig
from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID
from aiayn.errors import DataError


@dataclass
class Batch:
    """Model-ready tensors for one batch, plus the counts the loss and the logs need."""

    src: torch.Tensor  # (batch, src_len) long
    tgt_in: torch.Tensor  # (batch, tgt_len) long
    tgt_out: torch.Tensor  # (batch, tgt_len) long
    n_src_tokens: int  # real source tokens (eos included, padding not)
    n_tgt_tokens: int  # real target tokens (what the loss is averaged over)
    ids: list[int]  # dataset indices of the rows, to put outputs back in corpus order

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The same batch with its tensors on `device`."""
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return replace(
            self, src=move(self.src), tgt_in=move(self.tgt_in), tgt_out=move(self.tgt_out)
        )

    def __len__(self) -> int:
        return self.src.shape[0]


def collate(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    ids: Sequence[int] | None = None,
) -> Batch:
    """Pad (src_ids, tgt_ids) pairs, without specials, into a `Batch` (conventions above)."""
    if not examples:
        raise ValueError("cannot collate an empty batch")
    n = len(examples)
    src_len = max(len(s) for s, _ in examples) + 1
    tgt_len = max(len(t) for _, t in examples) + 1
    src = np.full((n, src_len), pad_id, dtype=np.int64)
    tgt_in = np.full((n, tgt_len), pad_id, dtype=np.int64)
    tgt_out = np.full((n, tgt_len), pad_id, dtype=np.int64)
    for row, (s, t) in enumerate(examples):
        src[row, : len(s)] = s
        src[row, len(s)] = eos_id
        tgt_in[row, 0] = bos_id
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = eos_id
    return Batch(
        src=torch.from_numpy(src),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        n_src_tokens=sum(len(s) + 1 for s, _ in examples),
        n_tgt_tokens=sum(len(t) + 1 for _, t in examples),
        ids=list(range(n)) if ids is None else [int(i) for i in ids],
    )


def special_ids(config: ModelConfig) -> tuple[int, int, int]:
    """(pad_id, bos_id, eos_id) of a model (`collate`'s order): aiayn's vocabularies' 0, 2,
    3, or those of the vocabulary it was imported with (`ModelConfig`)."""
    return config.pad_id, config.bos_id, config.eos_id


def token_batches(
    order: np.ndarray, sizes: Sequence[np.ndarray], max_tokens: int
) -> list[np.ndarray]:
    """Cut `order` greedily into batches whose count * longest size is <= max_tokens on
    every side; the one batcher of training, dev loss and BLEU, and translation.

    `sizes`: one array per side (source, or source and target), indexed by example, with
    the specials. An example alone over the budget goes alone (the sampler refuses those
    up front; translation decodes them).
    """
    batches: list[np.ndarray] = []
    widest = np.maximum.reduce([np.asarray(side)[order] for side in sizes]).tolist()
    start, longest = 0, 0  # first position of the open batch, its longest size on any side
    for pos, size in enumerate(widest):
        grown = max(longest, size)
        if pos > start and (pos - start + 1) * grown > max_tokens:
            batches.append(order[start:pos])
            start, grown = pos, size
        longest = grown
    if start < len(order):
        batches.append(order[start:])
    return batches


def longest_first_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of `lengths` (source sizes, eos included) in token batches, longest first:
    the order in which sentences are decoded, so that similar lengths share a batch and
    the first of each batch is its longest (as fairseq's `max_tokens` does)."""
    sizes = np.asarray(lengths, dtype=np.int64).reshape(-1)  # (n_sentences,)
    order = np.argsort(-sizes, kind="stable")  # ties keep the input order
    return [batch.tolist() for batch in token_batches(order, [sizes], max_tokens)]


def split_to_multiple(batches: list[np.ndarray], world_size: int) -> list[np.ndarray]:
    """Split the largest batches in two until their count is a multiple of `world_size`."""
    batches = list(batches)
    while len(batches) % world_size:
        sizes = [len(b) for b in batches]
        largest = int(np.argmax(sizes))
        if sizes[largest] < 2:
            raise DataError(
                f"cannot give {world_size} ranks the same number of batches: only "
                f"{sum(sizes)} examples"
            )
        half = sizes[largest] // 2
        batch = batches[largest]
        batches[largest : largest + 1] = [batch[:half], batch[half:]]
    return batches


class TokenBatchSampler:
    """Yields this rank's batches (arrays of example indices) for one epoch at a time.

    `bucket_size=None` sorts the whole split by length (least padding; ties broken randomly
    per epoch so batch contents still vary); an int sorts within random buckets of that many
    examples instead (more variety between epochs, a little more padding).
    """

    def __init__(
        self,
        src_lengths: Sequence[int] | np.ndarray,
        tgt_lengths: Sequence[int] | np.ndarray,
        max_tokens: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        bucket_size: int | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.src_sizes = np.asarray(src_lengths, dtype=np.int64) + 1  # + eos
        self.tgt_sizes = np.asarray(tgt_lengths, dtype=np.int64) + 1  # + bos (in) / eos (out)
        if self.src_sizes.shape != self.tgt_sizes.shape:
            raise ValueError("src_lengths and tgt_lengths differ in length")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.max_tokens, self.seed, self.shuffle = max_tokens, seed, shuffle
        self.bucket_size, self.rank, self.world_size = bucket_size, rank, world_size
        self._check_sizes()
        self.epoch, self.index = 0, 0
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def _check_sizes(self) -> None:
        for name, sizes in (("source", self.src_sizes), ("target", self.tgt_sizes)):
            too_big = np.flatnonzero(sizes > self.max_tokens)
            if len(too_big):
                i = int(too_big[0])
                raise DataError(
                    f"example {i} has {sizes[i]} {name} tokens (specials included), more than "
                    f"max_tokens={self.max_tokens} alone ({len(too_big)} such examples); "
                    f"raise max_tokens or filter with `aiayn prepare --max-tokens-per-side`"
                )

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches of `epoch`, in order; the same for the same seed and epoch."""
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1]
        rng = np.random.default_rng(self.seed + epoch)
        n = len(self.src_sizes)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        step = self.bucket_size or max(n, 1)
        buckets = [self._sort(order[i : i + step]) for i in range(0, n, step)]
        order = np.concatenate(buckets) if buckets else order
        batches = token_batches(order, [self.src_sizes, self.tgt_sizes], self.max_tokens)
        batches = split_to_multiple(batches, self.world_size)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        mine = batches[self.rank :: self.world_size]
        self._cached = (epoch, mine)
        return mine

    def _sort(self, idx: np.ndarray) -> np.ndarray:
        """By target size, then source size; stable, so ties keep `idx`'s (random) order."""
        return idx[np.lexsort((self.src_sizes[idx], self.tgt_sizes[idx]))]

    def __len__(self) -> int:
        return len(self.epoch_batches(self.epoch))

    def __iter__(self) -> Iterator[np.ndarray]:
        """The rest of the current epoch; the next call starts the following epoch."""
        if self.index >= len(self.epoch_batches(self.epoch)):
            self.set_epoch(self.epoch + 1)
        batches = self.epoch_batches(self.epoch)
        while self.index < len(batches):
            batch = batches[self.index]
            self.index += 1
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its first batch."""
        self.epoch, self.index = epoch, 0

    def state_dict(self) -> dict:
        """Where the iteration stands: the next batch is `index` of `epoch`."""
        return {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "world_size": self.world_size,
            "n_examples": len(self.src_sizes),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved position; refuse one saved under a different batch plan."""
        for key in ("seed", "max_tokens", "world_size", "n_examples"):
            if key in state and state[key] != self.state_dict()[key]:
                raise DataError(
                    f"cannot resume batches: saved {key}={state[key]}, "
                    f"now {self.state_dict()[key]}; the batch plan would differ"
                )
        self.epoch, self.index = int(state["epoch"]), int(state["index"])

    def padding_stats(self, epoch: int | None = None) -> dict[str, int]:
        """Real and padded token counts of this rank's batches (both sides) for one epoch."""
        real = padded = 0
        for batch in self.epoch_batches(self.epoch if epoch is None else epoch):
            for sizes in (self.src_sizes[batch], self.tgt_sizes[batch]):
                real += int(sizes.sum())
                padded += int(sizes.max()) * len(batch)
        return {"real_tokens": real, "padded_tokens": padded}


def iterate_batches(dataset, sampler: TokenBatchSampler) -> Iterator[Batch]:
    """Collated batches of `dataset` (`dataset[i] -> (src_ids, tgt_ids)`) in `sampler`'s order."""
    for indices in sampler:
        yield collate([dataset[int(i)] for i in indices], ids=indices)
