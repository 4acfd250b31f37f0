"""What the service's worker thread runs: a `Translator` on one batch of sentences.

All sentences of a batch share their decoding options (`Options`, the batcher groups by
them); those that asked for it also get their attention maps (`attention_view.explain`, one
teacher-forced pass on the translation found), which plain translation never computes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from aiayn.attention_view import explain, to_json
from aiayn.translate import Translator


@dataclass(frozen=True)
class Options:
    """The decoding options of a request (sec. 6.1's beam size and length penalty)."""

    beam: int
    alpha: float
    nbest: int


@dataclass
class Result:
    """One sentence's translations, best first: [(text, score)], and its attention."""

    nbest: list[tuple[str, float]]
    attention: dict | None = None


class TranslatorRunner:
    """Runs batches on one Translator; only the worker thread calls it."""

    def __init__(self, translator: Translator) -> None:
        self.translator = translator
        self.defaults = translator.decode

    def run(self, texts: Sequence[str], options: Options, extras: Sequence[bool]) -> list[Result]:
        """`extras[i]`: whether sentence i wants its attention maps."""
        self.translator.decode = dataclasses.replace(
            self.defaults, beam=options.beam, alpha=options.alpha, nbest=options.nbest
        )
        results = []
        for text, hyps, attention in zip(texts, self.translator.hypotheses(texts), extras):
            decode = self.translator.tgt_vocab.decode
            nbest = [(decode(h.tokens), h.score) for h in hyps] or [("", 0.0)]
            maps = None
            if attention and hyps:
                maps = to_json(explain(self.translator, text, hyps[0].tokens), digits=4)
            results.append(Result(nbest, maps))
        return results
