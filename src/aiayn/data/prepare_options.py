"""What `aiayn prepare` can be told, in one typed place: each default is written here once
and read by `prepare`, the recipes (which start from their own `PrepareOptions`) and the
command line's help.

    options = PrepareOptions(vocab_size=37000)                  # sec. 5.1: shared BPE, En-De
    options = dataclasses.replace(options, max_len_ratio=1.5)   # one change, checked again

Kept apart from `data/prepare.py` so that `aiayn --help` need not import sentencepiece.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from aiayn.errors import ConfigError


@dataclass(frozen=True)
class PrepareOptions:
    """Options of `prepare` (sec. 5.1: one BPE vocabulary shared by both languages)."""

    vocab_size: int | None = None  # BPE pieces (each language's, with joint_vocab false)
    # A checkpoint whose vocabulary encodes the text instead of a new BPE (fine-tuning)
    vocab_from: str | None = None
    src: str = "en"  # source language: the suffix of the source files
    tgt: str = "de"  # target language
    joint_vocab: bool = True  # the paper's shared vocabulary; false: one per language
    max_tokens_per_side: int | None = 250  # training filter, subword tokens (None: off)
    max_len_ratio: float | None = None  # training filter, longer / shorter side (None: off)
    workers: int | None = None  # encoding processes (None: every core)
    vocab_sample_sentences: int = 2_000_000  # sentences sentencepiece learns from
    seed: int = 1  # of that sample
    split_by_script: bool = True  # no piece mixes letters and brackets (parsing: false)
    overwrite: bool = False  # replace an output directory `prepare` made before
    quiet: bool = False  # no progress bars, no report

    def __post_init__(self) -> None:
        """Refuse impossible options before the corpus is read (sentencepiece would take some,
        like a negative seed, only after reading it all, and fail with its own message)."""
        # sentencepiece samples at least 101 sentences (or all, which 0 would mean to it)
        limits = [("vocab size", self.vocab_size, 5),
                  ("vocabulary sample", self.vocab_sample_sentences, 101), ("seed", self.seed, 0),
                  ("max tokens per side", self.max_tokens_per_side, 1),
                  ("workers", self.workers, 1)]  # fmt: skip
        for what, value, low in limits:
            if value is not None and not value >= low:
                raise ConfigError(f"the {what} must be at least {low}, got {value}")
        ratio = self.max_len_ratio
        if ratio is not None and not 1.0 <= ratio < math.inf:  # NaN fails too
            raise ConfigError(f"the max length ratio must be a number >= 1, got {ratio}")
        if self.src == self.tgt:
            raise ConfigError(f"source and target languages are both {self.src!r}")
        if (self.vocab_size is None) == (self.vocab_from is None):
            raise ConfigError("give a vocabulary size (a new BPE vocabulary) or a checkpoint "
                              "whose vocabulary to use (--vocab-from), not both")  # fmt: skip
        if self.vocab_from is not None and not self.joint_vocab:
            raise ConfigError("--separate-vocabs trains vocabularies; with --vocab-from the "
                              "checkpoint's are used as they are")  # fmt: skip


def default(name: str) -> object:
    """The default of option `name` (for help texts)."""
    return next(f.default for f in fields(PrepareOptions) if f.name == name)
