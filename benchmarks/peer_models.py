"""The same network in other libraries: an aiayn `Transformer`'s weights exported to a
CTranslate2 model directory and loaded into a HuggingFace `MarianMTModel`.

Used by `translate_speed.py`, so that the libraries are timed on one network. Which spec
attribute takes which tensor follows CTranslate2's own converters (`converters/fairseq.py`
and `opennmt_py.py`: post-LN layer norms after each sub-layer; fused self-attention
[q; k; v]; encoder-decoder attention `linear[0]` = queries, `linear[1]` = fused [k; v]).
Both peers get aiayn's interleaved sinusoid table (sec. 3.5) in place of their own
(CTranslate2's default and Marian's are concatenated sin | cos halves) and aiayn's
LayerNorm epsilon. aiayn's attention projections have no biases by default (as in the
paper): CTranslate2 gets none there (its biases are optional), MarianMT zeros.
"""

from __future__ import annotations

from pathlib import Path

import torch

from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from aiayn.model.layers import sinusoid_table
from aiayn.model.transformer import Transformer

SPECIALS = {PAD_ID: "<blank>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}


def token_strings(vocab: int) -> list[str]:
    """Made-up token strings for ids 0 .. vocab - 1, the special ones at aiayn's ids."""
    return [SPECIALS.get(i, f"t{i}") for i in range(vocab)]


def _np(tensor: torch.Tensor):
    # A copy: `spec.optimize(quantization="int8")` rewrites the arrays in place, which
    # would otherwise quantize the aiayn model's own weights.
    return tensor.detach().float().cpu().numpy().copy()


def _check_exportable(model: Transformer) -> None:
    c = model.config
    ok = c.norm == "post" and c.positional == "sinusoidal" and c.tie_embeddings
    ok = ok and c.src_vocab_size is None and c.key_dim == c.value_dim == c.d_model // c.n_heads
    if not ok:
        raise ValueError(
            "export covers post-LN, sinusoidal, tied, shared-vocabulary models with "
            "d_k = d_v = d_model / h"
        )


# --- CTranslate2 ------------------------------------------------------------------------
def _bias(linear: torch.nn.Linear) -> torch.Tensor:
    """The bias, zeros where aiayn has none (its attention, by default, as in the paper)."""
    return linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)


def _ct2_linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = _np(linear.weight)  # (out, in)
    if linear.bias is not None:  # CTranslate2's bias is optional: none where aiayn has none
        spec.bias = _np(linear.bias)  # (out,)


def _ct2_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _ct2_inputs(spec, model: Transformer, n_positions: int) -> None:
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _np(model.tgt_embed.weight)
    spec.scale_embeddings = True  # x sqrt(d_model), sec. 3.4
    spec.position_encodings.encodings = _np(sinusoid_table(n_positions, model.config.d_model))


def ct2_spec(model: Transformer, n_positions: int = 1024):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights (tokens: see
    `token_strings`; decoding starts from bos, as aiayn's does)."""
    from ctranslate2.specs import common_spec, transformer_spec

    _check_exportable(model)
    c = model.config
    spec = transformer_spec.TransformerSpec.from_config(
        c.n_layers, c.n_heads, pre_norm=False, activation=common_spec.Activation.RELU
    )
    encoder, decoder = spec.encoder, spec.decoder
    _ct2_inputs(encoder, model, n_positions)
    _ct2_inputs(decoder, model, n_positions)
    decoder.projection.weight = _np(model.tgt_embed.weight)  # tied (sec. 3.4), no bias
    for ours, theirs in zip(model.encoder, encoder.layer):
        _ct2_linear(theirs.self_attention.linear[0], ours.self_attn.w_qkv)  # [q; k; v]
        _ct2_linear(theirs.self_attention.linear[1], ours.self_attn.w_o)
        _ct2_norm(theirs.self_attention.layer_norm, ours.res_attn.norm)
        _ct2_ffn(theirs.ffn, ours.ffn, ours.res_ffn.norm)
    for ours, theirs in zip(model.decoder, decoder.layer):
        _ct2_linear(theirs.self_attention.linear[0], ours.self_attn.w_qkv)
        _ct2_linear(theirs.self_attention.linear[1], ours.self_attn.w_o)
        _ct2_norm(theirs.self_attention.layer_norm, ours.res_self.norm)
        _ct2_linear(theirs.attention.linear[0], ours.cross_attn.w_q)
        _ct2_linear(theirs.attention.linear[1], ours.cross_attn.w_kv)  # [k; v]
        _ct2_linear(theirs.attention.linear[2], ours.cross_attn.w_o)
        _ct2_norm(theirs.attention.layer_norm, ours.res_cross.norm)
        _ct2_ffn(theirs.ffn, ours.ffn, ours.res_ffn.norm)
    spec.config.layer_norm_epsilon = c.ln_eps
    spec.config.decoder_start_token = SPECIALS[BOS_ID]
    tokens = token_strings(c.vocab_size)
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    return spec


def _ct2_ffn(spec, ffn, norm: torch.nn.LayerNorm) -> None:
    _ct2_linear(spec.linear_0, ffn.w_1)
    _ct2_linear(spec.linear_1, ffn.w_2)
    _ct2_norm(spec.layer_norm, norm)  # post-LN: after the feed-forward sub-layer


def save_ct2(model: Transformer, out_dir: str | Path, quantization: str | None) -> str:
    """Write `model` as a CTranslate2 directory, weights stored as `quantization`
    ("int8", or None for float32); what `ctranslate2.converters.Converter.convert` does."""
    spec = ct2_spec(model)
    spec.validate()
    spec.optimize(quantization=quantization)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return str(out_dir)


# --- HuggingFace MarianMT ---------------------------------------------------------------
def _hf_linear(linear: torch.nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    linear.weight.copy_(weight)
    linear.bias.copy_(bias)


def _hf_attention(theirs, w_q, w_k, w_v, w_o) -> None:
    """Each argument a (weight, bias) pair of aiayn's rows for that projection."""
    for linear, (weight, bias) in zip(
        (theirs.q_proj, theirs.k_proj, theirs.v_proj, theirs.out_proj), (w_q, w_k, w_v, w_o)
    ):
        _hf_linear(linear, weight, bias)


def _rows(linear: torch.nn.Linear, parts: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fused projection's weight and bias split into `parts` equal row blocks."""
    return list(zip(linear.weight.chunk(parts), _bias(linear).chunk(parts)))


def _pair(linear: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    return linear.weight, _bias(linear)


def _hf_ffn_and_norms(theirs, ours, norms: dict[str, torch.nn.LayerNorm]) -> None:
    _hf_linear(theirs.fc1, *_pair(ours.ffn.w_1))
    _hf_linear(theirs.fc2, *_pair(ours.ffn.w_2))
    for name, norm in norms.items():
        getattr(theirs, name).weight.copy_(norm.weight)
        getattr(theirs, name).bias.copy_(norm.bias)


@torch.no_grad()
def marian_from(model: Transformer, n_positions: int = 512):
    """A `MarianMTModel` (post-LN, ReLU, scaled tied embeddings) with `model`'s weights."""
    from transformers import MarianConfig, MarianMTModel

    _check_exportable(model)
    c = model.config
    config = MarianConfig(
        vocab_size=c.vocab_size, d_model=c.d_model, encoder_layers=c.n_layers,
        decoder_layers=c.n_layers, encoder_attention_heads=c.n_heads,
        decoder_attention_heads=c.n_heads, encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff,
        activation_function="relu", max_position_embeddings=n_positions, scale_embedding=True,
        pad_token_id=PAD_ID, eos_token_id=EOS_ID, decoder_start_token_id=BOS_ID,
        forced_eos_token_id=None, dropout=0.0,
    )  # fmt: skip
    hf = MarianMTModel(config).eval()
    for embedding in (hf.model.shared, hf.model.encoder.embed_tokens,
                      hf.model.decoder.embed_tokens, hf.lm_head):  # fmt: skip
        embedding.weight.copy_(model.tgt_embed.weight)  # tied, as in aiayn
    table = sinusoid_table(n_positions, c.d_model)
    for stack in (hf.model.encoder, hf.model.decoder):
        stack.embed_positions.weight.copy_(table)
    for ours, theirs in zip(model.encoder, hf.model.encoder.layers):
        _hf_attention(theirs.self_attn, *_rows(ours.self_attn.w_qkv, 3), _pair(ours.self_attn.w_o))
        norms = {"self_attn_layer_norm": ours.res_attn.norm, "final_layer_norm": ours.res_ffn.norm}
        _hf_ffn_and_norms(theirs, ours, norms)
    for ours, theirs in zip(model.decoder, hf.model.decoder.layers):
        _hf_attention(theirs.self_attn, *_rows(ours.self_attn.w_qkv, 3), _pair(ours.self_attn.w_o))
        cross = ours.cross_attn  # w_kv rows: [k; v]
        kv = _rows(cross.w_kv, 2)
        _hf_attention(theirs.encoder_attn, _pair(cross.w_q), *kv, _pair(cross.w_o))
        norms = {"self_attn_layer_norm": ours.res_self.norm,
                 "encoder_attn_layer_norm": ours.res_cross.norm,
                 "final_layer_norm": ours.res_ffn.norm}  # fmt: skip
        _hf_ffn_and_norms(theirs, ours, norms)
    for module in hf.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = c.ln_eps  # Marian's nn.LayerNorm default is 1e-5
    return hf
