"""Token-budget batching: coverage, the budget with padding, determinism, resume, ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.data.batching import (
    TokenBatchSampler,
    collate,
    iterate_batches,
    longest_first_batches,
    split_to_multiple,
    token_batches,
)
from aiayn.errors import DataError

# Small example counts and lengths: hypothesis explores the corner cases cheaply.
lengths = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=80)
plans = st.fixed_dictionaries(
    {
        "pairs": lengths,
        "max_tokens": st.integers(31, 160),
        "seed": st.integers(0, 2**16),
        "bucket_size": st.sampled_from([None, 1, 7, 32]),
    }
)


def sampler(plan: dict, **kwargs) -> TokenBatchSampler:
    src, tgt = zip(*plan["pairs"])
    options = {"seed": plan["seed"], "bucket_size": plan["bucket_size"], **kwargs}
    return TokenBatchSampler(src, tgt, plan["max_tokens"], **options)


def test_collate_follows_the_conventions() -> None:
    examples = [([5, 6, 7], [8]), ([9], [10, 11, 12, 13])]
    batch = collate(examples, pad_id=0, bos_id=2, eos_id=3, ids=[4, 1])
    assert batch.src.tolist() == [[5, 6, 7, 3], [9, 3, 0, 0]]  # tokens + [eos], right-padded
    assert batch.tgt_in.tolist() == [[2, 8, 0, 0, 0], [2, 10, 11, 12, 13]]  # [bos] + tokens
    assert batch.tgt_out.tolist() == [[8, 3, 0, 0, 0], [10, 11, 12, 13, 3]]  # tokens + [eos]
    assert (batch.n_src_tokens, batch.n_tgt_tokens, batch.ids, len(batch)) == (6, 7, [4, 1], 2)
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long
    moved = batch.to("cpu")
    assert moved.src.device.type == "cpu" and moved.ids == [4, 1]


def test_collate_of_empty_sentences() -> None:
    batch = collate([(np.array([], dtype=np.int64), np.array([], dtype=np.int64))])
    assert batch.src.tolist() == [[3]] and batch.tgt_in.tolist() == [[2]]
    assert batch.tgt_out.tolist() == [[3]]


@settings(max_examples=150, deadline=None)
@given(plans)
def test_every_example_once_and_budget_counts_padding(plan: dict) -> None:
    s = sampler(plan)
    batches = list(s)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(len(plan["pairs"])))
    for batch in batches:
        assert len(batch) > 0
        for sizes in (s.src_sizes[batch], s.tgt_sizes[batch]):  # specials included
            assert len(batch) * sizes.max() <= plan["max_tokens"]


@settings(max_examples=60, deadline=None)
@given(plans, st.integers(0, 3))
def test_same_seed_same_batches(plan: dict, epoch: int) -> None:
    first = sampler(plan).epoch_batches(epoch)
    again = sampler(plan).epoch_batches(epoch)
    assert [b.tolist() for b in first] == [b.tolist() for b in again]


def test_epochs_reshuffle_the_batch_order() -> None:
    s = TokenBatchSampler([5] * 200, [5] * 200, 60, seed=3)
    assert [b.tolist() for b in s.epoch_batches(0)] != [b.tolist() for b in s.epoch_batches(1)]
    fixed = TokenBatchSampler([5] * 200, [5] * 200, 60, shuffle=False)
    assert np.concatenate(fixed.epoch_batches(0)).tolist() == list(range(200))


def take(s: TokenBatchSampler, count: int) -> list[list[int]]:
    """The next `count` batches, passing from epoch to epoch as a training loop does."""
    out: list[list[int]] = []
    while len(out) < count:
        out.extend(b.tolist() for _, b in zip(range(count - len(out)), s))
    return out


@settings(max_examples=80, deadline=None)
@given(plans, st.data())
def test_restored_position_continues_with_the_same_batches(plan: dict, data: st.DataObject) -> None:
    reference = take(sampler(plan), 2 * len(sampler(plan)))  # epochs 0 and 1
    stop = data.draw(st.integers(0, len(reference)))
    original = sampler(plan)
    consumed = take(original, stop)
    restored = sampler(plan)
    restored.load_state_dict(original.state_dict())
    assert consumed + take(restored, len(reference) - stop) == reference


@settings(max_examples=100, deadline=None)
@given(plans, st.integers(2, 4))
def test_ranks_get_disjoint_equal_batches_covering_the_epoch(plan: dict, world: int) -> None:
    """The remainder is never dropped or repeated: the largest batches are split instead.

    That is impossible only when there are too few examples to make a multiple of `world`
    batches (e.g. 3 single-example batches for 2 ranks): then construction refuses.
    """
    n_batches = len(sampler(plan).epoch_batches(0))
    if len(plan["pairs"]) < world * -(-n_batches // world):
        with pytest.raises(DataError, match="same number of batches"):
            sampler(plan, world_size=world).epoch_batches(0)
        return
    per_rank = [sampler(plan, rank=r, world_size=world).epoch_batches(0) for r in range(world)]
    assert len({len(batches) for batches in per_rank}) == 1
    everything = np.concatenate([b for batches in per_rank for b in batches])
    assert sorted(everything.tolist()) == list(range(len(plan["pairs"])))


def test_split_to_multiple_keeps_every_example() -> None:
    batches = [np.arange(0, 6), np.arange(6, 7), np.arange(7, 9)]
    split = split_to_multiple(batches, 4)
    assert len(split) == 4 and np.concatenate(split).tolist() == list(range(9))


def test_token_batches_count_the_longest_member_of_either_side() -> None:
    sizes = np.array([2, 2, 2, 5])
    batches = token_batches(np.arange(4), [sizes, sizes], max_tokens=8)
    assert [b.tolist() for b in batches] == [[0, 1, 2], [3]]  # 4 * 5 > 8, 3 * 2 <= 8
    src, tgt = np.array([1, 1, 1, 1]), np.array([1, 1, 3, 1])  # the target is the wider side
    assert [b.tolist() for b in token_batches(np.arange(4), [src, tgt], 8)] == [[0, 1], [2, 3]]
    assert [b.tolist() for b in token_batches(np.arange(4), [src], 8)] == [[0, 1, 2, 3]]


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), max_size=30), max_tokens=st.integers(1, 40))
def test_token_batches_cover_every_example_once_and_hold_the_budget(sizes, max_tokens) -> None:
    sizes = np.array(sizes, dtype=np.int64)
    order = np.random.default_rng(len(sizes)).permutation(len(sizes))
    batches = token_batches(order, [sizes], max_tokens)
    assert np.concatenate([order[:0], *batches]).tolist() == order.tolist()  # in order, once
    for batch in batches:
        assert len(batch) >= 1  # an example over the budget goes alone, never in an empty one
        assert len(batch) == 1 or len(batch) * sizes[batch].max() <= max_tokens


def test_longest_first_batches_for_decoding() -> None:
    lengths = [5, 1, 9, 3, 3, 20, 2]
    batches = longest_first_batches(lengths, max_tokens=10)
    assert sorted(i for b in batches for i in b) == list(range(7))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) == 1 or longest * len(batch) <= 10
        assert lengths[batch[0]] == longest  # sorted: the first is the longest
    assert batches[0] == [5]  # 20 > budget: alone
    assert longest_first_batches([3, 3, 3], 9) == [[0, 1, 2]]  # ties keep the input order
    assert longest_first_batches([], 9) == []


def test_an_example_over_the_budget_is_refused_at_construction() -> None:
    with pytest.raises(DataError, match=r"example 2 has 40 target tokens .* max_tokens=32"):
        TokenBatchSampler([3, 3, 3], [3, 3, 39], 32)


def test_state_from_a_different_plan_is_refused() -> None:
    s = TokenBatchSampler([3] * 10, [3] * 10, 16, seed=1)
    with pytest.raises(DataError, match="saved seed=2"):
        s.load_state_dict({**s.state_dict(), "seed": 2})


def test_padding_stats_and_iterate_batches() -> None:
    rng = np.random.default_rng(0)
    src = rng.integers(1, 40, 500)
    tgt = src + rng.integers(0, 3, 500)  # as in real data, the lengths of a pair go together
    s = TokenBatchSampler(src, tgt, 400, seed=0)
    stats = s.padding_stats()
    assert stats["real_tokens"] == int((src + 1).sum() + (tgt + 1).sum())
    assert stats["padded_tokens"] < 1.1 * stats["real_tokens"]
    dataset = [(np.full(a, 7), np.full(b, 8)) for a, b in zip(src, tgt)]
    batches = list(iterate_batches(dataset, s))
    assert sum(len(b) for b in batches) == 500
    assert sum(b.n_tgt_tokens for b in batches) == int((tgt + 1).sum())
    assert all(b.src.numel() <= 400 and b.tgt_out.numel() <= 400 for b in batches)
