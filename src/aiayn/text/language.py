"""Which language a text is in, among a few: the server's `/detect` and `"source": "auto"`.

    LanguageIdentifier(["en", "de"]).rank("Der Hund schläft.")   # [("de", 0.99...), ("en", ...)]

The identifier is the corpus cleaning's, py3langid (`aiayn.data.language` says why that
one), restricted to a set of languages (`set_languages`), which is what a server wants: it
only has to tell apart the languages it can translate from. Its probabilities are
normalised over that set.

Codes the identifier does not know (e.g. a made-up "xx") cannot be detected: they are
left out of the set, and `known` lists those that are in it.
"""

from __future__ import annotations

import threading

from aiayn.data.language import new_identifier


class LanguageIdentifier:
    """py3langid restricted to `languages` (ISO 639-1 codes), loaded on first use."""

    def __init__(self, languages: list[str]) -> None:
        self.languages = list(dict.fromkeys(languages))
        self._identifier = None
        self._known: list[str] | None = None
        self._lock = threading.Lock()

    def load(self):
        """The identifier, loaded once (a server does it before it is ready)."""
        with self._lock:
            if self._identifier is None:
                identifier = new_identifier()
                labels = set(identifier.labels)
                self._known = [code for code in self.languages if code in labels]
                if len(self._known) > 1:
                    identifier.set_languages(self._known)
                self._identifier = identifier
        return self._identifier

    @property
    def known(self) -> list[str]:
        """The languages among `languages` that the identifier can tell apart."""
        self.load()
        return list(self._known or [])

    def rank(self, text: str) -> list[tuple[str, float]]:
        """Each known language with its probability (summing to 1), most likely first;
        with fewer than two known languages, that one (or none) with probability 1."""
        identifier = self.load()
        known = self._known or []
        if len(known) < 2:
            return [(code, 1.0) for code in known]
        return [(code, float(p)) for code, p in identifier.rank(text)]
