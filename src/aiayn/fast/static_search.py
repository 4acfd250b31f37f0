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
inputs, which `compiled_step` makes them) and after which it writes its own. A beam reorder copies the written block of the
surviving rows into a second store of the same shape, once per step (the core's cache
copies as much). Encoder-decoder keys stay one per sentence and move only when sentences
leave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from aiayn.config import DecodeConfig
from aiayn.decode.search import Strategy, run_search
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
    beam: Callable[..., tuple[Tensor, ...]]  # `static_beam.BeamStep`'s call


class StepSearch(Searcher):
    """Greedy or beam search for one model through its decoder step and source keys: the
    `compiled` ones, else the eager `DecoderStep` and `SourceKeys`. A beam search's strategy
    is `static_beam.StepBeam` over the compiled `BeamStep` (or the given `beam`, e.g. an
    eager one), where it computes that search; else the core's strategy."""

    def __init__(self, model, compiled: Compiled | None = None, beam: Callable | None = None) -> None:
        self.model = model
        self.shape = DecoderStep.from_model(model)  # heads and key sizes; the eager step
        self.step = compiled.step if compiled else self.shape
        self.source = compiled.source if compiled else SourceKeys(model).eval()
        self.beam = compiled.beam if compiled and beam is None else beam
        self.kind = "compiled decoder step" if compiled else "decoder step"

    def __call__(
        self, src: Tensor, config: DecodeConfig, bos_id: int | None = None,
        eos_id: int | None = None,
    ) -> list[list[Hypothesis]]:  # fmt: skip
        """Greedy search at beam 1, else beam search: per sentence its hypotheses."""
        strategy = None
        if self.beam is not None:
            strategy = StepBeam.for_search(self.model, src, config, self.beam, eos_id)
        if strategy is None:
            return super().__call__(src, config, bos_id, eos_id)
        return self.run(src, strategy, bos_id)

    @torch.no_grad()
    def run(self, src: Tensor, strategy: Strategy, bos_id: int | None = None) -> list[list[Hypothesis]]:
        """`decode.search.run_search` of `strategy` over `src` (batch, src_len), through the
        step; -> per sentence (in input order) its finished hypotheses."""
        if src.size(0) == 0:
            return []
        length = int(strategy.max_len.max())  # positions fed: bos and |Y| - 1 tokens at most
        return run_search(self.model, src, strategy, bos_id, steps=self._start(src, length))

    @torch.no_grad()
    def forced_logp(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing through the same step: src (batch, src_len), tgt_in (batch, T)
        fed one position a step (bos first) -> (batch, T, vocab) float32 log-probabilities,
        as the search sees them (before pad and bos are forbidden)."""
        steps = self._start(src, tgt_in.size(1))
        return torch.stack([steps(tgt_in[:, t]) for t in range(tgt_in.size(1))], dim=1)

    def _start(self, src: Tensor, length: int) -> _Steps:
        """Encode `src` and make room for `length` target positions."""
        cross_k, cross_v, src_mask = self.source(src)
        shape = (length, len(self.model.decoder), src.size(0), self.shape.heads)
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
        return sinusoid_table(length, table.d_model).to(like)


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

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens (rows,) fed at the next position -> (rows, vocab) log-probabilities."""
        t = self.written
        logp, self.self_k[t], self.self_v[t] = self.step(
            tokens, self.positions[t], self.self_k[:t], self.self_v[:t],
            self.cross_k, self.cross_v, self.src_mask,
        )  # fmt: skip
        self.written += 1
        return logp

    def reorder(self, rows: Tensor, sentences: Tensor | None) -> None:
        """Keep rows `rows` of the self-attention stores, in that order, and the encoder-
        decoder keys of `sentences` (None: every sentence stays)."""
        if sentences is not None:
            self.cross_k, self.cross_v = self.cross_k[:, sentences], self.cross_v[:, sentences]
            self.src_mask = self.src_mask[sentences]
        self.self_k, self.spare_k = _reorder(self.self_k, self.spare_k, rows, self.written)
        self.self_v, self.spare_v = _reorder(self.self_v, self.spare_v, rows, self.written)


def _reorder(store: Tensor, spare: Tensor | None, rows: Tensor, written: int) -> tuple[Tensor, Tensor]:
    """Rows `rows` of the `written` positions of `store` (length, layers, rows, heads, d),
    copied into `spare` (a new store where the number of rows changes); -> (the reordered
    store, the old one: the next reorder's spare)."""
    if spare is None or spare.size(2) != rows.numel():
        spare = store.new_empty(store.size(0), store.size(1), rows.numel(), *store.shape[3:])
    torch.index_select(store[:written], 2, rows, out=spare[:written])
    return spare, store
