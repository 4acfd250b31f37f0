import pytest
import torch

import torch.nn.functional as F

from aiayn.model.attention import MultiHeadAttention, attend_mask, attention_weights
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config


def test_eq1_by_hand_with_padding():
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), torch.randn(2, 3, 6, 7)
    pad = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    mask = attend_mask(pad, causal=False, q_len=4, k_len=6, device=q.device)
    scores = q @ k.transpose(-1, -2) / 5**0.5
    scores[1, :, :, 4:] = float("-inf")
    expected = scores.softmax(-1) @ v
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), expected)
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
def test_cache_follows_widening_reorders_multi_token_steps_and_leaving_sentences():
    """Against decoding each chosen prefix from scratch: the beam widening after two
    positions, a reorder among the rows, two positions fed at once, three rows per sentence,
    and a sentence leaving (its rows dropped). Every stored tensor has one row per
    hypothesis, the encoder-decoder keys and the source mask included."""
    model = Transformer(tiny_model_config()).eval()
    src = torch.tensor([[5, 6, 7, 3], [9, 10, 3, 0]])
    src_pad = model.pad_mask(src)
    memory = model.encode(src, src_pad)
    cache = model.new_cache(src_pad)

    def check(tokens, prefixes, sentence):
        step = model.decode(torch.tensor(tokens), None, cache.src_pad_mask, cache)
        new = len(tokens[0])
        ref = model.decode(torch.tensor(prefixes), memory[sentence], src_pad[sentence])
        torch.testing.assert_close(step, ref[:, -new:], atol=1e-5, rtol=1e-5)
        assert cache.layers[0].cross_k.size(0) == len(tokens) == cache.src_pad_mask.size(0)

    model.decode(torch.tensor([[2], [2]]), memory, src_pad, cache)
    check([[4], [5]], [[2, 4], [2, 5]], [0, 1])
    cache.reorder(torch.tensor([0, 0, 1, 1]))  # the beam widens to 2 rows per sentence
    check([[6], [7], [8], [9]], [[2, 4, 6], [2, 4, 7], [2, 5, 8], [2, 5, 9]], [0, 0, 1, 1])
    cache.reorder(torch.tensor([1, 0, 3, 3]))
    prefixes = [[2, 4, 7, 10, 11], [2, 4, 6, 12, 13], [2, 5, 9, 14, 15], [2, 5, 9, 16, 17]]
    check([[10, 11], [12, 13], [14, 15], [16, 17]], prefixes, [0, 0, 1, 1])
    cache.reorder(torch.tensor([1, 0, 1, 3, 2, 3]))  # 3 rows per sentence
    p = prefixes
    tokens = [[18], [19], [20], [21], [22], [4]]
    prefixes = [p[1] + [18], p[0] + [19], p[1] + [20], p[3] + [21], p[2] + [22], p[3] + [4]]
    check(tokens, prefixes, [0, 0, 0, 1, 1, 1])
    cache.reorder(torch.tensor([4, 3]))  # sentence 0 is done, sentence 1 keeps 2 rows
    check([[5], [6]], [prefixes[4] + [5], prefixes[3] + [6]], [1, 1])
    assert cache.src_pad_mask.tolist() == src_pad[[1, 1]].tolist()
    assert cache.length == 7  # bos, then 1 + 1 + 2 + 1 + 1 positions


@torch.no_grad()
def test_a_windowed_cache_keeps_only_the_positions_a_later_query_can_see():
    """Restricted self-attention (sec. 4) with window 2: each layer stores the last 2
    positions, and decoding step by step equals decoding the whole prefix."""
    model = Transformer(tiny_model_config(attention_window=2)).eval()
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 4, 5, 6, 7, 8, 9]])
    src_pad = model.pad_mask(src)
    memory = model.encode(src, src_pad)
    full = model.decode(tgt, memory, src_pad)  # (1, 7, d_model)
    cache = model.new_cache(src_pad)
    steps = [model.decode(tgt[:, :3], memory, src_pad, cache)]  # three at once, then one by one
    steps += [model.decode(tgt[:, t : t + 1], memory, src_pad, cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.layers[0].self_k.size(2) == 2


def test_attention_dropout_applies_in_training_only():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, 4, 4, p_drop_attn=0.5, cross=False)
    plain = MultiHeadAttention(16, 4, 4, 4, p_drop_attn=0.0, cross=False)
    plain.load_state_dict(attn.state_dict())
    x = torch.randn(3, 7, 16)
    attn.eval()
    torch.testing.assert_close(attn(x, causal=True), plain.eval()(x, causal=True))
    attn.train()
    assert not torch.allclose(attn(x, causal=True), plain(x, causal=True))
