"""Attention's fast paths: decoding steps over the shared cache, eq. 1 written out for them
on the CPU, and the choice of PyTorch's fused attention kernel on GPUs.

`GroupedAttention` replaces `MultiHeadAttention` (module swap, the same parameters). Given
the fast path's cache (`kv_cache.SharedLayerCache`), it stacks the queries of a sentence's
hypotheses into one query block over the sentence's stored keys; otherwise it is the core
module. A decoding step has a few queries per sentence over its cached keys, where PyTorch's
fused CPU kernel is slow: `decoding_attention` does the same work in two batched products.
"""

from __future__ import annotations

import inspect
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from aiayn.fast.kv_cache import SharedLayerCache
from aiayn.model.attention import MultiHeadAttention, attend_mask


class GroupedAttention(MultiHeadAttention):
    """`MultiHeadAttention` (sec. 3.2.2) that reads a `SharedLayerCache` grouped by sentence;
    with any other cache, or none, the core module's forward."""

    @classmethod
    def from_core(cls, core: MultiHeadAttention) -> GroupedAttention:
        """A module over `core`'s own projections (not copies: optimizers and ties hold)."""
        with torch.device("meta"):  # placeholders, replaced below: no memory, no random draws
            fast = cls(1, core.n_heads, core.d_k, core.d_v, core.p_drop_attn, core.cross)
        fast.window = core.window
        for name, child in core.named_children():
            setattr(fast, name, child)
        fast.train(core.training)
        return fast

    def forward(
        self, x: Tensor, memory: Tensor | None = None, key_pad_mask: Tensor | None = None,
        causal: bool = False, cache=None,
    ) -> Tensor:  # fmt: skip
        """x: (rows, q_len, d_model) for the `group` rows of each of the cache's sentences
        -> (rows, q_len, d_model), as the core computes it row by row."""
        if not isinstance(cache, SharedLayerCache):
            return super().forward(x, memory, key_pad_mask, causal, cache)
        if self.cross:  # the keys once per sentence, computed at the first step
            k, v = cache.cross_k, cache.cross_v
            if k is None:
                k, v = cache.store_cross(*self.project_kv(memory))  # (sentences, heads, src_len, d)
            q = self._grouped(self.w_q(x), k.size(0))  # (sentences, heads, group * q_len, d_k)
            mask = attend_mask(key_pad_mask, False, q.size(2), k.size(2), x.device)
        else:  # the entries of each hypothesis's own history, masked (kv_cache.py)
            h_dk = self.n_heads * self.d_k
            q, k, v = self.w_qkv(x).split([h_dk, h_dk, self.n_heads * self.d_v], dim=-1)
            k, v, mask = cache.extend(k.unflatten(-1, (self.n_heads, self.d_k)),
                                      v.unflatten(-1, (self.n_heads, self.d_v)))  # fmt: skip
            q = self._grouped(q, k.size(0))
        if applies(q, k, v):
            out = decoding_attention(q, k, v, mask)  # (sentences, heads, group * q_len, d_v)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        rows, q_len = x.shape[:2]  # (sentences, heads, g * q_len, d_v) -> (rows, q_len, h * d_v)
        return self.w_o(out.transpose(1, 2).reshape(rows, q_len, self.n_heads * self.d_v))

    def _grouped(self, q: Tensor, sentences: int) -> Tensor:
        """Queries (rows, q_len, heads * d_k), rows = sentences * g -> (sentences, heads,
        g * q_len, d_k): the g rows of a sentence, which attend to the same keys, stacked."""
        rows, q_len, _ = q.shape
        g = rows // max(sentences, 1)  # rows per sentence (an empty batch has none)
        return q.view(sentences, g * q_len, self.n_heads, self.d_k).transpose(1, 2)


def applies(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """On the CPU, in float32/64, and with k and v whose (batch, heads) dimensions merge
    without a copy, as the shared cache's do (the copy would cost what the written-out form
    saves). In bfloat16/float16 PyTorch's kernel keeps the scores in float32, which the
    written-out form would round."""
    return (
        q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)
        and _merges(k) and _merges(v)
    )  # fmt: skip


def _merges(t: Tensor) -> bool:
    """Whether (batch, heads, len, d) views as (batch * heads, len, d) without a copy."""
    return t.stride(-1) == 1 and t.stride(0) == t.size(1) * t.stride(1)


def decoding_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Eq. 1 with the same shapes and result as `F.scaled_dot_product_attention`, no dropout:
    q (batch, heads, q_len, d_k), k (batch, heads, k_len, d_k), v (batch, heads, k_len, d_v)
    -> (batch, heads, q_len, d_v).

    k and v may be stored in a narrower dtype than q (the int8 model's bfloat16
    encoder-decoder stores, `kv_cache.SharedLayerCache`): the two products then run in that dtype
    (float32 sums, the result rounded), the mask and softmax in q's dtype, the output too.
    """
    batch, heads, q_len, d_k = q.shape
    k_len, dtype = k.size(2), q.dtype
    q = (q * d_k**-0.5).to(k.dtype).reshape(batch * heads, q_len, d_k)  # scaled first: smallest
    # K q^T, then transposed: MKL reads K faster as the left operand, row by row, than as
    # the right operand of q K^T, when K comes from memory rather than cache.
    scores_t = torch.bmm(k.reshape(batch * heads, k_len, d_k), q.transpose(1, 2))
    # A strided view of scores_t, not a copy, where k is in q's dtype: masked_fill_ writes
    # into it, softmax reads it.
    scores = scores_t.transpose(1, 2).reshape(batch, heads, q_len, k_len).to(dtype)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))  # mask broadcasts over heads (and queries)
    # (batch * heads, q_len, k_len): a view where softmax writes contiguous, as it does now
    weights = scores.softmax(dim=-1).to(v.dtype).reshape(batch * heads, q_len, k_len)
    out = torch.bmm(weights, v.reshape(batch * heads, k_len, v.size(-1)))
    return out.view(batch, heads, q_len, -1).to(dtype)  # (batch, heads, q_len, d_v)


# `TrainConfig.attention_kernel`'s names for PyTorch's attention kernels ("math": the plain
# composition of products and softmax), in the order tried after the preferred one.
KERNELS = {
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
# `sdpa_kernel`'s priority order came with torch 2.6; before it, the preference is a no-op.
_HAS_PRIORITY = "set_priority" in inspect.signature(sdpa_kernel).parameters


def kernel_preference(name: str, device: torch.device) -> AbstractContextManager:
    """A context in which PyTorch's fused attention on a CUDA GPU tries kernel `name` first,
    then the others (`KERNELS`' order), so inputs it cannot take still run (Flash and cuDNN
    take only bf16/fp16); "auto", a CPU or a torch before 2.6 leave PyTorch's own choice.

    Why: PyTorch picks a kernel by what it supports, not by what is fast for the shapes at
    hand, and translation batches of many short sentences fill a fraction of each kernel's
    tiles (benchmarks/attention_backends.py compares them). The kernel is chosen when the
    computation is traced, so under `torch.compile` the context must be active at the first
    call, and compiled code keeps the kernel of its first trace.
    """
    first = None if name == "auto" else KERNELS[name]  # an unknown name fails on any device
    if first is None or device.type != "cuda" or not _HAS_PRIORITY:
        return nullcontext()
    order = [first, *(kernel for kernel in KERNELS.values() if kernel != first)]
    return sdpa_kernel(order, set_priority=True)
