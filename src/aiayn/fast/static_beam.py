"""Beam search's step as one function of tensors, for `compiled_step` to compile inside the
whole search step (`search_step.SearchStep`): `decode.strategy.BeamStrategy.step`
(tensor2tensor's rule, sec. 6.1) without the interpreter in it.

    state = StepBeam.for_search(model, src, config)  # None: the core's strategy's search
    out = BeamStep(eos_id)(logits, forbidden, *state.advance())
    rows, tokens, done = state.update(out)

`BeamStep` computes what `run_search` and `BeamStrategy.step` do with a step's
log-probabilities, over state of fixed shapes so that one compiled function serves every
step: each sentence has `beam` live rows from the first step (the empty ones at -inf, as
fairseq starts its search), the live hypotheses' tokens are a (batch, beam, max |Y|) block
written one column a step instead of grown, and the finished lists are merged at every
step (with nothing new when nothing ended). The forbidden tokens and the length limits
(`constrain`) are a mask, not a branch.

It reads the logits, not a tensor of log-probabilities: the log-softmax is written out but
read only where the search looks. The 2 * beam best extensions of a sentence are found over
all its rows at once, by chunks of the vocabulary where it is large (`fast.search.block_topk`:
one pass over the logits finds each chunk's best, and only the best chunks are read again),
so that a compiled step reads the (rows, vocab) logits twice or three times (the
log-softmax's sums, the chunks) instead of writing and reading a copy of them at each stage.
The values are the core's: log P is monotone in the logits within a row, and a sentence's
best 2 * beam are the best of its rows' best 2 * beam. The length penalties come in as
numbers computed by `BeamStrategy`'s own code.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.config import DecodeConfig
from aiayn.decode.search import output_limits
from aiayn.decode.strategy import NEG_INF, BeamStrategy, length_penalty
from aiayn.fast.search import TOPK_CHUNK, block_topk


CHUNKED_FROM = 16  # chunks of `TOPK_CHUNK` tokens a row from which the best are found by chunks


def by_chunks(vocab: int) -> bool:
    """Whether `BeamStep` finds a sentence's best extensions by chunks (`block_topk`): from
    `CHUNKED_FROM` chunks of a row on (1024 tokens), where PyTorch's topk over the beam's
    rows is slow. Compiled, the chunks gain from one sentence on even at a vocabulary of a
    few thousand tokens; below that, one pass of topk is as fast as the chunks' two."""
    return vocab // TOPK_CHUNK >= CHUNKED_FROM


def widest_beam(vocab: int) -> int:
    """The widest beam `BeamStep` computes: the core strategy's, whose rows each give their
    2 * beam best tokens (half the vocabulary at most)."""
    return vocab // 2


class BeamStep(nn.Module):
    """One step of tensor2tensor's beam search for sentences of `beam` live rows each, from
    the decoder's logits.

    Inputs: logits (batch, beam, vocab) float32; forbidden (ids,) the tokens never generated
    (pad and bos); the state (`StepBeam`'s: scores, tokens, the finished lists, max_len and
    its penalty max_lp); ints (2,) long: |Y| after this step, and min_len; lps (2,) float32:
    lp(|Y|) and lp(|Y| + 1).
    -> rows (batch * beam,) the parent of each kept hypothesis among the batch * beam rows,
    next tokens (batch * beam,), done (batch,), and the new state.
    """

    def __init__(self, eos_id: int) -> None:
        super().__init__()
        self.eos_id = eos_id

    def forward(
        self, logits: Tensor, forbidden: Tensor, scores: Tensor, tokens: Tensor,
        fin_scores: Tensor, fin_logp: Tensor, fin_len: Tensor, fin_tokens: Tensor,
        max_len: Tensor, max_lp: Tensor, ints: Tensor, lps: Tensor,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        batch, beam, vocab = logits.shape
        width, n = tokens.size(2), 2 * beam
        length, min_len = ints[0], ints[1]
        # Each extension's log P (read below only where picked): the sentence's 2 * beam
        # best extensions, over all its rows at once (the core takes each row's 2 * beam
        # best first: the same values).
        cand = scores[:, :, None] + logits.log_softmax(dim=-1)  # (batch, beam, vocab)
        # Those a hypothesis may not take (`run_search`'s forbidden tokens, `constrain`'s
        # limits) are set aside after the search, not masked in all the vocabulary: at most
        # `banned` a row, so the 2 * beam best of the others are among the n + beam *
        # banned best of all. Eos is banned there, and its own extensions join at the end.
        banned = forbidden.size(0) + 1
        if by_chunks(vocab):  # torch.topk's values; the logits read twice in all
            top, index = block_topk(cand, n + beam * banned)  # (batch, n + beam * banned)
        else:
            top, index = cand.view(batch, beam * vocab).topk(n + beam * banned, dim=1)
        token = index % vocab
        at_max = max_len.le(length)[:, None]  # (batch, 1): only eos now
        off = token.eq(self.eos_id) | token[:, :, None].eq(forbidden).any(dim=2) | at_max
        top = top.masked_fill(off, NEG_INF)
        eos_ok = (at_max | length.gt(min_len)) & forbidden.ne(self.eos_id).all()  # (batch, 1)
        eos_top = cand[:, :, self.eos_id].masked_fill(~eos_ok, NEG_INF)  # (batch, beam)
        eos_index = torch.arange(beam, device=logits.device) * vocab + self.eos_id  # (beam,)
        top = torch.cat([top, eos_top], dim=1)  # (batch, n + beam * (banned + 1))
        index = torch.cat([index, eos_index.expand(batch, beam)], dim=1)
        top, pick = top.topk(n, dim=1)  # (batch, n), best first
        index = index.gather(1, pick)
        token, parent = index % vocab, index // vocab  # (batch, n)
        ends = token.eq(self.eos_id)
        # every candidate's hypothesis: its parent's tokens, and its token at column |Y| - 1
        seqs = tokens.gather(1, parent[:, :, None].expand(batch, n, width))  # (batch, n, width)
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
        next_tokens = token.gather(1, pick)
        tokens = seqs.gather(1, pick[:, :, None].expand(-1, -1, width))  # (batch, beam, width)
        rows = (parent.gather(1, pick) + torch.arange(batch, device=logits.device)[:, None] * beam).flatten()
        # `BeamStrategy._done`
        best_live = live.max(dim=1).values  # (batch,)
        bound = best_live / max_lp.clamp(min=lps[1])
        done = best_live.eq(NEG_INF) | bound.le(fin_scores[:, -1]) | at_max[:, 0]
        return (rows, next_tokens.flatten(), done, live, tokens, fin_scores, fin_logp, fin_len,
                fin_tokens)  # fmt: skip


class StepBeam(BeamStrategy):
    """`BeamStrategy`'s state for a search by `BeamStep` (eager or compiled, inside
    `search_step.SearchStep`): the same hypotheses, for the default rules (tensor2tensor's)
    and length penalty (GNMT's). `advance` gives a step's inputs, `update` takes its outputs;
    `keep` and `results` are the core strategy's."""

    def __init__(self, max_len: Tensor, beam: int, nbest: int, alpha: float, min_len: int,
                 eos_id: int, pad_id: int) -> None:  # fmt: skip
        super().__init__(max_len, beam, nbest, alpha, min_len, eos_id, pad_id)
        batch, width = max_len.size(0), self.fin_tokens.size(2)
        self.scores = torch.full((batch, beam), NEG_INF, device=max_len.device)
        self.scores[:, 0] = 0.0  # one live hypothesis, bos, until the first step
        self.tokens = torch.full((batch, beam, width), pad_id, dtype=torch.long, device=max_len.device)
        self.max_lp = self._lp(max_len.float())  # (batch,) the penalty at each sentence's max_len
        # each step's numbers (`advance`), made once: (|Y|, min_len) and (lp(|Y|), lp(|Y| + 1))
        lengths = width + 2  # width: the longest max_len (0 for no sentence)
        self._ints = torch.stack([torch.arange(lengths), torch.full((lengths,), min_len)], dim=1)
        lp = torch.tensor([self._lp(float(n)) for n in range(lengths + 1)])  # lp(n), once each
        self._lps = torch.stack([lp[:-1], lp[1:]], dim=1)  # (lengths, 2)

    @classmethod
    def for_search(cls, model, src: Tensor, config: DecodeConfig, eos_id: int | None = None):
        """The state of `config`'s beam search over `src`, or None where `BeamStep` does not
        compute it (greedy, other rules or penalty, a beam wider than `widest_beam`, an eos
        other than the model's): the core's strategy then."""
        c, m = config, model.config
        if (c.beam < 2 or c.beam_rules != "t2t" or c.length_penalty != "gnmt"
                or c.beam > widest_beam(m.vocab_size) or eos_id not in (None, m.eos_id)):  # fmt: skip
            return None
        return cls(output_limits(model, src, c.max_len_offset), c.beam, c.nbest, c.alpha,
                   c.min_len, m.eos_id, m.pad_id)  # fmt: skip

    def advance(self) -> tuple[Tensor, ...]:
        """One step on: `BeamStep`'s inputs after the logits and the forbidden tokens, the
        state and this step's numbers."""
        self.length += 1
        return (self.scores, self.tokens, self.fin_scores, self.fin_logp, self.fin_len,
                self.fin_tokens, self.max_len, self.max_lp, self._ints[self.length],
                self._lps[self.length])  # fmt: skip

    def update(self, out: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor]:
        """`BeamStep`'s outputs: keep the new state; -> rows, tokens, done."""
        (self.scores, self.tokens, self.fin_scores, self.fin_logp, self.fin_len,
         self.fin_tokens) = out[3:9]  # fmt: skip
        return out[0], out[1], out[2]

    def keep(self, index: Tensor) -> None:
        super().keep(index)
        self.max_lp = self.max_lp.index_select(0, index)
