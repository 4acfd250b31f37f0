"""`aiayn export --to huggingface`: a checkpoint as a `MarianMTModel` directory, with its
config, generation config and tokenizer files, so that
`transformers.pipeline("translation", model=OUT)` translates.

Marian's layer is the paper's post-LN layer (sec. 3.1) with the model's activation (eq. 2's
ReLU, or `model.activation`), scaled tied embeddings (sec. 3.4), an optional bias on the
logits (`model.output_bias`) and fixed sinusoids (sec. 3.5), but two details differ:
- Its sinusoids are concatenated halves, [sin | cos], where the paper interleaves them
  (sin on even channels, cos on odd), and it recomputes them when it loads, so aiayn's
  table cannot be stored. The export permutes the model's channels instead: Marian's
  channel j is aiayn's channel `PERM[j]` (evens, then odds) in every embedding, every
  linear map that reads or writes the residual stream and every LayerNorm. A network is
  the same function under such a relabelling, and the relabelled sinusoids are Marian's.
- Its LayerNorms are built with PyTorch's default epsilon, 1e-5, and its config has no
  field for another; aiayn's is 1e-6 (tensor2tensor's). This cannot be removed: it moves
  log-probabilities by 1e-5 to 2.4e-5 on the models measured (the tests hold it under 1e-4
  and check that with aiayn's epsilon the two agree within 3e-6).
Marian's attention projections always have biases: zeros where aiayn has none (the paper's
W^Q, W^K, W^V, W^O, sec. 3.2.2). Pre-LN models, learned positions (Table 3 row E), heads
of another width than d_model / h and separate source and target vocabularies are refused:
Marian cannot represent them (CTranslate2 can: `aiayn export --to ctranslate2`); neither
can restricted self-attention (`model.attention_window`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

from aiayn.checkpoint import Checkpoint, load_checkpoint
from aiayn.export.common import (
    PENALTY, channel_order, n_positions, pieces, refuse_unrepresentable, restricted_attention,
    write_marker, written_atomically,
)  # fmt: skip
from aiayn.model.transformer import Transformer

TARGET = "HuggingFace MarianMT"
README = """\
# A MarianMT model exported by `aiayn export`

Translate with `transformers` (pip install 'transformers<5' sentencepiece sacremoses;
transformers 5 removed the "translation" pipeline: there, call `model.generate`):

```python
from transformers import pipeline

translate = pipeline("translation", model="{out}")
print([t["translation_text"] for t in translate(["The children open the door."])])
```

The network is the aiayn checkpoint's, its channels permuted so that Marian's [sin | cos]
positional halves are the paper's interleaved sinusoids. Marian's LayerNorm epsilon is
1e-5, the checkpoint's {eps:g}{eps_note}. generation_config.json holds the checkpoint's beam
({beam}) and alpha ({alpha}); Marian's length penalty divides by length ** alpha, {penalty};
greedy decoding (num_beams=1) picks the same tokens.
"""


def unrepresentable(model: Transformer) -> list[str]:
    """What a `MarianMTModel` cannot hold, one phrase each (empty: exportable)."""
    c = model.config
    problems = restricted_attention(c)
    if c.norm == "pre":
        problems.append("MarianMT is post-LN only (model.norm=pre has no Marian layout)")
    if c.positional == "learned":
        problems.append("MarianMT recomputes fixed sinusoids when it loads, so learned "
                        "positions (model.positional=learned, Table 3 row E) are lost")  # fmt: skip
    if c.key_dim != c.d_model // c.n_heads or c.value_dim != c.d_model // c.n_heads:
        problems.append(f"MarianMT's heads are d_model / h = {c.d_model // c.n_heads} wide, "
                        f"this model's d_k={c.key_dim}, d_v={c.value_dim}")  # fmt: skip
    if not c.shared_vocab:
        problems.append("this export writes one vocabulary shared by source and target "
                        "(model.src_vocab_size is set)")  # fmt: skip
    return problems


def marian_config(ckpt: Checkpoint) -> MarianConfig:
    c = ckpt.config.model
    return MarianConfig(
        vocab_size=c.vocab_size, d_model=c.d_model, encoder_layers=c.n_layers,
        decoder_layers=c.n_layers, encoder_attention_heads=c.n_heads,
        decoder_attention_heads=c.n_heads, encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff,
        activation_function=c.activation, max_position_embeddings=n_positions(ckpt.config),
        scale_embedding=True, pad_token_id=c.pad_id, eos_token_id=c.eos_id,
        bos_token_id=c.bos_id, decoder_start_token_id=c.bos_id, forced_eos_token_id=None,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=c.tie_embeddings,
    )  # fmt: skip


@torch.no_grad()
def marian_model(ckpt: Checkpoint) -> MarianMTModel:
    """A `MarianMTModel` computing the checkpoint's function, its channels permuted."""
    model = ckpt.model
    refuse_unrepresentable(TARGET, unrepresentable(model))
    hf = MarianMTModel(marian_config(ckpt)).eval()
    perm = channel_order(model.config.d_model)
    hf.model.shared.weight.copy_(model.tgt_embed.weight[:, perm])  # (vocab, d_model)
    hf.lm_head.weight.copy_(model.output_weight[:, perm])  # the same matrix where tied
    if model.output_bias is not None:  # (1, vocab), a buffer of zeros otherwise
        hf.final_logits_bias.copy_(model.output_bias[None])
    for ours, theirs in zip(model.encoder, hf.model.encoder.layers):
        _attention(theirs.self_attn, ours.self_attn.w_qkv.weight.chunk(3),
                   _biases(ours.self_attn.w_qkv, 3), ours.self_attn.w_o, perm)  # fmt: skip
        _ffn(theirs, ours.ffn, perm)
        _norm(theirs.self_attn_layer_norm, ours.res_attn.norm, perm)
        _norm(theirs.final_layer_norm, ours.res_ffn.norm, perm)
    for ours, theirs in zip(model.decoder, hf.model.decoder.layers):
        _attention(theirs.self_attn, ours.self_attn.w_qkv.weight.chunk(3),
                   _biases(ours.self_attn.w_qkv, 3), ours.self_attn.w_o, perm)  # fmt: skip
        cross = ours.cross_attn  # w_kv rows: [k; v]
        weights = (cross.w_q.weight, *cross.w_kv.weight.chunk(2))
        biases = (*_biases(cross.w_q, 1), *_biases(cross.w_kv, 2))
        _attention(theirs.encoder_attn, weights, biases, cross.w_o, perm)
        _ffn(theirs, ours.ffn, perm)
        _norm(theirs.self_attn_layer_norm, ours.res_self.norm, perm)
        _norm(theirs.encoder_attn_layer_norm, ours.res_cross.norm, perm)
        _norm(theirs.final_layer_norm, ours.res_ffn.norm, perm)
    return hf


def _biases(linear: torch.nn.Linear, parts: int) -> tuple[torch.Tensor | None, ...]:
    """A fused projection's bias split into `parts` row blocks (None each without a bias)."""
    return (None,) * parts if linear.bias is None else linear.bias.chunk(parts)


def _attention(theirs, weights, biases, w_o: torch.nn.Linear, perm: torch.Tensor) -> None:
    """q, k, v read the residual stream (input columns permuted); out_proj writes it."""
    for linear, weight, bias in zip((theirs.q_proj, theirs.k_proj, theirs.v_proj), weights, biases):
        linear.weight.copy_(weight[:, perm])  # (d_k * h, d_model)
        _bias(linear, bias)
    theirs.out_proj.weight.copy_(w_o.weight[perm])  # (d_model, d_v * h)
    _bias(theirs.out_proj, None if w_o.bias is None else w_o.bias[perm])


def _ffn(theirs, ffn, perm: torch.Tensor) -> None:
    theirs.fc1.weight.copy_(ffn.w_1.weight[:, perm])  # (d_ff, d_model)
    theirs.fc1.bias.copy_(ffn.w_1.bias)
    theirs.fc2.weight.copy_(ffn.w_2.weight[perm])  # (d_model, d_ff)
    theirs.fc2.bias.copy_(ffn.w_2.bias[perm])


def _bias(linear: torch.nn.Linear, bias: torch.Tensor | None) -> None:
    """Marian's projections always have a bias: zeros where aiayn's has none."""
    if bias is None:
        linear.bias.zero_()
    else:
        linear.bias.copy_(bias)


def _norm(theirs: torch.nn.LayerNorm, ours: torch.nn.LayerNorm, perm: torch.Tensor) -> None:
    theirs.weight.copy_(ours.weight[perm])
    theirs.bias.copy_(ours.bias[perm])


def generation_config(ckpt: Checkpoint) -> GenerationConfig:
    """The checkpoint's decoding (sec. 6.1): beam, alpha, at least `min_len` tokens before
    eos. HF's length penalty divides by length ** alpha, not by ((5 + length) / 6) ** alpha,
    and its length limit is one for the batch, not input + 50 per sentence."""
    d, c = ckpt.config.decode, ckpt.config.model
    return GenerationConfig(
        num_beams=d.beam, length_penalty=d.alpha, min_new_tokens=d.min_len,
        max_length=n_positions(ckpt.config), decoder_start_token_id=c.bos_id,
        bos_token_id=c.bos_id, eos_token_id=c.eos_id, pad_token_id=c.pad_id,
        bad_words_ids=[[i] for i in sorted({c.pad_id, c.bos_id})],  # never generated in aiayn
    )  # fmt: skip


def save_tokenizer(ckpt: Checkpoint, out: Path) -> None:
    """MarianTokenizer's files: vocab.json mapping each piece to its id, and the source and
    target sentencepiece models (aiayn's one model twice; an imported model's own two)."""
    src, tgt, c = ckpt.src_vocab, ckpt.tgt_vocab, ckpt.config.model
    names = pieces(tgt)
    vocab = {piece: i for i, piece in enumerate(names)}
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    for name, side in (("source.spm", src), ("target.spm", tgt)):
        (out / name).write_bytes(side.spm_bytes)
    bos = {} if c.bos_id == c.pad_id else {"bos_token": names[c.bos_id]}  # MarianMT: <pad>
    tokenizer = MarianTokenizer(
        str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"),
        unk_token=names[tgt.unk_id], eos_token=names[c.eos_id], pad_token=names[c.pad_id],
        model_max_length=c.max_len, **bos,
    )  # fmt: skip
    tokenizer.save_pretrained(str(out))


def export_huggingface(checkpoint: str | Path, out: str | Path, force: bool = False) -> Path:
    """Write checkpoint directory `checkpoint` as a MarianMT model directory `out`."""
    ckpt = load_checkpoint(checkpoint)
    refuse_unrepresentable(TARGET, unrepresentable(ckpt.model))
    hf = marian_model(ckpt)
    hf.generation_config = generation_config(ckpt)
    with written_atomically(out, force) as tmp:
        hf.save_pretrained(str(tmp))
        save_tokenizer(ckpt, tmp)
        d = ckpt.config.decode
        eps = ckpt.config.model.ln_eps
        eps_note = ": log-probabilities differ by about 1e-5" if eps != 1e-5 else ""
        text = README.format(out=Path(out), eps=eps, eps_note=eps_note, beam=d.beam,
                             alpha=d.alpha, penalty=PENALTY[d.length_penalty])  # fmt: skip
        (tmp / "README.md").write_text(text, "utf-8")
        write_marker(tmp, "huggingface", ckpt)
    return Path(out)
