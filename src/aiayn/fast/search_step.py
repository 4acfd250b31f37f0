"""A whole step of beam search as one function of tensors, for `compiled_step` to compile:
the decoder step (`static_step.DecoderStep`, up to its logits), the beam's bookkeeping
(`static_beam.BeamStep`: the log-softmax, the tokens a search never generates, the best
extensions) and the reorder of the self-attention keys and values: one call a step, with
no Python between them and no (rows, vocab) tensor passed from one to the next.

    step = SearchStep(model)  # eos: the model's
    out = step(tokens, position, self_k, self_v, cross_k, cross_v, src_mask, forbidden,
               *beam.advance())  # beam: a `static_beam.StepBeam`
    rows, tokens, done = beam.update(out[:9]); self_k, self_v = out[9:]

Every sentence has `beam` rows from the first step on: bos in each, the rows after the first
with score -inf (`StepBeam`'s start), so every candidate of the first step comes from the
first row and the rows agree on what they hold. The keys and values come in and go out
as (positions, layers, sentences, beam, heads, d): a sentence's rows are one block, so that
a sentence that leaves is one index along the sentences; each step returns them one
position longer, in the order of the rows the beam kept.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.fast.static_beam import BeamStep
from aiayn.fast.static_step import DecoderStep


class SearchStep(nn.Module):
    """`DecoderStep`'s logits, `BeamStep` and the beam's reorder of the keys and values, in
    one function (the module's docstring)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.step = DecoderStep(model)
        self.beam = BeamStep(model.config.eos_id)

    def forward(
        self, tokens: Tensor, position: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor,
        cross_v: Tensor, src_mask: Tensor, forbidden: Tensor, *state: Tensor,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """tokens (sentences, beam) fed now; position (d_model,) their positional encoding;
        self_k, self_v (earlier, layers, sentences, beam, heads, d_k | d_v); cross_k,
        cross_v, src_mask as `DecoderStep` takes them; forbidden (ids,) the tokens never
        generated; state: `StepBeam.advance`'s. -> `BeamStep`'s outputs (the next tokens
        (sentences, beam)), then self_k and self_v with this position's, reordered."""
        sentences, beam = tokens.shape
        earlier, layers = self_k.shape[:2]
        flat_k, flat_v = self_k.flatten(2, 3), self_v.flatten(2, 3)  # (earlier, layers, rows, heads, d)
        logits, new_k, new_v = self.step.logits(tokens.flatten(), position, flat_k, flat_v,
                                                cross_k, cross_v, src_mask)  # fmt: skip
        out = self.beam(logits.view(sentences, beam, -1), forbidden, *state)  # logits (rows, vocab)
        rows = out[0]  # (rows,) the kept hypotheses' parents
        keys = torch.cat([flat_k, new_k[None]]).index_select(2, rows)  # (earlier + 1, layers, rows, heads, d_k)
        values = torch.cat([flat_v, new_v[None]]).index_select(2, rows)
        return (rows, out[1].view(sentences, beam), *out[2:],
                keys.view(earlier + 1, layers, sentences, beam, *keys.shape[3:]),
                values.view(earlier + 1, layers, sentences, beam, *values.shape[3:]))  # fmt: skip
