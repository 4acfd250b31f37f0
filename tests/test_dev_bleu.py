"""Dev BLEU batches its sentences with the translation batcher and puts every greedy
output back beside its own reference, whatever the budget cuts."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from torch import nn

import aiayn.train.validate as validate_module
from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID
from aiayn.train.validate import dev_bleu


class Pairs:
    """A dataset of (src_ids, tgt_ids) pairs with the lengths `BinarizedDataset` has."""

    def __init__(self, pairs):
        self.pairs = pairs
        self.src_lengths = np.array([len(s) for s, _ in pairs], dtype=np.int32)

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return self.pairs[i]


class Words:
    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


@pytest.mark.parametrize("max_tokens", [7, 30, 1000])
def test_each_output_is_scored_against_its_own_reference(monkeypatch, max_tokens):
    rng = np.random.default_rng(0)
    pairs = [(x, x) for x in (rng.integers(4, 50, rng.integers(1, 6)).tolist() for _ in range(25))]
    seen = []

    def copy_source(model, src, config, bos_id, eos_id):  # src: (batch, src_len), eos-ended
        seen.append(src.shape)
        rows = [[t for t in row.tolist() if t != PAD_ID][:-1] for row in src]  # drop the eos
        return [SimpleNamespace(tokens=row) for row in rows]

    monkeypatch.setattr(validate_module, "greedy_search", copy_source)
    model = nn.Linear(1, 1).train()
    model.config = SimpleNamespace(pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID)  # its specials
    assert dev_bleu(model, Pairs(pairs), Words(), 20, max_tokens, "cpu") == pytest.approx(100.0)
    assert model.training  # put back as it was
    assert sum(rows for rows, _ in seen) == 20  # the first 20 lines only
    assert all(rows == 1 or rows * length <= max_tokens for rows, length in seen)
