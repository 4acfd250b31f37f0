"""The `misaligned` filter's judge: IBM Model 1 word translation probabilities, learned
from the corpus itself, and how far below the corpus's usual pair a pair scores.

A misaligned pair (a sentence beside another pair's translation: crawled corpora hold many)
is two fluent sentences of the right languages, so no filter of one side sees it; only a
bilingual model does. IBM Model 1 (Brown et al., "The Mathematics of Statistical Machine
Translation", 1993) is the smallest such model: t(f | e), the probability that word e
translates as f, learned by EM from a sample of the training pairs, with no dictionary and
nothing downloaded. A pair's score is the mean log-likelihood per word of each side given
the other, the two directions averaged: log((1 / (l + 1)) sum_e t(f | e)) over the target
words f (e over the l source words and NULL). Word-alignment filters score pairs so
(OpusFilter's WordAlignFilter, with eflomal's models).

Only words seen `MIN_COUNT` times in the sample take part; the others are left out of the
sums and means. EM fits what it is given, and a word seen once or twice is explained by
whatever stood beside it: with every word, translations outside the sample scored far
below those inside it (docs/cleaning.md), and a corpus larger than the sample is mostly
outside it. With the frequent words only, both score alike.

A pair scoring more than `mads` robust standard deviations (1.4826 x the median absolute
deviation) below the median of the sample's scores is misaligned: the threshold follows
each corpus and language pair rather than being a number of nats. Pairs with a side of
fewer than `min_words` words are not judged: over one or two words the mean is mostly
chance (a "No." / "Nein." where the sample's "no" is mostly "kein").

Why by hand: eflomal, what OpusFilter runs, is C source compiled at install that aligns
whole files; Model 1's EM is a few lines of NumPy over a bounded sample (`learn`), and its
pruned table is small enough to travel to the encoding workers. Words are runs of letters
and digits, case folded.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import regex

Pair = tuple[str, str]

_WORD = regex.compile(r"\w+")
NULL = 0  # the source word every target word may also come from
ITERATIONS = 8  # EM iterations: the table changes little after these
KEEP = 1e-3  # t(f | e) below this is dropped from the table (as if 0)
FLOOR = 1e-3  # the least probability a target word gets: one unexplained word costs ~7 nats
MIN_COUNT = 10  # times a word is seen in the sample to take part
MAD_TO_SD = 1.4826  # the median absolute deviation of a normal distribution, in SDs


def words(text: str) -> list[str]:
    """The words Model 1 sees: runs of letters and digits, case folded."""
    return _WORD.findall(text.casefold())


@dataclass
class Model1:
    """t(f | e) for one direction: the ids of the words that take part (source id 0 is
    NULL) and the table, as sorted keys e * n_tgt + f beside their probabilities."""

    src_ids: dict[str, int]
    tgt_ids: dict[str, int]
    n_tgt: int  # target word ids, all words of the sample (the keys' multiplier)
    keys: np.ndarray  # (entries,) int64, sorted
    probs: np.ndarray  # (entries,) float64

    @classmethod
    def learn(cls, src: Sequence[list[str]], tgt: Sequence[list[str]]) -> Model1:
        """EM over the pairs of word lists (src[i], tgt[i]) from uniform t(f | e)."""
        src_ids, tgt_ids = {"": NULL}, {}
        es, fs, groups = [], [], []  # one entry per (target word, source word or NULL)
        position = 0
        for s, t in zip(src, tgt):
            e = np.array([NULL] + [src_ids.setdefault(w, len(src_ids)) for w in s], np.int64)
            f = np.array([tgt_ids.setdefault(w, len(tgt_ids)) for w in t], np.int64)
            es.append(np.tile(e, len(f)))  # (len(f) * len(e),)
            fs.append(np.repeat(f, len(e)))
            groups.append(np.repeat(np.arange(position, position + len(f)), len(e)))
            position += len(f)
        n_tgt = max(len(tgt_ids), 1)
        key = np.concatenate(es or [np.zeros(0, np.int64)]) * n_tgt + np.concatenate(fs or [np.zeros(0, np.int64)])
        group = np.concatenate(groups or [np.zeros(0, np.int64)])  # which target word
        keys, entry = np.unique(key, return_inverse=True)  # entry: each co-occurrence's key
        source = keys // n_tgt  # (entries,) e of each key
        t = np.ones(len(keys))
        for _ in range(ITERATIONS):
            p = t[entry]  # t(f | e) of each co-occurrence
            share = p / np.bincount(group, p, minlength=position)[group]  # posterior of e for f
            counts = np.bincount(entry, share, minlength=len(keys))  # expected c(e, f)
            t = counts / np.bincount(source, counts)[source]  # normalised over f for each e
        src_count = np.bincount(np.array([src_ids[w] for ws in src for w in ws], np.int64),
                                minlength=len(src_ids))  # fmt: skip
        tgt_count = np.bincount(np.array([tgt_ids[w] for ws in tgt for w in ws], np.int64),
                                minlength=n_tgt)  # fmt: skip
        src_count[NULL] = MIN_COUNT  # NULL always takes part
        kept = (t >= KEEP) & (src_count[source] >= MIN_COUNT) & (tgt_count[keys % n_tgt] >= MIN_COUNT)
        return cls({w: i for w, i in src_ids.items() if src_count[i] >= MIN_COUNT},
                   {w: i for w, i in tgt_ids.items() if tgt_count[i] >= MIN_COUNT}, n_tgt,
                   keys[kept], t[kept])  # fmt: skip

    def log_likelihood(self, src: list[str], tgt: list[str]) -> float | None:
        """Mean over the words f of `tgt` that take part of log((1 / (l + 1)) sum_e
        t(f | e)), e over those of `src` and NULL; None where no word of `tgt` takes part."""
        f = np.array([self.tgt_ids[w] for w in tgt if w in self.tgt_ids], np.int64)
        if f.size == 0:
            return None
        e = np.array([NULL] + [self.src_ids[w] for w in src if w in self.src_ids], np.int64)
        key = e[None, :] * self.n_tgt + f[:, None]  # (target words, l + 1)
        at = np.searchsorted(self.keys, key).clip(max=max(len(self.keys) - 1, 0))
        found = self.keys[at] == key if len(self.keys) else np.zeros(key.shape, bool)
        t = np.where(found, self.probs[at] if len(self.keys) else 0.0, 0.0)
        p = np.maximum(t.sum(axis=1) / len(e), FLOOR)  # (target words,)
        return float(np.log(p).mean())


@dataclass
class MisalignmentJudge:
    """Both directions' Model 1 and the threshold learned from a sample of pairs."""

    forward: Model1  # t(target word | source word)
    backward: Model1  # t(source word | target word)
    median: float  # of the sample's scores
    spread: float  # MAD_TO_SD x their median absolute deviation
    threshold: float  # a pair scoring below it is misaligned
    pairs: int  # the sample's size
    min_words: int  # pairs with a side shorter than this are not judged

    @classmethod
    def learn(cls, pairs: Sequence[Pair], mads: float, min_words: int) -> MisalignmentJudge:
        """Model 1 both ways over `pairs`, and the threshold `mads` spreads below the median
        of their scores."""
        src, tgt = [words(s) for s, _ in pairs], [words(t) for _, t in pairs]
        forward, backward = Model1.learn(src, tgt), Model1.learn(tgt, src)
        judge = cls(forward, backward, 0.0, 0.0, -math.inf, len(pairs), min_words)
        scores = np.array([x for x in map(judge.score_words, src, tgt) if x is not None])
        if scores.size:
            judge.median = float(np.median(scores))
            judge.spread = MAD_TO_SD * float(np.median(np.abs(scores - judge.median)))
            judge.threshold = judge.median - mads * judge.spread
        return judge

    def score(self, src: str, tgt: str) -> float | None:
        """`Model1.log_likelihood` of each side given the other, the two averaged (one
        where the other side has no word that takes part); None: not judged (no such word
        either way, or a side of fewer than `min_words` words)."""
        return self.score_words(words(src), words(tgt))

    def score_words(self, s: list[str], t: list[str]) -> float | None:
        """`score` of two sides already split into `words`."""
        if min(len(s), len(t)) < self.min_words:
            return None
        both = [x for x in (self.forward.log_likelihood(s, t), self.backward.log_likelihood(t, s))
                if x is not None]  # fmt: skip
        return sum(both) / len(both) if both else None

    def is_misaligned(self, src: str, tgt: str) -> bool:
        score = self.score(src, tgt)
        return score is not None and score < self.threshold


def reservoir(pairs: Iterable[Pair], size: int, seed: int) -> list[Pair]:
    """A uniform sample of `size` pairs from a stream of unknown length (Vitter's
    algorithm R): memory for the sample only, whatever the corpus."""
    rng, sample = random.Random(seed), []
    for i, pair in enumerate(pairs):
        if i < size:
            sample.append(pair)
        else:
            j = rng.randrange(i + 1)
            if j < size:
                sample[j] = pair
    return sample
