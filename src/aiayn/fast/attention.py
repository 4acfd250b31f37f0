"""Attention's fast paths: eq. 1 written out for decoding steps on the CPU, and the choice
of PyTorch's fused attention kernel on GPUs.

`DecodingAttention` replaces `ScaledDotProductAttention` (module swap): a decoding step
has a few queries per sentence (its hypotheses' new positions) over the sentence's cached
keys, where PyTorch's fused CPU kernel is slow; two batched products do the same work.
"""

from __future__ import annotations

import inspect
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from aiayn.model.attention import ScaledDotProductAttention


class DecodingAttention(ScaledDotProductAttention):
    """Eq. 1 as `decoding_attention` where it applies (see `applies`), else PyTorch's kernel."""

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, p_drop: float = 0.0,
        causal: bool = False,
    ) -> Tensor:  # fmt: skip
        if applies(q, k, v, p_drop, causal):
            return decoding_attention(q, k, v, mask)
        return super().forward(q, k, v, mask, p_drop, causal)


def applies(q: Tensor, k: Tensor, v: Tensor, p_drop: float, causal: bool) -> bool:
    """On the CPU, in float32/64, without dropout or the causal flag, and with k and v
    whose (batch, heads) dimensions merge without a copy, as the decoding cache's do (the
    copy would cost what the written-out form saves). In bfloat16/float16 PyTorch's kernel
    keeps the scores in float32, which the written-out form would round."""
    return (
        q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)
        and p_drop == 0.0 and not causal and _merges(k) and _merges(v)
    )  # fmt: skip


def _merges(t: Tensor) -> bool:
    """Whether (batch, heads, len, d) views as (batch * heads, len, d) without a copy."""
    return t.stride(-1) == 1 and t.stride(0) == t.size(1) * t.stride(1)


def decoding_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Eq. 1 with the same shapes and result as `ScaledDotProductAttention`, no dropout:
    q (batch, heads, q_len, d_k), k (batch, heads, k_len, d_k), v (batch, heads, k_len, d_v)
    -> (batch, heads, q_len, d_v).

    k and v may be stored in a narrower dtype than q (the int8 model's bfloat16
    encoder-decoder stores, `fast/cache.py`): the two products then run in that dtype
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
