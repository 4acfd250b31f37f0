"""A whole step of beam search as one function of tensors, for `compiled_step` to compile:
the decoder step (`static_step.DecoderStep`, up to its logits) and the beam's bookkeeping
(`static_beam.BeamStep`: the log-softmax, the tokens a search never generates, the best
extensions): one call a step, with no Python between them and no (rows, vocab) tensor
passed from one to the next.

    step = SearchStep(model)  # eos: the model's
    out = step(tokens, position, self_k, self_v, cross_k, cross_v, src_mask, forbidden,
               *beam.advance())  # beam: a `static_beam.StepBeam`
    rows, tokens, done = beam.update(out[:9]); new_k, new_v = out[9:]

Every sentence has `beam` rows from the first step on: bos in each, the rows after the first
with score -inf (`StepBeam`'s start), so every candidate of the first step comes from the
first row and the rows agree on what they hold. The earlier keys and values come in as
(positions, layers, sentences, beam, heads, d), a view of the caller's store; this
position's go out, and the caller stores them and reorders the store by `rows` into one it
keeps (`static_search`): a function that returned the reordered keys would allocate them
anew at every step, which on a wide batch of a base-sized model costs more than the step.
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
        cross_v: Tensor, src_mask: Tensor, forbidden: Tensor, *state: Tensor,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """tokens (sentences, beam) fed now; position (d_model,) their positional encoding;
        self_k, self_v (earlier, layers, sentences, beam, heads, d_k | d_v); cross_k,
        cross_v, src_mask as `DecoderStep` takes them; forbidden (ids,) the tokens never
        generated; state: `StepBeam.advance`'s. -> `BeamStep`'s outputs (the next tokens
        (sentences, beam)), then this position's keys and values (layers, sentences, beam,
        heads, d_k | d_v), in the order of the rows fed."""
        sentences, beam = tokens.shape
        logits, new_k, new_v = self.step.logits(tokens.flatten(), position, self_k.flatten(2, 3),
                                                self_v.flatten(2, 3), cross_k, cross_v, src_mask)  # fmt: skip
        out = self.beam(logits.view(sentences, beam, -1), forbidden, *state)  # logits (rows, vocab)
        return (out[0], out[1].view(sentences, beam), *out[2:],
                new_k.view(new_k.size(0), sentences, beam, *new_k.shape[2:]),
                new_v.view(new_v.size(0), sentences, beam, *new_v.shape[2:]))  # fmt: skip
