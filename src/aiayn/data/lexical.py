"""The `misaligned` filter's judge: IBM Model 1 word translation probabilities, learned
from the corpus itself, and a threshold learned from misaligned pairs made on purpose.

A misaligned pair (a sentence beside another pair's translation: crawled corpora hold many)
is two fluent sentences of the right languages, so no filter of one side sees it; only a
bilingual model does. IBM Model 1 (Brown et al., "The Mathematics of Statistical Machine
Translation", 1993) is the smallest such model: t(f | e), the probability that word e
translates as f, learned by EM from a sample of the training pairs, with no dictionary and
nothing downloaded. A pair's score is how much better each side's words are explained by
the other side than by their frequency alone, per word, the two directions averaged:
log(p(f | source) / u(f)) over the target words f, with p(f | source) Model 1's
(1 / (l + 1)) sum_e t(f | e) (e over the l source words and NULL) smoothed with the
unigram probability u(f). Word-alignment filters score pairs so (OpusFilter's
WordAlignFilter, with eflomal's models); dividing by u(f) keeps frequent words from
making any two sentences look related.

The threshold. EM fits whatever it is given, misaligned pairs too, so what a misaligned
pair scores depends on the corpus. The sample therefore learns with decoys: some of its
sentences re-paired at random (each source beside another pair's target), misaligned by
construction and learned from like the rest. A pair scoring below the `quantile` of the
decoys' scores (`CleanOptions`' 0.95: what 19 in 20 of them score under) is misaligned:
by construction about that share of misaligned pairs goes. So the threshold
follows each corpus and language pair rather than being a number, and a translation goes
only where it scores like a random pairing. Pairs with a side of fewer than `min_words`
words are not judged: over one or two words the mean is mostly chance (a "No." / "Nein."
where the sample's "no" is mostly "kein").

Why by hand: eflomal, what OpusFilter runs, is C source compiled at install that aligns
whole files; Model 1's EM is a few lines of NumPy over a bounded sample (`learn`), and its
pruned table is small enough to travel to the encoding workers. Words are runs of letters
and digits, case folded; a word the sample never saw says nothing and is left out (rare
names would otherwise sink good pairs).
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
SMOOTHING = 0.1  # the unigram's weight in p(f | source)
DECOYS = 0.05  # random pairings learned with the sample, as a share of it


def words(text: str) -> list[str]:
    """The words Model 1 sees: runs of letters and digits, case folded."""
    return _WORD.findall(text.casefold())


@dataclass
class Model1:
    """t(f | e) for one direction: the words' ids (source id 0 is NULL) and the table, as
    sorted keys e * len(tgt_ids) + f beside their probabilities; u(f) beside them."""

    src_ids: dict[str, int]
    tgt_ids: dict[str, int]
    keys: np.ndarray  # (entries,) int64, sorted
    probs: np.ndarray  # (entries,) float64
    unigram: np.ndarray  # (target words,) u(f), the target words' share of the sample's

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
        kept = t >= KEEP
        every = np.array([tgt_ids[w] for ws in tgt for w in ws], np.int64)
        counts = np.bincount(every, minlength=len(tgt_ids)).astype(np.float64)  # c(f)
        return cls(src_ids, tgt_ids, keys[kept], t[kept], counts / max(counts.sum(), 1.0))

    def log_ratio(self, src: list[str], tgt: list[str]) -> float | None:
        """Mean over the known words f of `tgt` of log(p(f | src) / u(f)), p Model 1's
        smoothed with u; None where `tgt` has no word the sample saw."""
        f = np.array([self.tgt_ids[w] for w in tgt if w in self.tgt_ids], np.int64)
        if f.size == 0:
            return None
        e = np.array([NULL] + [self.src_ids[w] for w in src if w in self.src_ids], np.int64)
        key = e[None, :] * len(self.tgt_ids) + f[:, None]  # (target words, l + 1)
        at = np.searchsorted(self.keys, key).clip(max=max(len(self.keys) - 1, 0))
        found = self.keys[at] == key if len(self.keys) else np.zeros(key.shape, bool)
        t = np.where(found, self.probs[at] if len(self.keys) else 0.0, 0.0)
        u = self.unigram[f]  # (target words,)
        p = (1 - SMOOTHING) * t.sum(axis=1) / (len(src) + 1) + SMOOTHING * u
        return float(np.mean(np.log(p) - np.log(u)))


@dataclass
class MisalignmentJudge:
    """Both directions' Model 1 and the threshold learned from a sample of pairs."""

    forward: Model1  # t(target word | source word)
    backward: Model1  # t(source word | target word)
    threshold: float  # a pair scoring below it is misaligned
    pairs: int  # the sample's size
    min_words: int  # pairs with a side shorter than this are not judged

    @classmethod
    def learn(cls, pairs: Sequence[Pair], quantile: float, min_words: int,
              seed: int = 1) -> MisalignmentJudge:  # fmt: skip
        """Model 1 both ways over `pairs` and decoys (`DECOYS` of them re-paired at random,
        no source with its own target), and the threshold: the decoys' `quantile` score."""
        rng = np.random.default_rng(seed)
        chosen = rng.permutation(len(pairs))[: max(2, round(DECOYS * len(pairs)))]
        decoys = [(pairs[i][0], pairs[j][1]) for i, j in zip(chosen, np.roll(chosen, 1))]
        src = [words(s) for s, _ in [*pairs, *decoys]]
        tgt = [words(t) for _, t in [*pairs, *decoys]]
        forward, backward = Model1.learn(src, tgt), Model1.learn(tgt, src)
        judge = cls(forward, backward, -math.inf, len(pairs), min_words)
        scores = [x for x in (judge.score(s, t) for s, t in decoys) if x is not None]
        if scores:
            judge.threshold = float(np.quantile(scores, quantile))
        return judge

    def score(self, src: str, tgt: str) -> float | None:
        """`Model1.log_ratio` of each side given the other, the two averaged (one where
        the other side has no known word); None: not judged (no known word either way,
        or a side of fewer than `min_words` words)."""
        s, t = words(src), words(tgt)
        if min(len(s), len(t)) < self.min_words:
            return None
        both = [x for x in (self.forward.log_ratio(s, t), self.backward.log_ratio(t, s))
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
