"""A whole step of beam search as one function of tensors, for `compiled_step` to compile:
the decoder step (`static_step.DecoderStep`, up to its logits) and the beam's bookkeeping
(`static_beam.BeamStep`: the log-softmax, the tokens a search never generates, the best
extensions): one call a step, with no Python between them and no (rows, vocab) tensor
passed from one to the next.

    step = SearchStep(model)  # eos: the model's
    out = step(tokens, position, self_k, self_v, cross_k, cross_v, src_mask, forbidden,
               origin, slot_k, slot_v, *beam.advance())  # beam: a `static_beam.StepBeam`
    rows, tokens, done = beam.update(out[:-1]); origin = out[-1]  # slot_k, slot_v: written

Every sentence has `beam` rows from the first step on: bos in each, the rows after the first
with score -inf (`StepBeam`'s start), so every candidate of the first step comes from the
first row and the rows agree on what they hold.

The keys and values stay where they were written. A beam step changes which hypothesis a
row holds, and the core's cache (`model/cache.py`) copies every earlier position's keys
into the new order: every step reads and writes all the keys of the search. Here a
hypothesis instead finds its earlier keys through `origin` (earlier, sentences, beam): at
each earlier position, the row of its sentence that holds its ancestor's entry (the idea
of `kv_cache.SharedKVCache`'s `slots`, which the eager search reads through a mask). The
attention reads the keys through that index, in the loop that Inductor writes anyway to
lay them out for the product, so the reorder's copy is gone.

The earlier keys and values come in as (earlier, layers, sentences, beam, heads, d), a
view of the caller's store; this position's are written into `slot_k` and `slot_v`
(layers, sentences, beam, heads, d), the store's next position, at the rows that computed
them; and the step returns the origin of the hypotheses it keeps (earlier + 1,
sentences, beam): their parents' origins, and at this position the parents themselves.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.fast.static_beam import BeamStep
from aiayn.fast.static_step import DecoderStep


class SearchStep(nn.Module):
    """`DecoderStep`'s logits and `BeamStep` in one function (the module's docstring)."""

    def __init__(self, model, transposed: bool = False) -> None:
        super().__init__()
        self.step = DecoderStep(model, transposed)  # transposed: `DecoderStep`'s
        self.beam = BeamStep(model.config.eos_id)

    def forward(
        self, tokens: Tensor, position: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor,
        cross_v: Tensor, src_mask: Tensor, forbidden: Tensor, origin: Tensor, slot_k: Tensor,
        slot_v: Tensor, *state: Tensor,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """tokens (sentences, beam) fed now; position (d_model,) their positional encoding;
        self_k, self_v (earlier, layers, sentences, beam, heads, d_k | d_v) the store's
        entries as written; cross_k, cross_v, src_mask as `DecoderStep` takes them;
        forbidden (ids,) the tokens never generated; origin (earlier, sentences, beam) long:
        the row of its sentence that holds each hypothesis's entry at each earlier
        position; slot_k, slot_v (layers, sentences, beam, heads, d_k | d_v) written: this
        position's keys and values; state: `StepBeam.advance`'s.
        -> `BeamStep`'s outputs (the next tokens (sentences, beam)), then the kept
        hypotheses' origin (earlier + 1, sentences, beam)."""
        sentences, beam = tokens.shape
        earlier = origin[:, None, :, :, None, None]  # (earlier, 1, sentences, beam, 1, 1)
        # (earlier, layers, sentences * beam, heads, d): each hypothesis's own entries
        keys, values = (store.gather(3, earlier.expand(store.shape)).flatten(2, 3)
                        for store in (self_k, self_v))  # fmt: skip
        logits, new_k, new_v = self.step.logits(tokens.flatten(), position, keys, values,
                                                cross_k, cross_v, src_mask)  # fmt: skip
        slot_k.copy_(new_k.view(slot_k.shape))  # (layers, rows, heads, d) at their rows
        slot_v.copy_(new_v.view(slot_v.shape))
        out = self.beam(logits.view(sentences, beam, -1), forbidden, *state)  # logits (rows, vocab)
        rows = out[0]  # (sentences * beam,) the parent of each kept hypothesis
        sentence = torch.arange(sentences, device=rows.device)[:, None]  # (sentences, 1)
        parent = rows.view(sentences, beam) - sentence * beam  # (sentences, beam) within its sentence
        inherited = origin.gather(2, parent.expand(origin.shape))  # (earlier, sentences, beam)
        return (rows, out[1].view(sentences, beam), *out[2:],
                torch.cat([inherited, parent[None]]))  # fmt: skip
