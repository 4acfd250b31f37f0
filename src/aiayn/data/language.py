"""What language and what script a line is written in: the two judgements of the corpus
cleaning (`data/clean.py`) that need to know about languages, and the identifier itself,
which the server's `/detect` (`text.language`) loads too.

Language identification is py3langid's (a maintained fork of langid.py: Lui and Baldwin,
"langid.py: An Off-the-shelf Language Identification Tool", ACL 2012; also OpusFilter's
default identifier). Why this one: its model ships inside the package (an npz array file,
loaded without pickle, so nothing is fetched at run time and nothing unsafe is loaded), it
needs only NumPy, it covers about a hundred languages, and on short sentences such as image
captions it mislabels fewer lines than CLD2 (pycld2) and lingua's fast mode. lingua's
accurate mode is as good but much slower and a far larger wheel; CLD2 is faster but mislabels
more short German lines. docs/cleaning.md gives the measured figures.

A line is judged to be in another language only when the identifier is *confident*: its
best guess is another language and that language is at least `ratio` times as probable as
the expected one. Names, numbers and one-word lines ("Paris", "2019", "OK") spread the
probability over many languages and so are never judged wrong; a sentence in the wrong
language ("Where is the station?" where German is expected) is thousands of times likelier
to be English. Closely related languages that identifiers confuse (Bosnian, Croatian,
Serbian; Indonesian, Malay; Danish, Norwegian) count as one.

The script tables say which writing systems each language uses (ISO 639 codes). They are
data of their own, so that the identifier's model (large in memory) is loaded only
where the language filter runs.
"""

from __future__ import annotations

from functools import lru_cache

import regex

# Languages that identifiers confuse with each other, judged as one (py3langid's codes).
_CLOSE = [{"bs", "hr", "sr", "sh", "cnr"}, {"id", "ms"}, {"da", "no", "nb", "nn"},
          {"zh", "yue", "wuu"}]  # fmt: skip

# Writing systems (Unicode script names, as `regex`'s \p{Script=...} takes them) of the
# languages not written in Latin letters alone.
SCRIPTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(["ru", "uk", "be", "bg", "mk", "kk", "ky", "mn", "tg", "tt", "ba"],
                    ("Cyrillic",)),
    "sr": ("Cyrillic", "Latin"), "uz": ("Latin", "Cyrillic"), "ku": ("Latin", "Arabic"),
    "el": ("Greek",), "grc": ("Greek",),
    **dict.fromkeys(["ar", "ary", "arz", "fa", "ps", "ur", "ug", "sdh", "uzs"], ("Arabic",)),
    **dict.fromkeys(["he", "hbo", "yi"], ("Hebrew",)),
    **dict.fromkeys(["hi", "mr", "ne", "sa", "gom"], ("Devanagari",)),
    "bn": ("Bengali",), "as": ("Bengali",), "pa": ("Gurmukhi",), "gu": ("Gujarati",),
    "or": ("Oriya",), "ta": ("Tamil",), "te": ("Telugu",), "kn": ("Kannada",),
    "ml": ("Malayalam",), "si": ("Sinhala",), "th": ("Thai",), "lo": ("Lao",),
    "km": ("Khmer",), "my": ("Myanmar",), "ka": ("Georgian",), "hy": ("Armenian",),
    "am": ("Ethiopic",), "dz": ("Tibetan",), "bo": ("Tibetan",), "dv": ("Thaana",),
    **dict.fromkeys(["zh", "yue", "wuu"], ("Han",)),
    "ja": ("Han", "Hiragana", "Katakana"), "ko": ("Hangul", "Han"),
}  # fmt: skip
# Languages written in Latin letters (py3langid's, and a few more that CLD2 and OPUS use).
LATIN = frozenset(
    "ace af an ast az bcl br bs ca crh cs cy da de en eo es et eu ext fi fil fo fr fuv fy ga "
    "gcf gcr gd gl gug guw ha hr ht hu id ig is it jv kab kik la lb lg lij ln lt ltg lv mg "
    "ms mt nb nds nl nn no nso oc om pcm pl pt qu rm ro rw se sk sl sn so sq st sv sw tk tl "
    "tn tr vec vi vo wa xh yo zu".split()
)
# Scripts whose one character carries about a syllable or a word: character counts of
# their lines are not comparable with an alphabet's.
DENSE_SCRIPTS = frozenset({"Han", "Hangul", "Hiragana", "Katakana"})


def base_code(lang: str) -> str:
    """The language part of a code: "pt_BR" and "pt-br" -> "pt"."""
    return lang.lower().replace("_", "-").split("-")[0]


def new_identifier():  # noqa: ANN201 (py3langid's LanguageIdentifier)
    """A fresh py3langid identifier with normalised probabilities (slow to load: once per
    process). Fresh, because `set_languages` (the server's restriction to the languages it serves,
    `text.language`) changes it in place."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


@lru_cache(maxsize=1)
def _identifier():  # noqa: ANN202
    """The cleaning's identifier, over every language it knows: one per process."""
    return new_identifier()


def identifiable(lang: str) -> bool:
    """Whether the identifier knows language `lang` (else the language filter skips it)."""
    return base_code(lang) in _identifier().labels


def scripts_of(lang: str) -> tuple[str, ...] | None:
    """The scripts `lang` is written in, or None for a code neither table knows."""
    code = base_code(lang)
    return SCRIPTS.get(code) or (("Latin",) if code in LATIN else None)


def _group(code: str) -> set[str]:
    return next((group for group in _CLOSE if code in group), {code})


class LanguageJudge:
    """Says whether a line is confidently in another language than `lang` (see above).

    Picklable without its model (each worker process loads the identifier once)."""

    def __init__(self, lang: str, ratio: float) -> None:
        self.lang, self.ratio = base_code(lang), ratio
        self.group = _group(self.lang)

    def is_other(self, text: str) -> bool:
        """True if `text` is confidently in another language (its best guess's probability
        at least `ratio` times that of `lang` and its close relatives)."""
        identifier = _identifier()
        best, _ = identifier.classify(text)
        if best in self.group:  # the common case: one pass of the model
            return False
        ranked = identifier.rank(text)
        expected = sum(p for code, p in ranked if code in self.group)
        best_other = next(p for code, p in ranked if code not in self.group)
        return best_other >= self.ratio * expected


class ScriptJudge:
    """The share of a line's letters written in its language's scripts."""

    def __init__(self, lang: str) -> None:
        scripts = scripts_of(lang)
        if scripts is None:
            raise ValueError(f"no script known for {lang!r}")
        # combining marks of any script (the Inherited one) go with their letters
        alternatives = "".join(rf"\p{{Script={s}}}" for s in (*scripts, "Inherited"))
        self._not_in_script = regex.compile(rf"[^{alternatives}]+")

    def share(self, letters: str) -> float:
        """Of `letters` (letters and marks only), the share in the language's scripts (1 if
        there are none)."""
        if not letters:
            return 1.0
        return len(self._not_in_script.sub("", letters)) / len(letters)
