"""The search driver: runs the model step by step over an explicit `KVCache` (sec. 6.1).

    hyps = beam_search(model, src)                  # DecodeConfig(): beam 4, alpha 0.6
    hyps[i][0].tokens, hyps[i][0].score              # best of sentence i, its n-best after
    best = greedy_search(model, src)                 # one Hypothesis per sentence
    hyps = search(model, src, config)                # greedy at beam 1, else beam search

The driver encodes the source once, feeds one target token per step, and reorders the
cache with the row indices the strategy (`decode/strategy.py`) returns (`CachedSteps`). A sentence that is
done leaves the batch at once: its rows are dropped from the cache and from the strategy's
state in the same `reorder`, so long sentences do not slow the short ones down.

Output length: |Y| (eos included) is at most the source length (its eos included) plus
`max_len_offset`, i.e. up to input + 50 tokens before eos with the paper's setting; for a
model with learned positions (Table 3 row E) also at most its `max_len`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from aiayn.config import DecodeConfig
from aiayn.decode.strategy import NEG_INF, BeamStrategy, GreedyStrategy, Hypothesis, TopK
from aiayn.model.cache import KVCache

Strategy = BeamStrategy | GreedyStrategy
# `search(src, config)`: per sentence its hypotheses, as `search(model, src, config)` below
# gives them for one model (a Translator holds one: the core's, or the fast path's).
Search = Callable[[Tensor, DecodeConfig], list[list[Hypothesis]]]


def beam_search(
    model, src: Tensor, config: DecodeConfig | None = None, bos_id: int | None = None,
    eos_id: int | None = None,
) -> list[list[Hypothesis]]:  # fmt: skip
    """Beam search over a batch of sources.

    model: a `Transformer` in eval mode (or anything with its encode / decode / project /
    new_cache / pad_mask and config); src: (batch, src_len) ids, source tokens + eos,
    right-padded; bos_id, eos_id: None, the model's (`model.bos_id`, `model.eos_id`).
    -> per sentence, its up to `config.nbest` finished hypotheses, best first.
    """
    strategy = make_strategy(model, src, config or DecodeConfig(), eos_id)
    return run_search(model, src, strategy, bos_id)


def greedy_search(
    model, src: Tensor, config: DecodeConfig | None = None, bos_id: int | None = None,
    eos_id: int | None = None,
) -> list[Hypothesis | None]:  # fmt: skip
    """The most probable token at each step; `config.beam` and `nbest` are ignored.

    -> one Hypothesis per sentence (None only if every token was forbidden).
    """
    strategy = make_strategy(model, src, config or DecodeConfig(), eos_id, greedy=True)
    return [hyps[0] if hyps else None for hyps in run_search(model, src, strategy, bos_id)]


def search(
    model, src: Tensor, config: DecodeConfig, bos_id: int | None = None, eos_id: int | None = None
) -> list[list[Hypothesis]]:
    """Greedy search at beam 1, else beam search; -> per sentence its hypotheses, best
    first (none only where greedy search found none)."""
    strategy = make_strategy(model, src, config, eos_id, greedy=config.beam == 1)
    return run_search(model, src, strategy, bos_id)


def make_strategy(
    model, src: Tensor, config: DecodeConfig, eos_id: int | None = None, greedy: bool = False,
    topk: TopK = torch.topk,
) -> Strategy:  # fmt: skip
    """The strategy of one search over `src`: its length limits (`output_limits`) and
    `config`'s beam, alpha, nbest, min_len, length penalty and beam rules; `topk` finds each
    row's best extensions; eos_id None: the model's."""
    c, m = config, model.config
    max_len, eos = output_limits(model, src, c.max_len_offset), m.eos_id if eos_id is None else eos_id
    if greedy:
        return GreedyStrategy(max_len, c.alpha, c.min_len, eos, m.pad_id, topk, c.length_penalty)
    return BeamStrategy(max_len, c.beam, c.nbest, c.alpha, c.min_len, eos, m.pad_id, topk,
                        c.length_penalty, c.beam_rules)  # fmt: skip


def output_limits(model, src: Tensor, max_len_offset: int) -> Tensor:
    """(batch,) the largest |Y| (eos included) per sentence: source length + offset."""
    src_len = src.ne(model.config.pad_id).sum(dim=1)  # (batch,) eos included
    max_len = (src_len + max_len_offset).clamp(min=1)
    if getattr(model.config, "positional", None) == "learned":
        # bos and the first |Y| - 1 tokens are fed: |Y| positions, at most the table's.
        max_len = max_len.clamp(max=model.config.max_len)
    return max_len


class CachedSteps:
    """The model's next-token log-probabilities, one position a step: `Transformer.decode`
    over a `KVCache` (the source encoded once), then the pre-softmax projection and its
    log-softmax in float32, whatever the model's dtype. `reorder` keeps the rows a strategy
    picked. `run_search` drives these by default; the fast path gives its own."""

    def __init__(self, model, src: Tensor, cache: KVCache | None = None) -> None:
        self.model = model
        src_pad = model.pad_mask(src)  # (batch, src_len), True = padding
        self.memory = model.encode(src, src_pad)  # (batch, src_len, d_model)
        self.cache = cache if cache is not None else model.new_cache(src_pad)

    def __call__(self, tokens: Tensor) -> Tensor:
        """tokens (rows,) fed at the next position -> (rows, vocab) log-probabilities."""
        cache = self.cache
        hidden = self.model.decode(tokens[:, None], self.memory, cache.src_pad_mask, cache)
        self.memory = None  # from now on the cache holds the encoder-decoder keys and values
        return self.model.project(hidden[:, -1]).float().log_softmax(dim=-1)  # (rows, vocab)

    def reorder(self, rows: Tensor, sentences: Tensor | None) -> None:
        """Keep hypothesis rows `rows`, in that order (`sentences`: the active sentences
        that stay, where some left; the cache finds them from the rows)."""
        self.cache.reorder(rows)  # each sentence's rows stay one contiguous block


@torch.no_grad()
def run_search(
    model, src: Tensor, strategy: Strategy, bos_id: int | None = None,
    cache: KVCache | None = None, steps: CachedSteps | None = None,
) -> list[list[Hypothesis]]:  # fmt: skip
    """Drive `strategy` with the model's next-token log-probabilities until every sentence
    is done; -> per sentence (in input order), its finished hypotheses. bos_id None: the
    model's; `cache`: an empty cache for `src` (None: `model.new_cache`); `steps`: what
    computes the log-probabilities (None: `CachedSteps` over the model and the cache).

    Pad and bos are never generated.
    """
    if src.size(0) == 0:  # no sentences: nothing to search (the steps below need one)
        return []
    bos_id = model.config.bos_id if bos_id is None else bos_id
    steps = steps if steps is not None else CachedSteps(model, src, cache)
    alive = torch.arange(src.size(0), device=src.device)  # input index of each active sentence
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    tokens = torch.full((src.size(0),), bos_id, dtype=torch.long, device=src.device)
    forbidden = [model.config.pad_id, bos_id]
    while True:
        logp = steps(tokens)  # (rows, vocab)
        logp[:, forbidden] = NEG_INF
        rows, next_tokens, done = strategy.step(logp.view(alive.numel(), -1, logp.size(-1)))
        sentences = None
        if done.any():
            sentences = retire(done, alive, strategy, results)  # (still active,)
            if sentences.numel() == 0:
                return results
            alive = alive[sentences]
            if rows is None:  # the strategy keeps its rows in place: drop the done ones
                rows = sentences
            else:  # rows of the kept sentences only: beam reorder and shrink in one step
                rows = rows.view(done.numel(), -1)[sentences].flatten()
            next_tokens = next_tokens.view(done.numel(), -1)[sentences].flatten()
        if rows is not None:
            steps.reorder(rows, sentences)
        tokens = next_tokens  # (rows,)


def retire(done: Tensor, alive: Tensor, strategy: Strategy, results: list[list[Hypothesis]]) -> Tensor:
    """The sentences `done` (active,) marks leave: their hypotheses go to `results` at
    their input indices `alive` (active,), and the strategy drops them; -> the active
    sentences that stay, as indices into the active ones (empty: none stays)."""
    finished = done.nonzero().squeeze(1)
    for i, hyps in zip(alive[finished].tolist(), strategy.results(finished)):
        results[i] = hyps
    sentences = (~done).nonzero().squeeze(1)
    if sentences.numel():
        strategy.keep(sentences)
    return sentences
