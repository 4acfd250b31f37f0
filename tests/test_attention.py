import pytest
import torch

from aiayn.model.attention import (
    LayerCache,
    MultiHeadAttention,
    attend_mask,
    attention_weights,
    scaled_dot_product_attention,
)
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config


def test_eq1_by_hand_with_padding():
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), torch.randn(2, 3, 6, 7)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    mask = attend_mask(pad, causal=False, q_len=4, k_len=6, device=q.device)
    scores = q @ k.transpose(-1, -2) / 5**0.5
    scores[1, :, :, 4:] = float("-inf")
    expected = scores.softmax(-1) @ v
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask), expected)
    weights = attention_weights(q, k, mask)
    assert weights[1, :, :, 4:].abs().max() == 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4))


def test_causal_mask_with_cached_prefix_aligns_to_the_last_queries():
    mask = attend_mask(None, causal=True, q_len=2, k_len=5, device=torch.device("cpu"))
    # the two queries are positions 3 and 4 of 5: they see keys <= 3 and <= 4
    assert mask.tolist() == [[True, True, True, True, False], [True] * 5]
    assert attend_mask(None, causal=True, q_len=1, k_len=5, device=torch.device("cpu")) is None


def test_head_dims_are_independent_of_d_model():
    attn = MultiHeadAttention(d_model=16, n_heads=2, d_k=3, d_v=5, p_drop_attn=0.0, cross=False)
    assert attn.w_qkv.out_features == 2 * (3 + 3 + 5) and attn.w_o.in_features == 10
    assert attn(torch.randn(4, 7, 16)).shape == (4, 7, 16)


@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_cached_decoding_equals_recomputing_the_prefix(norm):
    model = Transformer(tiny_model_config(norm=norm)).eval()
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    tgt = torch.randint(4, 23, (2, 7))
    src_pad = model.pad_mask(src)
    memory = model.encode(src, src_pad)
    full = model.project(model.decode(tgt, memory, src_pad))  # (batch, tgt_len, vocab)
    cache = model.new_cache(src_pad)
    for t in range(tgt.size(1)):
        step = model.project(model.decode(tgt[:, t : t + 1], memory, src_pad, cache))
        torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-5, rtol=1e-5)
    assert cache.length == tgt.size(1)


@torch.no_grad()
def test_cache_reorder_selects_hypotheses():
    model = Transformer(tiny_model_config()).eval()
    src = torch.tensor([[5, 6, 7, 3], [9, 10, 3, 0]])
    src_pad = model.pad_mask(src)
    memory = model.encode(src, src_pad)
    cache = model.new_cache(src_pad)
    model.decode(torch.tensor([[2], [2]]), memory, src_pad, cache)
    cache.reorder(torch.tensor([1, 1, 0]))
    nxt = torch.tensor([[11], [12], [13]])
    step = model.decode(nxt, None, cache.src_pad_mask, cache)  # memory comes from the cache
    ref = model.decode(
        torch.tensor([[2, 11], [2, 12], [2, 13]]), memory[[1, 1, 0]], src_pad[[1, 1, 0]]
    )
    torch.testing.assert_close(step[:, 0], ref[:, 1], atol=1e-5, rtol=1e-5)


def test_reorders_before_an_extend_compose_and_move_the_history_once():
    """A pending reorder is applied by the next `extend`: two in a row act as one."""
    layer = LayerCache()
    history = torch.arange(4.0).view(4, 1, 1, 1)  # (batch, heads, 1, d): row i holds i
    layer.extend(history, history)
    layer.reorder(torch.tensor([3, 3, 1, 0]))
    layer.reorder(torch.tensor([2, 0, 1]))  # -> original rows [1, 3, 3]
    new = torch.full((3, 1, 1, 1), 9.0)
    k, v = layer.extend(new, new)
    assert k[:, 0, :, 0].tolist() == [[1.0, 9.0], [3.0, 9.0], [3.0, 9.0]] and torch.equal(k, v)
    assert layer.rows is None
