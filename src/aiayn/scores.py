"""Log-probabilities of given translations under a model: log P(Y|X) token by token.

    token_log_probs(model, [(src_ids, tgt_ids)])     # [[log p(y_1|X), ..., log p(eos|X, Y)]]
    score_pairs(translator, ["A dog sleeps."], ["Ein Hund schläft."])   # [PairScore]

One teacher-forced pass per batch of pairs, the training loss's log-probabilities (the
log-softmax of the logits in float32 at least, as `loss.label_smoothed_loss` takes
them), the end of sentence included. `PairScore` gives the sum, the mean per token and the
search's own score, log P / lp(|Y|) with GNMT's length penalty (`decode.strategy`), so a
hypothesis the search found scores here what the search said it scored.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from aiayn.data.batching import collate, longest_first_batches
from aiayn.data.corpus import read_lines
from aiayn.decode.strategy import length_penalty
from aiayn.errors import DataError
from aiayn.model.transformer import Transformer
from aiayn.translate import Translator


@torch.no_grad()
def token_log_probs(
    model: Transformer, pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    max_tokens: int = 4096,
) -> list[list[float]]:  # fmt: skip
    """log p of each target token and of the final eos, for each (source ids, eos last;
    target ids, no bos or eos) pair, in order."""
    device = next(model.parameters()).device
    out: list[list[float]] = [[] for _ in pairs]
    sizes = [len(s) + len(t) + 1 for s, t in pairs]
    for batch_ids in longest_first_batches(sizes, max_tokens):
        batch = collate([(list(pairs[i][0][:-1]), pairs[i][1]) for i in batch_ids]).to(device)
        logits = model(batch.src, batch.tgt_in)  # (batch, tgt_len, vocab)
        log_p = logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(-1)
        picked = log_p.gather(-1, batch.tgt_out[..., None]).squeeze(-1).cpu()  # (batch, tgt_len)
        for row, i in enumerate(batch_ids):
            out[i] = picked[row, : len(pairs[i][1]) + 1].tolist()
    return out


@dataclass(frozen=True)
class PairScore:
    """One pair's log-probabilities: a token's each, eos last."""

    token_log_probs: list[float]
    alpha: float  # the length penalty's exponent

    @property
    def log_prob(self) -> float:
        """log P(Y|X), eos included."""
        return float(sum(self.token_log_probs))

    @property
    def per_token(self) -> float:
        return self.log_prob / len(self.token_log_probs)

    @property
    def normalized(self) -> float:
        """log P(Y|X) / lp(|Y|): what beam search ranks by (|Y| counts eos)."""
        return self.log_prob / length_penalty(len(self.token_log_probs), self.alpha)

    def as_dict(self) -> dict:
        return {"log_prob": self.log_prob, "per_token": self.per_token,
                "normalized": self.normalized, "alpha": self.alpha,
                "tokens": len(self.token_log_probs), "token_log_probs": self.token_log_probs}  # fmt: skip

    def line(self) -> str:
        """`log_prob<TAB>per_token<TAB>normalized`, four decimals."""
        return f"{self.log_prob:.4f}\t{self.per_token:.4f}\t{self.normalized:.4f}"


def score_pairs(
    translator: Translator, sources: Sequence[str], hypotheses: Sequence[str],
    max_tokens: int = 4096,
) -> list[PairScore]:
    """Each (source, hypothesis) text pair's scores under `translator`'s model, with its
    decode config's alpha. A pair longer than the model's positions is an error (naming
    its line) rather than a score of a cut text."""
    if len(sources) != len(hypotheses):
        raise DataError(f"{len(sources)} sources but {len(hypotheses)} hypotheses")
    src_vocab, tgt_vocab = translator.src_vocab, translator.tgt_vocab
    limit = translator.model.config.max_len
    pairs = []
    for n, (src, tgt) in enumerate(
        zip(src_vocab.encode_batch(sources), tgt_vocab.encode_batch(hypotheses)), start=1
    ):
        if max(len(src), len(tgt)) + 1 > limit:
            raise DataError(
                f"line {n}: {max(len(src), len(tgt)) + 1} tokens (eos included), more than "
                f"the model's {limit} positions (model.max_len)"
            )
        pairs.append((src + [src_vocab.eos_id], tgt))
    alpha = translator.decode.alpha
    return [PairScore(lp, alpha) for lp in token_log_probs(translator.model, pairs, max_tokens)]


def score_files(
    checkpoint: str | Path, src: str | Path, hyp: str | Path, alpha: float | None = None,
    device: str = "cpu", reference: bool = False, as_json: bool = False,
) -> list[str]:  # fmt: skip
    """`aiayn score`: one output line per pair of lines of `src` and `hyp` (`PairScore.line`,
    or its JSON object); `alpha` None keeps the checkpoint's."""
    sources, hypotheses = [line.rstrip("\r") for line in read_lines(src)], list(read_lines(hyp))
    if len(sources) != len(hypotheses):
        raise DataError(f"{src} has {len(sources)} lines but {hyp} has {len(hypotheses)}: "
                        "each source line needs its translation")  # fmt: skip
    translator = Translator.from_checkpoint(checkpoint, device, alpha=alpha, reference=reference)
    scores = score_pairs(translator, sources, [h.rstrip("\r") for h in hypotheses])
    return [json.dumps(x.as_dict()) if as_json else x.line() for x in scores]
