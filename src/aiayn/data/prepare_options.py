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

# Every reason a training pair is removed, in the order they are judged and reported
# (data/clean.py says what each removes).
FILTERS = ("empty", "duplicate", "near_duplicate", "too_long", "ratio", "copy", "markup",
           "chars", "script", "language", "char_ratio", "misaligned")  # fmt: skip
# The cleaning filters that can be skipped (empty and the token filters have their own).
CLEANING = tuple(f for f in FILTERS if f not in ("empty", "too_long", "ratio"))


@dataclass(frozen=True)
class CleanOptions:
    """Which cleaning filters run on the training pairs, and their thresholds (each filter
    is described in data/clean.py; the defaults remove under 0.2% of Multi30k's curated
    pairs, docs/cleaning.md)."""

    skip: tuple[str, ...] = ()  # names from CLEANING not to run
    min_copy_words: int = 4  # copy: shorter copies (names, titles) are kept
    min_letter_share: float = 0.5  # chars: letters among a side's non-space characters
    min_script_share: float = 0.5  # script: letters in the language's scripts
    language_ratio: float = 20.0  # language: another language this many times likelier
    max_char_ratio: float = 2.0  # char_ratio: longer side / shorter side, in characters
    min_ratio_chars: int = 20  # char_ratio: judged when the longer side has this many
    misaligned_mads: float = 2.5  # misaligned: robust SDs below the sample's median score
    misaligned_sample: int = 50_000  # misaligned: pairs Model 1 learns from (data/lexical.py)
    misaligned_min_words: int = 3  # misaligned: judged when each side has this many words
    allow_heavy: bool = False  # go on when one filter removes over half the pairs

    def __post_init__(self) -> None:
        unknown = sorted(set(self.skip) - set(CLEANING))
        if unknown:
            raise ConfigError(f"no cleaning filter {', '.join(map(repr, unknown))} (the "
                              f"filters: {', '.join(CLEANING)})")  # fmt: skip
        for what, value in (("min letter share", self.min_letter_share),
                            ("min script share", self.min_script_share)):  # fmt: skip
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"the {what} must be between 0 and 1, got {value}")
        for what, value in (("language ratio", self.language_ratio),
                            ("max char ratio", self.max_char_ratio)):  # fmt: skip
            if not 1.0 <= value < math.inf:
                raise ConfigError(f"the {what} must be a number >= 1, got {value}")
        if min(self.min_copy_words, self.min_ratio_chars, self.misaligned_min_words) < 1:
            raise ConfigError("the min copy words, min ratio chars and misaligned min words "
                              "must be at least 1")  # fmt: skip
        if not 0.0 < self.misaligned_mads < math.inf or self.misaligned_sample < 1:
            raise ConfigError("the misaligned filter's deviations must be a number > 0 and "
                              "its sample at least 1 pair")  # fmt: skip

    def runs(self, name: str) -> bool:
        return name not in self.skip


NO_CLEANING = CleanOptions(skip=CLEANING)  # only empty pairs (and the token filters) go


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
    clean: CleanOptions = CleanOptions()  # training filters for crawled text (data/clean.py)
    removed: str | None = None  # a TSV file to write every removed training pair to
    dry_run: bool = False  # clean the training pairs and report, write no directory
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
