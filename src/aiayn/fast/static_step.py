"""One decoder step as a single function of tensors (a speed-up of `Transformer.decode` with
a cache, `project` and the log-softmax of `decode/search.py`).

    step = DecoderStep.from_model(model)
    logp, new_k, new_v = step(tokens, position, self_k, self_v, cross_k, cross_v, src_mask)

The core's step walks the model's modules, its cache objects and their Python bookkeeping:
on a small model most of a step's time is that walk, not arithmetic. Here a step is the
arithmetic alone, over plain tensors: the token embedding and its position (sec. 3.4, 3.5),
each decoder layer (sec. 3.1: masked self-attention over the earlier positions' keys and
values, encoder-decoder attention, eq. 2, each in its residual connection and LayerNorm)
and the pre-softmax projection with its log-softmax, in float32 as the core's search takes
it. The caller keeps the keys and values: the step reads the earlier ones and returns the
new position's, so that it mutates nothing and can run eagerly or be compiled as one graph.

Self-attention at the new position sees the earlier positions' keys and its own (the
decoder's masking, sec. 3.2.3): the scores of the two parts are put side by side before one
softmax, so no key is copied to join them. Encoder-decoder attention runs the `group`
hypotheses of a sentence as one query block over the sentence's keys, stored once.

The weights are the model's own: the step calls its linear maps (the fast path's products,
where they are swapped in) and LayerNorms by the core modules' names, which the fast
pieces keep; so the step computes what the core computes for any `ModelConfig` except
restricted self-attention (a window: `supports` says no).
"""

from __future__ import annotations

import math
from functools import reduce

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.fast.int8 import Int8Linear
from aiayn.model.transformer import Transformer


def supports(model: Transformer) -> bool:
    """Whether `DecoderStep` computes this model's step: linear maps that are `nn.Linear`s
    or int8's (`int8.Int8Linear`), and no attention window (`model/window.py` keeps a window
    the step does not)."""
    linears = [model.out_proj, *(m for layer in model.decoder for m in layer.modules()
                                 if "Linear" in type(m).__name__)]  # fmt: skip
    kinds = (nn.Linear, Int8Linear)
    return model.config.attention_window == 0 and all(isinstance(m, kinds) for m in linears)


class SourceKeys(nn.Module):
    """What a search computes once from its sources: the encoder (sec. 3.1), then each decoder
    layer's encoder-decoder keys and values of its output, and the mask of the real tokens.
    src (sentences, src_len) ids -> cross_k, cross_v (layers, sentences, heads, src_len,
    d_k | d_v), src_mask (sentences, 1, 1, src_len), True = may attend: `DecoderStep`'s
    inputs."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        model = self.model
        src_pad = model.pad_mask(src)  # (sentences, src_len), True = padding
        memory = model.encode(src, src_pad)  # (sentences, src_len, d_model)
        cross = [layer.cross_attn.project_kv(memory) for layer in model.decoder]
        cross_k = torch.stack([k for k, _ in cross])  # (layers, sentences, heads, src_len, d_k)
        cross_v = torch.stack([v for _, v in cross])  # (layers, sentences, heads, src_len, d_v)
        return cross_k, cross_v, ~src_pad[:, None, None, :]


class DecoderStep(nn.Module):
    """The decoder's step over explicit keys and values (see the module's docstring)."""

    def __init__(self, model: Transformer, transposed: bool = False) -> None:
        super().__init__()
        if not supports(model):
            raise ValueError("DecoderStep needs nn.Linear or Int8Linear maps and no attention window")
        c = model.config
        self.model = model  # a submodule: its parameters are the step's (no copies)
        self.heads, self.d_k, self.d_v = c.n_heads, c.key_dim, c.value_dim
        self.pre_norm = c.norm == "pre"
        # transposed: each of the step's weights also held as (in, out) in float32 (`_linear`),
        # an int8 map's as its int8 values
        self._transposed: dict[str, str] = {}  # a linear's path in the model -> its buffer
        for path in _step_linears(model) if transposed else []:
            linear = model.get_submodule(path)
            weight = linear.weight_int8.float() if isinstance(linear, Int8Linear) else linear.weight
            name = "transposed_" + path.replace(".", "_")
            self.register_buffer(name, weight.detach().t().contiguous(), persistent=False)
            self._transposed[path] = name

    @classmethod
    def from_model(cls, model: Transformer) -> DecoderStep:
        return cls(model).eval()

    def forward(
        self, tokens: Tensor, position: Tensor, self_k: Tensor, self_v: Tensor,
        cross_k: Tensor, cross_v: Tensor, src_mask: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        """tokens (rows,) fed at this step; position (d_model,): its positional encoding;
        self_k, self_v (earlier, layers, rows, heads, d_k | d_v): the earlier positions'
        (position first, so that a store's first positions are one contiguous block);
        cross_k, cross_v (layers, sentences, heads, src_len, d_k | d_v): the encoder output's,
        once per sentence, whose `group` = rows / sentences rows are contiguous; src_mask
        (sentences, 1, 1, src_len), True = may attend.
        -> log-probabilities (rows, vocab) in float32, and this position's keys and values
        (layers, rows, heads, d_k | d_v)."""
        logits, new_k, new_v = self.logits(tokens, position, self_k, self_v, cross_k, cross_v, src_mask)
        return logits.log_softmax(dim=-1), new_k, new_v

    def logits(
        self, tokens: Tensor, position: Tensor, self_k: Tensor, self_v: Tensor,
        cross_k: Tensor, cross_v: Tensor, src_mask: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
        """The step (`forward`) up to the pre-softmax logits (rows, vocab), in float32."""
        m, rows = self.model, tokens.size(0)
        x = F.embedding(tokens, m.tgt_embed.weight) * m.tgt_embed.scale + position  # (rows, d)
        new_k, new_v = [], []
        for i, layer in enumerate(m.decoder):
            at = f"decoder.{i}"  # the layer's path in the model
            res = layer.res_self
            q, k, v = self._linear(f"{at}.self_attn.w_qkv", self._in(res, x)).split(
                [self.heads * self.d_k, self.heads * self.d_k, self.heads * self.d_v], dim=-1
            )
            q, k, v = (t.view(rows, self.heads, -1) for t in (q, k, v))  # (rows, heads, d)
            new_k.append(k)
            new_v.append(v)
            out = self._self_attention(q, k, v, self_k[:, i], self_v[:, i])  # (rows, heads * d_v)
            x = self._out(res, x, self._linear(f"{at}.self_attn.w_o", out))
            res = layer.res_cross
            q = self._linear(f"{at}.cross_attn.w_q", self._in(res, x))  # (rows, heads * d_k)
            out = self._cross_attention(q, cross_k[i], cross_v[i], src_mask)
            x = self._out(res, x, self._linear(f"{at}.cross_attn.w_o", out))
            ffn, res = layer.ffn, layer.res_ffn
            hidden = ffn.activation(self._linear(f"{at}.ffn.w_1", self._in(res, x)))  # (rows, d_ff)
            x = self._out(res, x, self._linear(f"{at}.ffn.w_2", hidden))
        x = m.decoder_norm(x)  # the pre-LN stack's final norm; the paper's post-LN: none
        logits = self._linear("out_proj", x)  # (rows, vocab)
        return logits.float(), torch.stack(new_k), torch.stack(new_v)

    def _in(self, res: nn.Module, x: Tensor) -> Tensor:
        """A sub-layer's input: x, or LayerNorm(x) in the pre-LN variant (`Residual`)."""
        return res.norm(x) if self.pre_norm else x

    def _out(self, res: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """The residual connection around a sub-layer's output y (sec. 3.1, `Residual`)."""
        return x + y if self.pre_norm else res.norm(x + y)

    def _self_attention(self, q: Tensor, k: Tensor, v: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        """Eq. 1 for a query per row over its earlier keys and its own: q, k, v (rows, heads,
        d); keys, values (earlier, rows, heads, d) -> (rows, heads * d_v)."""
        scale = 1.0 / math.sqrt(self.d_k)
        earlier = torch.einsum("rhd,trhd->rht", q, keys) * scale  # (rows, heads, earlier)
        own = (q * k).sum(dim=-1, keepdim=True) * scale  # (rows, heads, 1)
        weights = torch.cat([earlier, own], dim=-1).softmax(dim=-1)  # (rows, heads, earlier + 1)
        n = keys.size(0)
        out = torch.einsum("rht,trhd->rhd", weights[..., :n], values) + weights[..., n:] * v
        return out.flatten(1)  # (rows, heads * d_v)

    def _cross_attention(self, q: Tensor, keys: Tensor, values: Tensor, src_mask: Tensor) -> Tensor:
        """Eq. 1 over the source: q (rows, heads * d_k), a sentence's rows together; keys,
        values (sentences, heads, src_len, d) -> (rows, heads * d_v)."""
        rows, sentences = q.size(0), keys.size(0)
        q = q.view(sentences, rows // sentences, self.heads, self.d_k).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=src_mask)
        return out.transpose(1, 2).reshape(rows, self.heads * self.d_v)  # (rows, heads * d_v)

    def _linear(self, path: str, x: Tensor) -> Tensor:
        """The model's linear map at `path` applied to x: the module itself, eagerly the fast
        path's product choice where it is swapped in; traced for a compiler, its product is
        plain `F.linear`, which the compiler picks a kernel for (`linear.linear` under a
        compiler; an `Int8Linear` gives its own traced form, a `BucketedLinear` its padded
        rows). A step built `transposed` multiplies by the weight held as (in, out) instead:
        x @ W^T with W^T stored row by row, which MKL's products take without repacking W
        at each call, faster at a few rows; at hundreds of rows the (out, in) form is as fast
        or faster (`compiled_step` builds one library each way and times them). An int8
        map's product is then its int8 arithmetic in float32 registers, where oneDNN's int8
        call costs more than a few rows' arithmetic: the input's levels times the weights'
        int8 values, whole numbers whose float32 sums are exact below 2^24 (255 x 127 x 512
        is below it), then scaled, as oneDNN scales its int32 sums."""
        linear = reduce(getattr, path.split("."), self.model)  # not get_submodule: its checks are slow per call
        if torch.compiler.is_compiling():
            if path in self._transposed:
                weight = getattr(self, self._transposed[path])  # (in, out)
                if isinstance(linear, Int8Linear):
                    levels, scale = linear.input_levels(x)  # (rows, in) whole numbers, (1,)
                    out = (levels @ weight) * (scale * linear.weight_scale)  # (rows, out)
                    return out if linear.bias is None else out + linear.bias
                return x @ weight if linear.bias is None else torch.addmm(linear.bias, x, weight)
        return linear(x)


def _step_linears(model: Transformer) -> list[str]:
    """The paths of the linear maps a decoder step applies (not the encoder-decoder keys'
    and values', which `SourceKeys` computes once)."""
    maps = ("self_attn.w_qkv", "self_attn.w_o", "cross_attn.w_q", "cross_attn.w_o", "ffn.w_1", "ffn.w_2")
    return [*(f"decoder.{i}.{name}" for i in range(len(model.decoder)) for name in maps), "out_proj"]
