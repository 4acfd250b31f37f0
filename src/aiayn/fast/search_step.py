"""A whole step of beam search as one function of tensors, for `compiled_step` to compile:
the decoder step (`static_step.DecoderStep`, up to its logits) and the beam's bookkeeping
(`static_beam.BeamStep`: the log-softmax, the tokens a search never generates, the best
extensions): one call a step, with no Python between them and no (rows, vocab) tensor
passed from one to the next.

    step = SearchStep(model)  # eos: the model's
    out = step(tokens, position, self_k, self_v, cross_k, cross_v, src_mask, forbidden,
               store_k, store_v, kept_k, kept_v, *beam.advance())  # beam: a `static_beam.StepBeam`
    rows, tokens, done = beam.update(out)  # kept_k, kept_v: written

Every sentence has `beam` rows from the first step on: bos in each, the rows after the first
with score -inf (`StepBeam`'s start), so every candidate of the first step comes from the
first row and the rows agree on what they hold. The earlier keys and values come in as
(earlier, layers, sentences, beam, heads, d), a view of the caller's store; `store_k` and
`store_v` are the same stores through this position (earlier + 1, ...), whose last entry is
not yet written. The step writes every position's keys and values, this one's included,
reordered by the rows the beam keeps, into `kept_k` and `kept_v` (earlier + 1, ...), views
of a second store that the caller owns and swaps in for the next step (`static_search`).

Writing into the caller's tensors, not returning new ones, spares a compiled step an
allocation of the whole store at every step, which on a wide batch of a base-sized model
costs more than the step; reordering inside the step spares a small model the calls around
it. The reorder is one indexed read per kept entry, from the store or at the last position
from this step's keys, which Inductor compiles into one loop that writes the caller's
store. The stores through this position come in as inputs of their own, not as a slice of
one input: a slice, or a length given as another's plus one, makes Inductor specialize or
write the reorder into a buffer of its own first.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.fast.static_beam import BeamStep
from aiayn.fast.static_step import DecoderStep


class SearchStep(nn.Module):
    """`DecoderStep`'s logits and `BeamStep` in one function (the module's docstring)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.step = DecoderStep(model)
        self.beam = BeamStep(model.config.eos_id)

    def forward(
        self, tokens: Tensor, position: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor,
        cross_v: Tensor, src_mask: Tensor, forbidden: Tensor, store_k: Tensor, store_v: Tensor,
        kept_k: Tensor, kept_v: Tensor, *state: Tensor,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """tokens (sentences, beam) fed now; position (d_model,) their positional encoding;
        self_k, self_v (earlier, layers, sentences, beam, heads, d_k | d_v); cross_k,
        cross_v, src_mask as `DecoderStep` takes them; forbidden (ids,) the tokens never
        generated; store_k, store_v (earlier + 1, ...) the same stores through this
        position, its own unwritten; kept_k, kept_v (earlier + 1, ...) written: every
        position's keys and values, the rows in the order the beam keeps them; state:
        `StepBeam.advance`'s. -> `BeamStep`'s outputs (the next tokens (sentences, beam))."""
        sentences, beam = tokens.shape
        logits, new_k, new_v = self.step.logits(tokens.flatten(), position, self_k.flatten(2, 3),
                                                self_v.flatten(2, 3), cross_k, cross_v, src_mask)  # fmt: skip
        out = self.beam(logits.view(sentences, beam, -1), forbidden, *state)  # logits (rows, vocab)
        rows = out[0]  # (sentences * beam,) the parent of each kept hypothesis
        sentence = torch.arange(sentences, device=rows.device)[:, None]  # (sentences, 1)
        parent = rows.view(sentences, beam) - sentence * beam  # (sentences, beam) within its sentence
        positions = store_k.size(0)
        last = torch.arange(positions, device=rows.device).eq(positions - 1).view(-1, 1, 1, 1, 1, 1)
        for kept, store, new in ((kept_k, store_k, new_k), (kept_v, store_v, new_v)):
            new = new.view(1, new.size(0), sentences, beam, *new.shape[2:])  # (1, layers, sentences, beam, heads, d)
            # (earlier + 1, layers, sentences, beam, heads, d): each kept row's parent's entries
            kept.copy_(torch.where(last, new[:, :, sentence, parent], store[:, :, sentence, parent]))
        return (rows, out[1].view(sentences, beam), *out[2:])
