"""What a model's worker runs: a `Translator` on one batch of sentences (in the server's
process, or in a child process of its own: `worker.py`).

All sentences of a batch share their decoding options (`Options`, the batcher groups by
them). Each sentence also says what else it wants (`Wants`), which plain translation
never computes: its attention maps (`attention_view.attention_maps`), the word alignment of its
translation (`alignment.word_alignments`, from the encoder-decoder attention) and the
log-probability of each token of each hypothesis (`scores.token_log_probs`); each is one
teacher-forced pass over the hypotheses found, batched over the sentences that asked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from aiayn.alignment import word_alignments
from aiayn.attention_view import attention_maps, to_json
from aiayn.decode.strategy import Hypothesis
from aiayn.scores import token_log_probs
from aiayn.translate import Translator


@dataclass(frozen=True)
class Options:
    """The decoding options of a request (sec. 6.1's beam size and length penalty)."""

    beam: int
    alpha: float
    nbest: int


@dataclass(frozen=True)
class Wants:
    """What a sentence asks for beyond its translations."""

    attention: bool = False  # every layer's and head's weights, for the page
    alignment: bool = False  # its best translation's word links (HTML needs them)
    log_probs: bool = False  # each hypothesis's per-token log-probabilities


@dataclass
class Result:
    """One sentence's translations, best first: [(text, score)], and what it wanted."""

    nbest: list[tuple[str, float]]
    attention: dict | None = None
    alignment: list[tuple[int, int]] | None = None  # (source word, target word), 0-based
    tokens: list[list[str]] | None = None  # each hypothesis's pieces, "</s>" last
    log_probs: list[list[float]] | None = None  # log p of each of those pieces
    pivot: Result | None = None  # through English: the first leg's result (its English text)


class TranslatorRunner:
    """Runs batches on one Translator; only the batcher's worker thread calls it (or the
    child's loop, `worker.serve_frames`)."""

    def __init__(self, translator: Translator) -> None:
        self.translator = translator
        self.defaults = translator.decode
        self.search_kind = translator.search_kind  # /info: what runs the search's steps

    def run(
        self, sources: Sequence[list[int]], options: Options, extras: Sequence[Wants]
    ) -> list[Result]:
        """`sources`: the sentences as `Translator.encode` gives them (the service encoded
        them once, before they queued); `extras[i]`: what sentence i wants besides its
        translations."""
        t = self.translator
        t.decode = dataclasses.replace(
            self.defaults, beam=options.beam, alpha=options.alpha, nbest=options.nbest
        )
        hyps = t.hypotheses_of(sources)
        results = []
        for source, found, wants in zip(sources, hyps, extras):
            nbest = [(t.tgt_vocab.decode(h.tokens), h.score) for h in found] or [("", 0.0)]
            maps = None
            if wants.attention and found:
                tokens = found[0].tokens[: t.model.config.max_len - 1]
                maps = to_json(attention_maps(t.model, t.src_vocab, t.tgt_vocab, source, tokens),
                               digits=4)  # fmt: skip
            results.append(Result(nbest, maps))
        self._align(sources, hyps, extras, results)
        self._score(sources, hyps, extras, results)
        return results

    def close(self) -> None:
        """Nothing to free: the Translator goes with the process."""

    def _align(self, sources, hyps: list[list[Hypothesis]], extras, results: list[Result]) -> None:
        asked = [i for i, wants in enumerate(extras) if wants.alignment]
        if not asked:  # most requests: no pass to batch at all
            return
        todo = [i for i in asked if hyps[i]]
        t = self.translator
        pairs = [(sources[i], hyps[i][0].tokens) for i in todo]
        links = dict(zip(todo, word_alignments(t.model, t.src_vocab, t.tgt_vocab, pairs)))
        for i in asked:
            results[i].alignment = links.get(i, [])

    def _score(self, sources, hyps: list[list[Hypothesis]], extras, results: list[Result]) -> None:
        asked = [i for i, wants in enumerate(extras) if wants.log_probs]
        if not asked:
            return
        pairs = [(sources[i], h.tokens) for i in asked for h in hyps[i]]
        scored = iter(token_log_probs(self.translator.model, pairs))
        piece, eos = self.translator.tgt_vocab.piece, self.translator.tgt_vocab.eos_id
        for i in asked:
            if hyps[i]:
                results[i].tokens = [[piece(x) for x in [*h.tokens, eos]] for h in hyps[i]]
                results[i].log_probs = [next(scored) for _ in hyps[i]]
            else:  # a blank sentence: its one translation is "", the model did not run
                results[i].tokens, results[i].log_probs = [[]], [[]]


@dataclass(frozen=True)
class Load:
    """How a server loads a model (`load_runner`): `Translator.from_checkpoint`'s arguments."""

    path: str
    device: str = "cpu"
    int8: bool = False
    threads: int | None = None  # torch's CPU threads (None: torch's default)
    max_tokens: int = 4096
    compile: str = "auto"  # `fast.for_inference`: "auto" builds the compiled step now if missing


def load_runner(load: Load) -> TranslatorRunner:
    """The model of `load`, its fast path built for a long-lived process, having decoded
    once (so that a server that says ready has translated)."""
    if load.threads is not None:
        torch.set_num_threads(load.threads)
    # long_lived: every kernel shape the CPU's matrix library will be asked for, built now:
    # each stays for the life of the process, and met one by one as batches of new sizes
    # came, they made the server's memory creep up over a run.
    translator = Translator.from_checkpoint(load.path, device=load.device, int8=load.int8,
                                            max_tokens=load.max_tokens, long_lived=True,
                                            compile=load.compile)  # fmt: skip
    translator.translate(["warm up"])
    return TranslatorRunner(translator)
