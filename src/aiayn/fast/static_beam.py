"""Beam search's step as one function of tensors, for `compiled_step` to compile beside the
decoder step: `decode.strategy.BeamStrategy.step` (tensor2tensor's rule, sec. 6.1) without
the interpreter in it.

    strategy = StepBeam.for_search(model, src, config, beam_step)  # None: use the core's
    hyps = run_search(model, src, strategy, steps=...)          # the driver is the core's

`BeamStep` computes what `BeamStrategy.step` does, over state of fixed shapes so that one
compiled function serves every step: each sentence has `beam` live rows from the first step
(the empty ones at -inf, as fairseq starts its search), the live hypotheses' tokens are a
(batch, beam, max |Y|) block written one column a step instead of grown, and the finished
lists are merged at every step (with nothing new when nothing ended). The length limits
(`constrain`) are a select, not a branch. Each row's best tokens are found by chunks of
the vocabulary (`fast.search.row_topk`) where it is large, as the eager fast path does:
PyTorch's topk walks a row element by element. The length penalties come in as numbers computed
by `BeamStrategy`'s own code, so the scores are the core's to the bit. `StepBeam` is the
strategy the driver sees: `BeamStrategy`'s state and its `keep` and `results`, with `step`
calling the function.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.config import DecodeConfig
from aiayn.decode.search import output_limits
from aiayn.decode.strategy import NEG_INF, BeamStrategy, length_penalty
from aiayn.fast.search import TOPK_CHUNK, row_topk


CHUNKED_FROM = 32  # chunks of `TOPK_CHUNK` tokens from which a row's best are found by chunks


def by_chunks(vocab: int) -> bool:
    """Whether `BeamStep` finds a row's best tokens by chunks (`row_topk`): from
    `CHUNKED_FROM` chunks on, where PyTorch's topk is slow."""
    return vocab // TOPK_CHUNK >= CHUNKED_FROM


def widest_beam(vocab: int) -> int:
    """The widest beam `BeamStep` computes: each row gives its 2 * beam best tokens, no more
    than half the vocabulary, and no more than its chunks where they are found by chunks
    (`by_chunks`). Wider beams (over 62 for 8000 tokens) are the core strategy's."""
    return vocab // TOPK_CHUNK // 2 if by_chunks(vocab) else vocab // 2


class BeamStep(nn.Module):
    """One step of tensor2tensor's beam search for sentences of `beam` live rows each.

    Inputs: logp (batch, beam, vocab) float32 (pad and bos already forbidden); the state
    (`StepBeam`'s: scores, tokens, the finished lists, max_len and its penalty max_lp);
    ints (3,) long: |Y| after this step, min_len, and k, the rows each sentence fed to the
    decoder (1 at the first step, else beam); lps (2,) float32: lp(|Y|) and lp(|Y| + 1).
    -> rows (batch * beam,) into the decoder's batch * k rows, next tokens (batch * beam,),
    done (batch,), and the new state.
    """

    def __init__(self, eos_id: int) -> None:
        super().__init__()
        self.eos_id = eos_id

    def forward(
        self, logp: Tensor, scores: Tensor, tokens: Tensor, fin_scores: Tensor, fin_logp: Tensor,
        fin_len: Tensor, fin_tokens: Tensor, max_len: Tensor, max_lp: Tensor, ints: Tensor,
        lps: Tensor,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        batch, beam, vocab = logp.shape
        width, n = tokens.size(2), 2 * beam
        length, min_len, k = ints[0], ints[1], ints[2]
        # `constrain`: at max_len only eos; eos forbidden while |Y| <= min_len
        at_max = max_len.le(length)  # (batch,)
        eos = torch.arange(vocab, device=logp.device).eq(self.eos_id)  # (vocab,)
        allow_eos = (at_max | length.gt(min_len))[:, None, None]  # (batch, 1, 1)
        logp = torch.where(eos, torch.where(allow_eos, logp, NEG_INF),
                           torch.where(at_max[:, None, None], NEG_INF, logp))  # fmt: skip
        # The sentence's 2 * beam best extensions are among each row's 2 * beam best tokens.
        if by_chunks(vocab):  # (batch, beam, n) each; torch.topk's values
            row_top, row_token = row_topk(logp, n)
        else:
            row_top, row_token = logp.topk(n, dim=2)
        cand = (scores[:, :, None] + row_top).view(batch, beam * n)
        top, index = cand.topk(n, dim=1)  # (batch, n), best first
        token = row_token.view(batch, beam * n).gather(1, index)  # (batch, n)
        ends = token.eq(self.eos_id)
        # every candidate's hypothesis: its parent's tokens, and its token at column |Y| - 1
        seqs = tokens.gather(1, (index // n)[:, :, None].expand(batch, n, width))  # (batch, n, width)
        seqs = seqs.scatter(2, (length - 1).expand(batch, n, 1), token[:, :, None])
        # the finished lists (`BeamStrategy._finish`), merged with what ended now
        new_scores = torch.where(ends & top.gt(NEG_INF), top / lps[0], NEG_INF)
        merged = torch.cat([fin_scores, new_scores], dim=1)  # (batch, nbest + n)
        fin_scores, pick = merged.topk(fin_scores.size(1), dim=1)  # (batch, nbest)
        fin_logp = torch.cat([fin_logp, top], dim=1).gather(1, pick)
        fin_len = torch.cat([fin_len, length.expand(batch, n)], dim=1).gather(1, pick)
        fin_tokens = torch.cat([fin_tokens, seqs], dim=1).gather(1, pick[:, :, None].expand(-1, -1, width))
        # the beam best that do not end stay live
        live, pick = top.masked_fill(ends, NEG_INF).topk(beam, dim=1)  # (batch, beam)
        parent = torch.minimum(index.gather(1, pick) // n, k - 1)  # dead slots: any row
        next_tokens = token.gather(1, pick)
        tokens = seqs.gather(1, pick[:, :, None].expand(-1, -1, width))  # (batch, beam, width)
        rows = (parent + torch.arange(batch, device=logp.device)[:, None] * k).flatten()  # (batch * beam,)
        # `BeamStrategy._done`
        best_live = live.max(dim=1).values  # (batch,)
        bound = best_live / max_lp.clamp(min=lps[1])
        done = best_live.eq(NEG_INF) | bound.le(fin_scores[:, -1]) | at_max
        return (rows, next_tokens.flatten(), done, live, tokens, fin_scores, fin_logp, fin_len,
                fin_tokens)  # fmt: skip


class StepBeam(BeamStrategy):
    """`BeamStrategy` whose step is a `BeamStep` (eager or compiled): the same hypotheses,
    for the default rules (tensor2tensor's) and length penalty (GNMT's)."""

    def __init__(self, step, max_len: Tensor, beam: int, nbest: int, alpha: float, min_len: int,
                 eos_id: int, pad_id: int) -> None:  # fmt: skip
        super().__init__(max_len, beam, nbest, alpha, min_len, eos_id, pad_id)
        self.beam_step = step
        batch, width = max_len.size(0), self.fin_tokens.size(2)
        self.scores = torch.full((batch, beam), NEG_INF, device=max_len.device)
        self.scores[:, 0] = 0.0  # one live hypothesis, bos, until the first step
        self.tokens = torch.full((batch, beam, width), pad_id, dtype=torch.long, device=max_len.device)
        self.max_lp = self._lp(max_len.float())  # (batch,) the penalty at each sentence's max_len

    @classmethod
    def for_search(cls, model, src: Tensor, config: DecodeConfig, step, eos_id: int | None = None):
        """The strategy of `config`'s beam search over `src` through `step`, or None where
        `BeamStep` does not compute it (greedy, other rules or penalty, a beam wider than
        `widest_beam`): the core's strategy then."""
        c, m = config, model.config
        if c.beam < 2 or c.beam_rules != "t2t" or c.length_penalty != "gnmt" or c.beam > widest_beam(m.vocab_size):
            return None
        eos = m.eos_id if eos_id is None else eos_id
        return cls(step, output_limits(model, src, c.max_len_offset), c.beam, c.nbest, c.alpha,
                   c.min_len, eos, m.pad_id)  # fmt: skip

    def step(self, logp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """As `BeamStrategy.step`: logp (batch, k, vocab) -> rows, tokens, done."""
        batch, k, vocab = logp.shape
        self.length += 1
        ints = torch.tensor([self.length, self.min_len, k])
        lps = torch.tensor([self._lp(self.length), self._lp(self.length + 1.0)])
        out = self.beam_step(
            logp.expand(batch, self.beam, vocab), self.scores, self.tokens, self.fin_scores,
            self.fin_logp, self.fin_len, self.fin_tokens, self.max_len, self.max_lp, ints, lps,
        )  # fmt: skip
        rows, tokens, done = out[:3]
        (self.scores, self.tokens, self.fin_scores, self.fin_logp, self.fin_len,
         self.fin_tokens) = out[3:]  # fmt: skip
        return rows, tokens, done

    def keep(self, index: Tensor) -> None:
        super().keep(index)
        self.max_lp = self.max_lp.index_select(0, index)
