"""A tiny checkpoint directory for translate / evaluate tests: random d_model-16 weights and a
300-piece BPE vocabulary trained on a few hundred made-up lines (byte fallback needs ~300)."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import torch

from aiayn.checkpoint import save_checkpoint
from aiayn.config import Config, DecodeConfig
from aiayn.data.vocab import Vocab
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config

WORDS = "the cat sat on a mat der Hund die Katze sitzt auf einer Matte rich-text".split()


@functools.lru_cache(maxsize=1)
def tiny_vocab() -> Vocab:
    rng = random.Random(0)
    return Vocab.train([" ".join(rng.choices(WORDS, k=8)) for _ in range(300)], vocab_size=300)


def save_tiny_checkpoint(
    path: Path, max_len_offset: int = 4, meta: dict | None = None, seed: int = 0,
    **model: object,
) -> Path:
    """A checkpoint without trainer state (like an averaged one); short outputs by default.
    `meta` goes into its `checkpoint.json` (e.g. {"languages": {"source": "en", ...}});
    `seed` draws its weights (another seed: another model, translating differently)."""
    vocab = tiny_vocab()
    config = Config(
        model=tiny_model_config(vocab_size=vocab.size, **model),
        decode=DecodeConfig(max_len_offset=max_len_offset),
    )
    torch.manual_seed(seed)
    return save_checkpoint(path, Transformer(config.model), config, vocab, vocab, meta=meta)
