"""Translating through English where no model translates a pair directly (`models.route`).

A sentence goes source -> English by the first model, its best translation then English ->
target by the second, as LibreTranslate pivots. The request's beam and length penalty
apply to both legs; the n best are the second leg's, over the first leg's best. What the
answer gives of each sentence is the second leg's (its text, scores, tokens and
log-probabilities: those of the target given the English), with the first leg's result
under `pivot`. Word alignments compose: source word i is linked to target word j where i
is linked to some English word k by the first model and k to j by the second.
"""

from __future__ import annotations

import dataclasses

from aiayn.serve.runner import Options, Result, Wants


def pivot_options(options: Options) -> Options:
    """The first leg's decoding: the request's beam and alpha, its best translation only."""
    return dataclasses.replace(options, nbest=1)


def pivot_wants(wants: Wants) -> Wants:
    """What the first leg computes: its alignment where the request wants the composed one,
    its attention where the request wants attention (the page shows each leg)."""
    return Wants(attention=wants.attention, alignment=wants.alignment)


def compose(first: list[tuple[int, int]], second: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Links source -> target through the English words both legs link, sorted."""
    onward: dict[int, list[int]] = {}
    for k, j in second:
        onward.setdefault(k, []).append(j)
    return sorted({(i, j) for i, k in first for j in onward.get(k, [])})


def through(first: Result, second: Result) -> Result:
    """The second leg's result of a sentence, its alignment composed with the first's,
    carrying the first leg's result as `pivot`."""
    alignment = None
    if first.alignment is not None and second.alignment is not None:
        alignment = compose(first.alignment, second.alignment)
    return dataclasses.replace(second, alignment=alignment, pivot=first)
