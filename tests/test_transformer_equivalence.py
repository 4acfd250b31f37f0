"""Acceptance: aiayn's encoder and decoder equal PyTorch's own layer stacks, weight for weight.

PyTorch's `nn.Transformer` appends a final LayerNorm even in post-LN mode, which the paper
does not have, so we compare against stacks of `nn.TransformerEncoderLayer` /
`nn.TransformerDecoderLayer` (plus a final LayerNorm for pre-LN, where one is right).
"""

import math

import pytest
import torch
from torch import nn

from aiayn.model.transformer import Transformer
from conftest import tiny_model_config


def _bias(linear: nn.Linear) -> torch.Tensor:
    # The paper's attention projections have no biases (our default); PyTorch's always do.
    return linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)


def _copy_self_attention(peer: nn.MultiheadAttention, ours) -> None:
    # nn.MultiheadAttention stacks [W_q; W_k; W_v] exactly as our fused projection does.
    peer.in_proj_weight.copy_(ours.w_qkv.weight)
    peer.in_proj_bias.copy_(_bias(ours.w_qkv))
    peer.out_proj.weight.copy_(ours.w_o.weight)
    peer.out_proj.bias.copy_(_bias(ours.w_o))


def _copy_cross_attention(peer: nn.MultiheadAttention, ours) -> None:
    peer.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_kv.weight]))
    peer.in_proj_bias.copy_(torch.cat([_bias(ours.w_q), _bias(ours.w_kv)]))
    peer.out_proj.weight.copy_(ours.w_o.weight)
    peer.out_proj.bias.copy_(_bias(ours.w_o))


def _copy_ffn_and_norms(peer, ours, norms) -> None:
    peer.linear1.load_state_dict(ours.ffn.w_1.state_dict())
    peer.linear2.load_state_dict(ours.ffn.w_2.state_dict())
    for peer_norm, our_residual in zip(norms, ours_residuals(ours)):
        peer_norm.load_state_dict(our_residual.norm.state_dict())


def ours_residuals(layer):
    names = ("res_attn", "res_ffn") if hasattr(layer, "res_attn") else ("res_self", "res_cross", "res_ffn")
    return [getattr(layer, n) for n in names]


@torch.no_grad()
def _peer_stacks(model: Transformer):
    c = model.config
    kwargs = dict(
        d_model=c.d_model, nhead=c.n_heads, dim_feedforward=c.d_ff, dropout=0.0,
        batch_first=True, layer_norm_eps=c.ln_eps, norm_first=c.norm == "pre", dtype=torch.float64,
    )  # fmt: skip
    encoder = [nn.TransformerEncoderLayer(**kwargs) for _ in range(c.n_layers)]
    decoder = [nn.TransformerDecoderLayer(**kwargs) for _ in range(c.n_layers)]
    for peer, ours in zip(encoder, model.encoder):
        _copy_self_attention(peer.self_attn, ours.self_attn)
        _copy_ffn_and_norms(peer, ours, [peer.norm1, peer.norm2])
    for peer, ours in zip(decoder, model.decoder):
        _copy_self_attention(peer.self_attn, ours.self_attn)
        _copy_cross_attention(peer.multihead_attn, ours.cross_attn)
        _copy_ffn_and_norms(peer, ours, [peer.norm1, peer.norm2, peer.norm3])
    return [m.eval() for m in encoder], [m.eval() for m in decoder]


def _paper_inputs(tokens, weight, d_model):
    """Embedding * sqrt(d_model) + sinusoids, written out from sec. 3.4-3.5 independently."""
    pos = torch.arange(tokens.size(1), dtype=torch.float64)[:, None]
    i = torch.arange(d_model, dtype=torch.float64)[None, :]
    angle = pos / 10000 ** ((i - i % 2) / d_model)
    pe = torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))
    return weight[tokens] * math.sqrt(d_model) + pe


@pytest.mark.parametrize(("norm", "attention_bias"), [("post", False), ("pre", False), ("post", True)])
@torch.no_grad()
def test_matches_pytorch_layer_stacks_with_padding(norm, attention_bias):
    config = tiny_model_config(norm=norm, n_layers=3, attention_bias=attention_bias)
    model = Transformer(config).double().eval()
    for p in model.parameters():  # non-trivial LayerNorm and bias values too
        p.add_(0.1 * torch.randn_like(p))
    encoder, decoder = _peer_stacks(model)

    src = torch.tensor([[5, 6, 7, 8, 9, 3], [4, 10, 3, 0, 0, 0]])  # second row padded
    tgt = torch.tensor([[2, 11, 12, 13, 14], [2, 15, 16, 0, 0]])
    src_pad, tgt_len = src.eq(0), tgt.size(1)

    x = _paper_inputs(src, model.src_embed.weight, config.d_model)
    for layer in encoder:
        x = layer(x, src_key_padding_mask=src_pad)
    if norm == "pre":
        x = nn.functional.layer_norm(x, (config.d_model,), model.encoder_norm.weight, model.encoder_norm.bias, config.ln_eps)
    memory = model.encode(src)
    real_src = ~src_pad
    torch.testing.assert_close(memory[real_src], x[real_src], atol=1e-10, rtol=1e-10)

    y = _paper_inputs(tgt, model.tgt_embed.weight, config.d_model)
    causal = nn.Transformer.generate_square_subsequent_mask(tgt_len, dtype=torch.float64)
    for layer in decoder:
        y = layer(y, x, tgt_mask=causal, memory_key_padding_mask=src_pad)
    if norm == "pre":
        y = nn.functional.layer_norm(y, (config.d_model,), model.decoder_norm.weight, model.decoder_norm.bias, config.ln_eps)
    peer_logits = y @ model.tgt_embed.weight.t()
    real_tgt = tgt.ne(0)
    torch.testing.assert_close(model(src, tgt)[real_tgt], peer_logits[real_tgt], atol=1e-10, rtol=1e-10)
