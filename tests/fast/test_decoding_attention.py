"""The attention fast paths (`fast/attention.py`): the written-out decoding step against
PyTorch's fused kernel (which the core's attention calls), the shared cache's narrowed
encoder-decoder stores, and the GPU kernel preference."""

import typing

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

import aiayn.fast.attention as attention
from aiayn import fast
from aiayn.config import TrainConfig
from aiayn.fast.attention import _HAS_PRIORITY, KERNELS, decoding_attention, kernel_preference
from aiayn.fast.kv_cache import SharedKVCache
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config


def _sdpa_state() -> tuple:
    """PyTorch's kernel order for scaled_dot_product_attention, and which kernels it may use
    (global flags, readable without a GPU)."""
    cuda = torch.backends.cuda
    enabled = (cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled(),
               cuda.cudnn_sdp_enabled(), cuda.math_sdp_enabled())  # fmt: skip
    return tuple(torch._C._get_sdp_priority_order()), enabled


def test_the_configs_kernel_names_are_kernel_preferences():
    names = typing.get_args(typing.get_type_hints(TrainConfig)["attention_kernel"])
    assert set(names) == {"auto", *KERNELS} and TrainConfig().attention_kernel in KERNELS
    with pytest.raises(KeyError):
        kernel_preference("fastest", torch.device("cpu"))


@pytest.mark.skipif(not _HAS_PRIORITY, reason="torch before 2.6: no kernel priority order")
@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_preference_puts_its_kernel_first_on_a_gpu_and_keeps_the_others(name):
    before = _sdpa_state()
    with kernel_preference(name, torch.device("cuda")):
        order, enabled = _sdpa_state()
        assert order[0] == int(KERNELS[name])
        assert set(order[:4]) == {int(k) for k in KERNELS.values()}  # the rest as fallbacks
        assert order[3] == int(SDPBackend.MATH) or name == "math"
        assert all(enabled)
    assert _sdpa_state() == before


@pytest.mark.skipif(not _HAS_PRIORITY, reason="torch before 2.6: no kernel priority order")
def test_kernel_preference_leaves_pytorchs_choice_for_auto_and_on_a_cpu():
    before = _sdpa_state()
    for name, device in (("auto", "cuda"), ("efficient", "cpu"), ("math", "cpu")):
        with kernel_preference(name, torch.device(device)):
            assert _sdpa_state() == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_every_preferred_kernel_gives_the_same_loss_and_gradients_on_a_gpu():
    """Whichever kernel `train.attention_kernel` prefers (and its fallbacks, where it cannot
    take the inputs: FlashAttention has no float32), the trainer's loss and gradients are
    those of the plain composition, in float32 and under bf16 autocast."""
    from aiayn.loss import RealTokenLoss
    from aiayn.train.validate import real_positions

    torch.manual_seed(0)
    model = Transformer(tiny_model_config(vocab_size=50, d_model=64, d_ff=128)).cuda()
    src, tgt = torch.randint(4, 50, (6, 11)).cuda(), torch.randint(4, 50, (6, 10)).cuda()
    src[0, -3:] = tgt[1, -4:] = 0  # padding on both sides: the masked and causal kernels
    positions, target = real_positions(tgt[:, 1:], 0, src.device)

    def loss_and_grads(name: str, dtype: torch.dtype) -> list[torch.Tensor]:
        model.zero_grad()
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
            with kernel_preference(name, src.device):
                smoothed, _ = RealTokenLoss(model, 0.1)(src, tgt[:, :-1], positions, target)
        smoothed.backward()
        return [smoothed.detach(), *(p.grad.clone() for p in model.parameters())]

    for dtype in (torch.float32, torch.bfloat16):
        expected = loss_and_grads("math", dtype)
        for name in ("auto", "efficient", "flash", "cudnn"):
            got = loss_and_grads(name, dtype)
            if dtype == torch.float32:
                torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=0)
                for g, e in zip(got[1:], expected[1:]):
                    torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4 * e.abs().max().item())
                continue
            # bf16: the fused kernels round the softmax weights (and their backward's
            # intermediates) to bf16 for the second product, where PyTorch's composition
            # computes bf16 inputs in float32; so single gradient elements can differ by
            # 40% and a whole weight's gradient by 5.8% (an H200, torch 2.11: the first FFN
            # of the last decoder layer), the loss by 2.6e-4.
            torch.testing.assert_close(got[0], expected[0], rtol=3e-3, atol=0)
            for g, e in zip(got[1:], expected[1:]):
                assert (g - e).norm() <= 0.1 * e.norm()


@pytest.mark.parametrize("mask_shape", [None, (3, 1, 1, 9), (3, 1, 4, 9)])
def test_decoding_attention_is_eq1_as_the_fused_kernel_computes_it(mask_shape):
    """The written-out form of a decoding step (4 queries per sentence) against the fused
    kernel: no mask, a source padding mask broadcast over queries, a per-query mask; keys
    and values as the cache holds them, a prefix of a larger store."""
    q = torch.randn(3, 2, 8, 4, 5).select(2, 1)  # (batch, heads, q_len, d_k), not contiguous
    store = torch.randn(2, 3, 2, 12, 5)
    k, v = store[0, :, :, :9], store[1, :, :, :9]  # (batch, heads, 9, d): views of the store
    mask = None
    if mask_shape is not None:
        mask = torch.rand(mask_shape) < 0.6
        mask[..., 0] = True  # every query sees at least one key, as in decoding
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(decoding_attention(q, k, v, mask), expected)


@pytest.mark.parametrize("masked", [False, True])
def test_decoding_attention_over_bfloat16_keys_runs_its_products_in_bfloat16(masked):
    """float32 queries over bfloat16 keys and values (the int8 model's encoder-decoder
    stores): float32 out, eq. 1 to bfloat16's precision, both products in bfloat16 (the
    output is a bfloat16 product's, exactly representable in bfloat16), masked keys unseen."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 2, 4, 8, generator=gen)  # (batch, heads, q_len, d_k)
    k, v = (torch.randn(3, 2, 9, 8, generator=gen).bfloat16() for _ in range(2))
    mask = None
    if masked:
        mask = torch.ones(3, 1, 1, 9, dtype=torch.bool)
        mask[1, ..., 6:] = False  # sentence 1's last 3 keys are padding
        v[1, :, 6:] = 1e4  # would dominate its output if they were seen
    out = decoding_attention(q, k, v, mask)
    assert out.dtype == torch.float32 and out.shape == (3, 2, 4, 8)
    assert torch.equal(out, out.bfloat16().float())  # rounded as a bfloat16 product's result
    expected = F.scaled_dot_product_attention(q, k.float(), v.float(), attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=0.03, rtol=0.02)


@torch.no_grad()
def test_the_cache_keeps_encoder_decoder_keys_in_its_cross_dtype(store_buffers):
    """`cross_dtype` bfloat16: the encoder-decoder stores are bfloat16 (and stay so
    when a sentence leaves), the self-attention ones float32; decoding matches float32's
    to bfloat16's precision and differs from it (the narrow stores are the ones read)."""
    model = fast.apply(Transformer(tiny_model_config()).eval())
    src = torch.tensor([[5, 6, 7, 3], [9, 10, 3, 0]])
    src_pad = model.pad_mask(src)
    memory = model.encode(src, src_pad)
    tgt = torch.tensor([[2, 4, 6], [2, 5, 8]])
    expected = model.decode(tgt, memory, src_pad)  # float32, no cache
    cache = SharedKVCache(len(model.decoder), src_pad, buffers=store_buffers, cross_dtype=torch.bfloat16)
    steps = [model.decode(tgt[:, t : t + 1], memory, src_pad, cache) for t in range(3)]
    got = torch.cat(steps, dim=1)
    layer = cache.layers[0]
    assert layer.cross_k.dtype == layer.cross_v.dtype == torch.bfloat16
    assert layer.cross_k.is_contiguous() and layer.cross_v.is_contiguous()
    assert layer.self_k.dtype == layer.self_v.dtype == torch.float32
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=0.05, rtol=0.02)
    assert not torch.allclose(got, expected, atol=1e-5, rtol=1e-5)
    cache.reorder(torch.tensor([1]))  # sentence 0 leaves
    model.decode(torch.tensor([[9]]), None, cache.src_pad_mask, cache)
    assert cache.layers[0].cross_k.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.no_grad()
def test_cached_decoding_writes_attention_out_on_the_cpu_in_float32_only(monkeypatch, dtype):
    """float32 on the CPU takes `decoding_attention`; bfloat16 keeps the fused kernel, whose
    scores and softmax stay in float32."""
    calls = []
    written = attention.decoding_attention
    monkeypatch.setattr(attention, "decoding_attention", lambda *a: calls.append(1) or written(*a))
    model = fast.apply(Transformer(tiny_model_config()).eval().to(dtype))
    src = torch.tensor([[5, 6, 7, 3]])
    src_pad = model.pad_mask(src)
    cache = SharedKVCache(len(model.decoder), src_pad)
    model.decode(torch.tensor([[2]]), model.encode(src, src_pad), src_pad, cache)
    n_layers = len(cache.layers)
    assert len(calls) == (2 * n_layers if dtype == torch.float32 else 0)


