"""Cleaning web-crawled training pairs: the filters `prepare` applies before encoding.

Corpora from OPUS, ParaCrawl, CCMatrix or one's own crawl hold duplicates, untranslated
copies, lines in the wrong language, boilerplate and markup. A model learns from them
too: untranslated copies teach it to copy its input, the noise that hurts NMT most
(Khayrallah and Koehn, "On the Impact of Various Types of Noise on Neural Machine
Translation", WNGT 2018). Each filter below removes one kind; all run on the training
split only (valid and test keep every line, so outputs stay aligned with references):

    empty           a side empty or whitespace only (always on)
    duplicate       the same pair seen before (the first is kept)
    near_duplicate  the same pair after lowercasing, digits as 0 and whitespace squeezed
    too_long, ratio the subword-token length filters of `LengthFilter` (as before cleaning;
                    they come before the others, which need not then read a runaway line)
    copy            source equal to target (case and spacing aside), in lines of at least
                    `min_copy_words` words: names and titles legitimately stay as they are
    markup          an HTML/XML tag or character entity on either side
    chars           a side whose letters are under `min_letter_share` of its characters
                    (URLs, e-mail addresses and markup not counted as letters): lines of
                    digits, punctuation, links or code
    script          a side whose letters are under `min_script_share` in its language's
                    scripts (Cyrillic for ru, Latin for de; see data/language.py)
    language        a side confidently identified as another language than --src / --tgt
    char_ratio      the longer side over `max_char_ratio` times the shorter in characters,
                    judged when the longer has at least `min_ratio_chars` (short sentences
                    vary most); not for scripts where a character is a syllable or word
    misaligned      sides that do not translate each other: IBM Model 1 learned from a
                    sample of the pairs the other filters keep scores the pair more than
                    `misaligned_mads` robust SDs below the sample's median, judged when
                    each side has `misaligned_min_words` words (data/lexical.py; not for
                    scripts written without spaces between words)

A pair that several filters would remove is counted under the first, in that order. The
filters that take no corpus-wide state (all but the two duplicate ones) run here, in the
encoding worker processes (`PairFilter`); duplicates are found in the parent process by
64-bit hashes (`SeenHashes`): 16 bytes for each distinct pair, the only memory that grows
with the corpus (a 100-million-pair corpus: 1.6 GB), everything else streams.

Why not OpusFilter (Helsinki-NLP), the field's toolbox: as a library it brings pandas,
scikit-learn, matplotlib, graphviz, a compiled Moses tokenizer and a large language
identifier into the core install, and its filters score whole files through its own YAML
pipeline. The definitions here follow its filters of the same purpose (AlphabetRatioFilter,
CharacterScoreFilter, LengthRatioFilter, HtmlTagFilter, LanguageIDFilter with py3langid,
its duplicate removal by hashes), each a few lines over `regex` and py3langid.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import regex

from aiayn.data.language import (
    DENSE_SCRIPTS,
    LanguageJudge,
    ScriptJudge,
    identifiable,
    scripts_of,
)
from aiayn.data.lexical import MisalignmentJudge, reservoir
from aiayn.data.prepare_options import CleanOptions

Pair = tuple[str, str]
MIN_ALIGNMENT_SAMPLE = 200  # pairs the misaligned filter needs to learn from, else it does not run

_DIGIT = re.compile(r"\d")
_MARKUP = regex.compile(
    r"</?[A-Za-z][\w:.-]*(?:\s[^<>]*)?/?>"  # a tag: <p>, </div>, <a href="...">, <br/>
    r"|&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});"  # &amp; &#160;
)
_NOT_TEXT = regex.compile(r"(?:https?://|www\.)\S+|\S+@\S+\.\w+")  # URLs, e-mail addresses
_NOT_LETTER = regex.compile(r"[^\p{L}\p{M}]+")


def normalized(text: str) -> str:
    """The form near-duplicates share: lowercase, every digit 0, whitespace squeezed."""
    return " ".join(_DIGIT.sub("0", text.casefold()).split())


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def pair_hashes(src: str, tgt: str) -> tuple[int, int]:
    """(exact, normalized) 64-bit hashes of a pair. NUL joins the sides: no line holds one."""
    return _hash64(f"{src}\0{tgt}"), _hash64(f"{normalized(src)}\0{normalized(tgt)}")


@dataclass
class Verdicts:
    """One chunk's judgements: the first per-pair filter removing each pair (None: kept so
    far), and every pair's hashes for the duplicate filters (0 for empty pairs)."""

    reasons: list[str | None]
    exact: np.ndarray  # (pairs,) uint64
    near: np.ndarray  # (pairs,) uint64


@dataclass
class _SideFilter:
    """The per-side judgements for one language: chars, script, language."""

    letter_share: float
    script: ScriptJudge | None  # None: the script filter does not run for this language
    script_share: float
    language: LanguageJudge | None  # None: the language filter does not run

    def reason(self, text: str) -> str | None:
        """Why this side sinks its pair ("chars", "script", "language"), or None."""
        bare = _MARKUP.sub(" ", text) if "<" in text or "&" in text else text
        if "/" in bare or "www." in bare or "@" in bare:
            bare = _NOT_TEXT.sub(" ", bare)
        letters = _NOT_LETTER.sub("", bare)  # letters and combining marks
        if len(letters) < self.letter_share * len("".join(text.split())):
            return "chars"
        if self.script is not None and self.script.share(letters) < self.script_share:
            return "script"
        if self.language is not None and self.language.is_other(text):
            return "language"
        return None


@dataclass
class PairFilter:
    """The filters that judge each pair on its own, for languages `src` -> `tgt`.

    Built in the parent and sent to each worker process; py3langid's model is loaded
    there, on first use. `notes` says which filters cannot run for these languages."""

    options: CleanOptions
    src: str
    tgt: str
    notes: list[str] = field(default_factory=list)
    misaligned: MisalignmentJudge | None = None  # `learn_alignment`'s; None: not run

    def __post_init__(self) -> None:
        self._sides = (self._side(self.src), self._side(self.tgt))
        scripts = [scripts_of(lang) or () for lang in (self.src, self.tgt)]
        self._dense = any(DENSE_SCRIPTS.intersection(s) for s in scripts)
        self._char_ratio = self.options.runs("char_ratio") and not self._dense
        if self.options.runs("char_ratio") and self._dense:
            self.notes.append("char_ratio: not run, characters of "
                              f"{self.src} and {self.tgt} are not comparable")  # fmt: skip

    def learn_alignment(self, pairs: Iterable[Pair], seed: int = 1) -> None:
        """Learn the misaligned filter's judge from a uniform sample of `pairs` (the
        training pairs, streamed: only the sample is held), less those the other filters
        remove; it then runs in `reason`. Notes what it learned, or why it does not run."""
        o = self.options
        if not o.runs("misaligned"):
            return
        if self._dense:
            self.notes.append(f"misaligned: not run, {self.src} or {self.tgt} is written "
                              "without spaces between words")  # fmt: skip
            return
        sample = [p for p in reservoir(pairs, o.misaligned_sample, seed) if self.reason(*p) is None]
        if len(sample) < MIN_ALIGNMENT_SAMPLE:
            self.notes.append(f"misaligned: not run, {len(sample)} pairs to learn from "
                              f"(at least {MIN_ALIGNMENT_SAMPLE})")  # fmt: skip
            return
        judge = MisalignmentJudge.learn(sample, o.misaligned_mads, o.misaligned_min_words)
        self.misaligned = judge
        self.notes.append(f"misaligned: Model 1 learned from {judge.pairs} pairs; a pair's "
                          f"score (log-likelihood a word) below {judge.threshold:.3f} = "
                          f"median {judge.median:.3f} - {o.misaligned_mads:g} x "
                          f"{judge.spread:.3f}")  # fmt: skip

    def _side(self, lang: str) -> _SideFilter:
        o = self.options
        script = language = None
        if o.runs("script") and scripts_of(lang) is None:
            self.notes.append(f"script: not run for {lang!r}, a language it does not know")
        elif scripts_of(lang) is not None:
            script = ScriptJudge(lang)
        if o.runs("language") and not identifiable(lang):
            self.notes.append(f"language: not run for {lang!r}, a language the identifier "
                              "does not know")  # fmt: skip
        elif o.runs("language"):
            language = LanguageJudge(lang, o.language_ratio)
        letter_share = o.min_letter_share if o.runs("chars") else 0.0
        share = o.min_script_share if o.runs("script") else 0.0
        return _SideFilter(letter_share, script if share > 0 else None, share, language)

    def reason(self, src: str, tgt: str) -> str | None:
        """The first per-pair filter that removes (src, tgt), or None to keep it."""
        if not src.strip() or not tgt.strip():
            return "empty"
        o = self.options
        if o.runs("copy"):
            words = src.casefold().split()
            if len(words) >= o.min_copy_words and words == tgt.casefold().split():
                return "copy"
        if o.runs("markup") and (_MARKUP.search(src) or _MARKUP.search(tgt)):
            return "markup"
        for side, text in zip(self._sides, (src, tgt)):
            reason = side.reason(text)
            if reason is not None:
                return reason
        if self._char_ratio:
            short, long = sorted((len(src.strip()), len(tgt.strip())))
            if long >= o.min_ratio_chars and long > o.max_char_ratio * short:
                return "char_ratio"
        if self.misaligned is not None and self.misaligned.is_misaligned(src, tgt):
            return "misaligned"
        return None

    def judge(self, chunk: list[Pair], reasons: list[str | None] | None = None) -> Verdicts:
        """Every pair's reason and hashes (see `Verdicts`). `reasons`: those already found
        (by the token-length filters, which come first); only pairs without one are judged."""
        reasons = [r if r is not None else self.reason(src, tgt)
                   for (src, tgt), r in zip(chunk, reasons or [None] * len(chunk))]  # fmt: skip
        hashes = np.zeros((2, len(chunk)), np.uint64)
        if self.options.runs("duplicate") or self.options.runs("near_duplicate"):
            for i, ((src, tgt), reason) in enumerate(zip(chunk, reasons)):
                if reason != "empty":
                    hashes[:, i] = pair_hashes(src, tgt)
        return Verdicts(reasons, hashes[0], hashes[1])


class SeenHashes:
    """A set of 64-bit hashes kept as a few sorted NumPy runs (8 bytes a hash), merged as
    they grow like a binary counter: a batch is looked up by binary search in each run."""

    def __init__(self) -> None:
        self._runs: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(len(run) for run in self._runs)

    def seen(self, hashes: np.ndarray) -> np.ndarray:
        """Mark each hash seen before (in an earlier batch or earlier in this one), then add
        the batch. Returns a bool array, True where seen."""
        _, first = np.unique(hashes, return_index=True)
        seen = np.ones(len(hashes), bool)
        seen[first] = False
        for run in self._runs:
            at = np.minimum(np.searchsorted(run, hashes), len(run) - 1)
            seen |= run[at] == hashes
        self._add(np.sort(hashes[~seen]))  # the new ones, each once
        return seen

    def _add(self, run: np.ndarray) -> None:
        while self._runs and len(self._runs[-1]) <= 2 * len(run):
            run = np.union1d(self._runs.pop(), run)
        if len(run):
            self._runs.append(run)


@dataclass
class Deduplicator:
    """The two duplicate filters over the whole split, in input order (the first is kept)."""

    options: CleanOptions
    exact: SeenHashes = field(default_factory=SeenHashes)
    near: SeenHashes = field(default_factory=SeenHashes)

    def apply(self, verdicts: Verdicts) -> None:
        """Set "duplicate" / "near_duplicate" as the reason of the pairs seen before: they
        come first, whatever a per-pair filter said. Empty pairs are not looked up."""
        rows = np.array([r != "empty" for r in verdicts.reasons], bool)
        found: list[tuple[str, np.ndarray]] = []
        for name, hashes, seen in (("duplicate", verdicts.exact, self.exact),
                                   ("near_duplicate", verdicts.near, self.near)):  # fmt: skip
            if self.options.runs(name):
                found.append((name, seen.seen(hashes[rows])))
        indices = np.flatnonzero(rows)
        for name, seen_rows in reversed(found):  # duplicate wins over near_duplicate
            for i in indices[seen_rows]:
                verdicts.reasons[i] = name
