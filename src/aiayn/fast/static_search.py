"""The search over `static_step.DecoderStep` (eager, or compiled by `compiled_step.py`):
`decode.search.run_search`'s driver with the keys and values in plain tensors.

    search = StepSearch(model, load_compiled(model))  # model from fast.for_inference
    hyps = search(src, config)                      # as `decode.search.search(model, ...)`

The loop is the core driver's (`run_search`, given these steps in place of `CachedSteps`):
the same strategy objects (`decode/strategy.py`) pick the extensions, see the same
log-probabilities (pad and bos forbidden) and answer with the same row indices; sentences
that are done leave at once. What differs is the state. The
self-attention keys and values live in one (length, layers, rows, heads, d) tensor per kind,
allocated for the longest output the search allows, position first: the positions written
so far are one contiguous block, which the step reads (a compiled step takes contiguous
inputs, which `compiled_step` makes them) and after which it writes its own. A beam reorder of the core's strategies copies the
written block of the surviving rows into a second store of the same shape, once per step
(the core's cache copies as much). Encoder-decoder keys stay one per sentence and move only when sentences
leave.

A beam search of the default rules runs a loop of its own (`run_whole_steps`), whose step is
one call of `search_step.SearchStep`: the decoder step and the beam's step, with the
strategy's state in `static_beam.StepBeam`. There the stores are never reordered: each
position's entries stay at the rows that wrote them, and each hypothesis reads its own
through an `origin` index that the step keeps (`search_step`). Rows are copied only where
sentences leave (`run_search`'s rule, `decode.search.retire`), the leaving ones' dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from aiayn.config import DecodeConfig
from aiayn.decode.search import Strategy, retire, run_search
from aiayn.decode.strategy import Hypothesis
from aiayn.fast.search import Searcher
from aiayn.fast.static_beam import StepBeam
from aiayn.fast.static_step import DecoderStep, SourceKeys
from aiayn.model.layers import sinusoid_table

# `step(tokens, position, self_k, self_v, cross_k, cross_v, src_mask)`: `DecoderStep`'s call.
Step = Callable[..., tuple[Tensor, Tensor, Tensor]]
# `source(src)`: `SourceKeys`' call, -> cross_k, cross_v, src_mask.
Source = Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]


class Compiled(NamedTuple):
    """A model's compiled functions (`compiled_step.load_compiled`)."""

    step: Step
    source: Source
    search_step: Callable[..., tuple[Tensor, ...]]  # `search_step.SearchStep`'s call


class StepSearch(Searcher):
    """Greedy or beam search for one model through its decoder step and source keys: the
    `compiled` ones, else the eager `DecoderStep` and `SourceKeys`. A beam search that
    `static_beam.BeamStep` computes runs one whole search step a call
    (`search_step.SearchStep`: the compiled one, or the given `search_step`, e.g. an eager
    one; `run_whole_steps`); other searches run the core's strategies over the step."""

    def __init__(self, model, compiled: Compiled | None = None,
                 search_step: Callable | None = None) -> None:  # fmt: skip
        self.model = model
        self.shape = DecoderStep.from_model(model)  # heads and key sizes; the eager step
        self.step = compiled.step if compiled else self.shape
        self.source = compiled.source if compiled else SourceKeys(model).eval()
        self.search_step = compiled.search_step if compiled and search_step is None else search_step
        self.kind = "compiled decoder step" if compiled else "decoder step"
        self._sinusoids: Tensor | None = None  # `_positions`' table, made once

    def __call__(
        self, src: Tensor, config: DecodeConfig, bos_id: int | None = None,
        eos_id: int | None = None,
    ) -> list[list[Hypothesis]]:  # fmt: skip
        """Greedy search at beam 1, else beam search: per sentence its hypotheses."""
        strategy = None
        if self.search_step is not None:
            strategy = StepBeam.for_search(self.model, src, config, eos_id)
        if strategy is None:
            return super().__call__(src, config, bos_id, eos_id)
        return self.run(src, strategy, bos_id)

    @torch.no_grad()
    def run(self, src: Tensor, strategy: Strategy, bos_id: int | None = None) -> list[list[Hypothesis]]:
        """`decode.search.run_search` of `strategy` over `src` (batch, src_len), through the
        step (the whole search step, `run_whole_steps`, for a `StepBeam` where there is
        one); -> per sentence (in input order) its finished hypotheses."""
        if src.size(0) == 0:
            return []
        if self.search_step is not None and isinstance(strategy, StepBeam):
            return self.run_whole_steps(src, strategy, bos_id)
        length = int(strategy.max_len.max())  # positions fed: bos and |Y| - 1 tokens at most
        return run_search(self.model, src, strategy, bos_id, steps=self._start(src, length))

    @torch.no_grad()
    def run_whole_steps(self, src: Tensor, strategy: StepBeam, bos_id: int | None = None) -> list[list[Hypothesis]]:
        """`run_search`'s loop with one `SearchStep` call a step: the decoder step and the
        beam step (pad and bos forbidden) in one. Sentences leave as there."""
        c, batch, beam = self.model.config, src.size(0), strategy.beam
        bos_id = c.bos_id if bos_id is None else bos_id
        steps = self._start(src, int(strategy.max_len.max()), rows=batch * beam)
        forbidden = torch.tensor([c.pad_id, bos_id], device=src.device)
        tokens = torch.full((batch, beam), bos_id, dtype=torch.long, device=src.device)
        alive = torch.arange(batch, device=src.device)  # input index of each active sentence
        results: list[list[Hypothesis]] = [[] for _ in range(batch)]
        while True:  # each step writes its position; the stores' rows move only as sentences leave
            _, tokens, done = steps.search(self.search_step, tokens, forbidden, strategy)
            if done.any():
                sentences = retire(done, alive, strategy, results)  # (still active,)
                if sentences.numel() == 0:
                    return results
                alive, tokens = alive[sentences], tokens[sentences]
                steps.leave(sentences, beam)

    @torch.no_grad()
    def forced_logp(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing through the same step: src (batch, src_len), tgt_in (batch, T)
        fed one position a step (bos first) -> (batch, T, vocab) float32 log-probabilities,
        as the search sees them (before pad and bos are forbidden)."""
        steps = self._start(src, tgt_in.size(1))
        return torch.stack([steps(tgt_in[:, t]) for t in range(tgt_in.size(1))], dim=1)

    def _start(self, src: Tensor, length: int, rows: int | None = None) -> _Steps:
        """Encode `src` and make room for `length` target positions of `rows` hypotheses
        (None: one a sentence)."""
        cross_k, cross_v, src_mask = self.source(src)
        shape = (length, len(self.model.decoder), rows or src.size(0), self.shape.heads)
        return _Steps(
            step=self.step, positions=self._positions(length, cross_k),
            cross_k=cross_k, cross_v=cross_v, src_mask=src_mask,
            self_k=cross_k.new_empty(*shape, self.shape.d_k),
            self_v=cross_v.new_empty(*shape, self.shape.d_v),
        )  # fmt: skip

    def _positions(self, length: int, like: Tensor) -> Tensor:
        """(length, d_model) the positional encodings of the target positions 0 .. length - 1
        in the activations' dtype (`PositionalEncoding`: the sinusoids, or row E's table)."""
        table = self.model.tgt_positional
        if table.learned:
            return table.weight[:length]
        made = self._sinusoids
        if made is None or made.size(0) < length or (made.dtype, made.device) != (like.dtype, like.device):
            made = self._sinusoids = sinusoid_table(max(length, self.model.config.max_len),
                                                    table.d_model).to(like)  # fmt: skip
        return made[:length]


@dataclass
class _Steps:
    """One search's steps (`decode.search.CachedSteps`' interface) over its tensors: what
    the step reads, and the stores it fills."""

    step: Step
    positions: Tensor  # (length, d_model) the target positions' encodings
    cross_k: Tensor  # (layers, sentences, heads, src_len, d_k), once per sentence
    cross_v: Tensor  # (layers, sentences, heads, src_len, d_v)
    src_mask: Tensor  # (sentences, 1, 1, src_len), True = may attend
    self_k: Tensor  # (length, layers, rows, heads, d_k), positions written in front
    self_v: Tensor  # (length, layers, rows, heads, d_v)
    spare_k: Tensor | None = None  # the stores a reorder writes into
    spare_v: Tensor | None = None
    written: int = 0  # positions fed so far
    origin: Tensor | None = None  # (written, sentences, beam): `SearchStep`'s, in its search
    # `search`'s view of the stores, (length, layers, sentences, beam, heads, d): made again
    # only when the stores are replaced (as sentences leave)
    by_sentence: tuple[Tensor, Tensor, Tensor] | None = None  # (self_k it views, keys, values)

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens (rows,) fed at the next position -> (rows, vocab) log-probabilities."""
        t = self.written
        logp, self.self_k[t], self.self_v[t] = self.step(
            tokens, self.positions[t], self.self_k[:t], self.self_v[:t],
            self.cross_k, self.cross_v, self.src_mask,
        )  # fmt: skip
        self.written += 1
        return logp

    def search(self, search_step: Callable, tokens: Tensor, forbidden: Tensor,
               strategy: StepBeam) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        """One `SearchStep` of `strategy` for tokens (sentences, beam) fed at the next
        position: it writes this position's keys and values into the stores, at the rows
        that computed them, and gives the kept hypotheses' origin; -> rows, next tokens
        (sentences, beam), done."""
        t, (sentences, beam) = self.written, tokens.shape
        if self.origin is None:
            self.origin = tokens.new_zeros(0, sentences, beam)
        if self.by_sentence is None or self.by_sentence[0] is not self.self_k:
            self.by_sentence = (self.self_k, *(store.unflatten(2, (sentences, beam))
                                               for store in (self.self_k, self.self_v)))  # fmt: skip
        _, keys, values = self.by_sentence
        out = search_step(
            tokens, self.positions[t], keys[:t], values[:t], self.cross_k, self.cross_v,
            self.src_mask, forbidden, self.origin, keys[t], values[t], *strategy.advance(),
        )  # fmt: skip
        self.origin = out[-1]  # (t + 1, sentences, beam)
        self.written += 1
        return strategy.update(out[:-1])

    def leave(self, sentences: Tensor, beam: int) -> None:
        """Keep the `beam` rows of each of `sentences` (still active,) only, in the stores
        and the encoder-decoder keys, and their origin. The old stores are let go, not kept
        as spares: a search's rows only shrink, so no later copy could write into them."""
        rows = (sentences[:, None] * beam + torch.arange(beam, device=sentences.device)).flatten()
        self.reorder(rows, sentences)
        self.spare_k = self.spare_v = None
        self.origin = self.origin[:, sentences]

    def reorder(self, rows: Tensor, sentences: Tensor | None) -> None:
        """Keep rows `rows` of the self-attention stores, in that order, and the encoder-
        decoder keys of `sentences` (None: every sentence stays)."""
        if sentences is not None:
            self.keep(sentences)
        self.self_k, self.spare_k = _reorder(self.self_k, self.spare_k, rows, self.written)
        self.self_v, self.spare_v = _reorder(self.self_v, self.spare_v, rows, self.written)

    def keep(self, sentences: Tensor) -> None:
        """Keep the encoder-decoder keys of `sentences` (still active,) only."""
        self.cross_k, self.cross_v = self.cross_k[:, sentences], self.cross_v[:, sentences]
        self.src_mask = self.src_mask[sentences]


def _reorder(store: Tensor, spare: Tensor | None, rows: Tensor, written: int) -> tuple[Tensor, Tensor]:
    """Rows `rows` of the `written` positions of `store` (length, layers, rows, heads, d),
    copied into `spare` (a new store where the number of rows changes); -> (the reordered
    store, the old one: the next reorder's spare)."""
    if spare is None or spare.size(2) != rows.numel():
        spare = store.new_empty(store.size(0), store.size(1), rows.numel(), *store.shape[3:])
    torch.index_select(store[:written], 2, rows, out=spare[:written])
    return spare, store
