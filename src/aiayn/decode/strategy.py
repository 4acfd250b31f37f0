"""Search strategies: how hypotheses are scored, pruned and finished (sec. 6.1).

A strategy never sees the model. The driver (`decode/search.py`) gives it the next-token
log-probabilities of every live hypothesis of every active sentence; the strategy picks the
extensions, moves hypotheses that end in eos to the finished lists, and says which
sentences are done. It answers with row indices, which the driver applies to the KV cache.
This is the split of fairseq's `BeamSearch.step` and OpenNMT's `DecodeStrategy.advance`.

Conventions shared by both strategies:
- |Y|, the length in the length penalty and in `max_len`, counts the generated tokens
  *including* the final eos and excluding bos: a hypothesis "a b <eos>" has |Y| = 3.
- `max_len` (per sentence) is the largest |Y|; at |Y| = max_len only eos is allowed.
- `min_len` is the least number of tokens *before* eos: eos is forbidden while |Y| <= min_len.
  When the two conflict, `max_len` wins.
- Every step works on whole tensors over (batch, beam); no Python loop touches hypotheses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    """A finished translation: token ids (no bos, no eos) and its scores."""

    tokens: list[int]
    score: float  # log P(Y|X) / lp(|Y|): what the search maximises
    log_prob: float  # log P(Y|X), eos included


def length_penalty(length: int | Tensor, alpha: float, kind: str = "gnmt") -> float | Tensor:
    """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14).

    The paper uses alpha = 0.6 (sec. 6.1). |Y| counts the output tokens including eos.
    A hypothesis scores log P(Y|X) / lp(Y); alpha = 0 gives plain log-probability. `kind`
    "power" (`decode.length_penalty`) is |Y| ** alpha, as transformers and CTranslate2 divide.
    """
    return (length if kind == "power" else (5.0 + length) / 6.0) ** alpha


def constrain(logp: Tensor, length: int, min_len: int, max_len: Tensor, eos_id: int) -> Tensor:
    """Apply the length limits to the log-probabilities of the token that makes |Y| = `length`.

    logp: (batch, k, vocab), changed in place and returned; max_len: (batch,). Eos is
    forbidden while length <= min_len; at length >= max_len eos is the only choice.
    """
    eos = logp[:, :, eos_id].clone()  # (batch, k)
    if length <= min_len:
        logp[:, :, eos_id] = NEG_INF
    at_max = max_len.le(length)  # (batch,)
    if at_max.any():
        logp[at_max] = NEG_INF
        logp[:, :, eos_id] = torch.where(at_max[:, None], eos, logp[:, :, eos_id])
    return logp


# `topk(x, k)`: the k largest entries of x's last dimension and their indices, largest
# first, as `torch.topk(x, k)` returns them; the fast path passes a faster one.
TopK = Callable[[Tensor, int], tuple[Tensor, Tensor]]


def _to_hypotheses(tokens: Tensor, lengths: Tensor, scores: Tensor, logps: Tensor) -> list:
    """Finished lists as Python objects: tokens (n, m, L), lengths/scores/logps (n, m)."""
    out = []
    for toks, lens, scs, lps in zip(
        tokens.tolist(), lengths.tolist(), scores.tolist(), logps.tolist()
    ):
        rows = zip(toks, lens, scs, lps)
        out.append([Hypothesis(t[: n - 1], s, p) for t, n, s, p in rows if s > NEG_INF])
    return out


class BeamStrategy:
    """Batched beam search (sec. 6.1: beam 4, alpha 0.6, max length input + 50).

    Each step ranks the extensions of all live hypotheses of a sentence by log P (which
    ranks same-length candidates as the penalised score does) and takes the 2 * beam best:
    those that end in eos go to the sentence's finished list (the `nbest` best by penalised
    score), and the `beam` best of the others stay live. So the beam stays full while a
    sentence has hypotheses to extend. This is tensor2tensor's rule, the code behind the
    paper's numbers (HuggingFace's differ: `rules` below); 2 * beam candidates always hold
    `beam` that do not end in eos, since each hypothesis has at most one eos extension.
    Keeping only the `beam` best, eos included, and letting ended ones leave their slots
    empty misses translations that this rule finds: a better hypothesis may grow from a
    fifth-best prefix.

    Early termination. A live hypothesis of length t with log-prob L <= 0 can only finish
    with log-prob L' <= L at a length n in [t + 1, max_len], so its final score is at most
    L / max(lp(t + 1), lp(max_len)): with alpha > 0 the largest lp, at max_len, gives the
    bound (tensor2tensor's rule); comparing with lp at the current length would stop too
    early. A sentence is done when this bound for its best live hypothesis cannot beat its
    nbest-th finished score, when no live hypothesis is left, or at max_len.

    `rules` "transformers" (`decode.beam_rules`) are HuggingFace transformers' instead, so
    that an imported model translates as there: only the `beam` best of the 2 * beam
    candidates may finish (the others ending in eos are dropped), `beam` finished hypotheses
    are kept, and a sentence is done once it has them all and its best live hypothesis,
    scored at its current length, does not beat the worst (`early_stopping=False`); the eos
    forced at max_len counts as certain (`forced_eos_token_id`), not at its probability.
    """

    def __init__(
        self, max_len: Tensor, beam: int, nbest: int, alpha: float, min_len: int,
        eos_id: int, pad_id: int, topk: TopK = torch.topk, penalty: str = "gnmt",
        rules: str = "t2t",
    ) -> None:  # fmt: skip
        batch, device = max_len.size(0), max_len.device
        self.topk, self.penalty, self.rules = topk, penalty, rules  # `length_penalty`'s kind
        self.beam, self.nbest, self.alpha, self.min_len = beam, nbest, alpha, min_len
        self.eos_id, self.pad_id = eos_id, pad_id
        self.max_len = max_len  # (batch,) largest |Y| per sentence
        self.length = 0  # |Y| of the live hypotheses
        width = int(max_len.max()) if batch else 0  # an empty batch: `run_search` returns []
        self.scores = torch.zeros(batch, 1, device=device)  # (batch, k) log P of live hyps
        self.tokens = torch.zeros(batch, 1, 0, dtype=torch.long, device=device)  # (batch, k, t)
        kept = beam if rules == "transformers" else nbest  # finished hypotheses kept
        self.fin_scores = torch.full((batch, kept), NEG_INF, device=device)  # penalised
        self.fin_logp = torch.full((batch, kept), NEG_INF, device=device)
        self.fin_len = torch.zeros(batch, kept, dtype=torch.long, device=device)
        self.fin_tokens = torch.full((batch, kept, width), pad_id, dtype=torch.long, device=device)

    def step(self, logp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """logp: (batch, k, vocab) for the k live rows of each sentence (k = 1 at first).

        -> rows (batch * beam,) indices into the batch * k input rows to continue,
        tokens (batch * beam,) to feed next, done (batch,) bool.
        """
        batch, k, vocab = logp.shape
        self.length += 1
        logp = constrain(logp, self.length, self.min_len, self.max_len, self.eos_id)
        if self.rules == "transformers":  # its eos forced at the limit has probability 1
            logp[self.max_len.le(self.length), :, self.eos_id] = 0.0
        # A row's log P adds alike to all its extensions, so the sentence's 2 * beam best are
        # among the 2 * beam best tokens of each of its rows: only those are scored, and no
        # (batch, k, vocab) sum is made.
        n = 2 * self.beam
        width = min(n, vocab)
        row_top, row_token = self.topk(logp, width)  # (batch, k, width)
        cand = (self.scores[:, :, None] + row_top).view(batch, k * width)  # (batch, k * width)
        if cand.size(1) < n:  # a tiny vocabulary: fill the candidates with dead slots
            cand = F.pad(cand, (0, n - cand.size(1)), value=NEG_INF)
        top, index = cand.topk(n, dim=1)  # (batch, 2 * beam), best first
        # A dead slot's token is any; its score is -inf, so it never ends or continues.
        token = row_token.view(batch, k * width).gather(1, index.clamp(max=k * width - 1))
        eos = token.eq(self.eos_id)  # (batch, 2 * beam)
        ended = eos & top.gt(NEG_INF)
        if self.rules == "transformers":
            ended[:, self.beam :] = False  # only the beam best candidates finish
        if ended.any():
            self._finish(self._extend(index // width, token), top, ended)
        live, pick = top.masked_fill(eos, NEG_INF).topk(self.beam, dim=1)  # (batch, beam)
        parent = index.gather(1, pick).div_(width, rounding_mode="floor").clamp_(max=k - 1)
        token = token.gather(1, pick)  # (batch, beam)
        self.scores, self.tokens = live, self._extend(parent, token)  # (batch, beam, |Y|)
        rows = (parent + torch.arange(batch, device=parent.device)[:, None] * k).flatten()
        return rows, token.flatten(), self._done()

    def _extend(self, parent: Tensor, token: Tensor) -> Tensor:
        """The live hypotheses `parent` (batch, m) in [0, k), each + its `token` (batch, m)
        -> (batch, m, |Y|)."""
        parent = parent.clamp(max=self.tokens.size(1) - 1)  # dead slots of a tiny vocabulary
        prefix = self.tokens.gather(1, parent[:, :, None].expand(-1, -1, self.length - 1))
        return torch.cat([prefix, token[:, :, None]], dim=2)

    def _finish(self, seqs: Tensor, top: Tensor, ended: Tensor) -> None:
        """Merge the hypotheses that just ended into the finished lists (nbest long)."""
        n = self.length
        new_scores = (top / self._lp(n)).masked_fill(~ended, NEG_INF)
        scores = torch.cat([self.fin_scores, new_scores], dim=1)  # (batch, nbest + beam)
        self.fin_scores, pick = scores.topk(self.fin_scores.size(1), dim=1)  # (batch, nbest)
        logps = torch.cat([self.fin_logp, top], dim=1)
        lens = torch.cat([self.fin_len, torch.full_like(top, n, dtype=torch.long)], dim=1)
        seqs = F.pad(seqs, (0, self.fin_tokens.size(2) - n), value=self.pad_id)
        tokens = torch.cat([self.fin_tokens, seqs], dim=1)  # (batch, nbest + beam, width)
        self.fin_logp, self.fin_len = logps.gather(1, pick), lens.gather(1, pick)
        self.fin_tokens = tokens.gather(1, pick[:, :, None].expand(-1, -1, tokens.size(2)))

    def _done(self) -> Tensor:
        """(batch,) bool: nothing live can still enter the nbest list (see the class doc)."""
        best_live = self.scores.max(dim=1).values  # (batch,)
        best_lp = self._lp(self.max_len.float()).clamp(min=self._lp(self.length + 1.0))  # (batch,)
        if self.rules == "transformers":  # a heuristic, not a bound: the current length
            best_lp = self._lp(float(self.length))
        bound = best_live / best_lp  # -inf stays -inf
        beaten = bound.le(self.fin_scores[:, -1])
        return best_live.eq(NEG_INF) | beaten | self.max_len.le(self.length)

    def _lp(self, length: float | Tensor) -> float | Tensor:
        return length_penalty(length, self.alpha, self.penalty)

    def keep(self, index: Tensor) -> None:
        """Keep sentences `index` (batch,) only: the others have left the batch."""
        names = ("max_len", "scores", "tokens", "fin_scores", "fin_logp", "fin_len", "fin_tokens")
        for name in names:
            setattr(self, name, getattr(self, name).index_select(0, index))

    def results(self, index: Tensor) -> list[list[Hypothesis]]:
        """The finished lists of sentences `index`, best first."""
        pick = lambda t: t.index_select(0, index)[:, : self.nbest]  # noqa: E731
        return _to_hypotheses(
            pick(self.fin_tokens), pick(self.fin_len), pick(self.fin_scores), pick(self.fin_logp)
        )


class GreedyStrategy:
    """Greedy search: the most probable next token at each step, until eos or max_len.

    Same length limits and score (log P / lp) as `BeamStrategy`, one hypothesis per sentence.
    """

    def __init__(
        self, max_len: Tensor, alpha: float, min_len: int, eos_id: int, pad_id: int,
        topk: TopK = torch.topk, penalty: str = "gnmt",
    ) -> None:  # fmt: skip
        batch, device = max_len.size(0), max_len.device
        self.topk, self.penalty = topk, penalty
        self.alpha, self.min_len, self.eos_id, self.pad_id = alpha, min_len, eos_id, pad_id
        self.max_len = max_len  # (batch,)
        self.length = 0
        self.logp = torch.zeros(batch, device=device)  # (batch,) log P so far
        self.tokens = torch.zeros(batch, 0, dtype=torch.long, device=device)  # (batch, t)

    def step(self, logp: Tensor) -> tuple[None, Tensor, Tensor]:
        """logp: (batch, 1, vocab) -> rows None (unchanged), tokens (batch,), done (batch,)."""
        self.length += 1
        logp = constrain(logp, self.length, self.min_len, self.max_len, self.eos_id)
        best, token = (t.squeeze(1) for t in self.topk(logp[:, 0], 1))  # (batch,)
        self.logp = self.logp + best
        self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)
        done = token.eq(self.eos_id) | self.max_len.le(self.length) | best.eq(NEG_INF)
        return None, token, done

    def keep(self, index: Tensor) -> None:
        for name in ("max_len", "logp", "tokens"):
            setattr(self, name, getattr(self, name).index_select(0, index))

    def results(self, index: Tensor) -> list[list[Hypothesis]]:
        # A sentence leaves the batch at the step its eos is chosen, so its last token is eos.
        logp = self.logp.index_select(0, index)  # (n,)
        scores = logp / length_penalty(self.length, self.alpha, self.penalty)
        tokens = self.tokens.index_select(0, index)[:, None]  # (n, 1, |Y|)
        lengths = torch.full_like(tokens[:, :, 0], self.length)  # (n, 1)
        return _to_hypotheses(tokens, lengths, scores[:, None], logp[:, None])
