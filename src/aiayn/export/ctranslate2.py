"""`aiayn export --to ctranslate2`: a checkpoint as a CTranslate2 model directory.

`AiaynConverter` is a `ctranslate2.converters.Converter`, as CTranslate2's own fairseq and
OpenNMT converters are: it builds a `TransformerSpec` and CTranslate2's `convert` validates,
quantizes and saves it. Which spec attribute takes which weight follows those converters:
the layer norm of each sub-layer sits in that sub-layer's spec (after it for the paper's
post-LN, before it for pre-LN, with a final norm per stack); self-attention's first linear
map is the fused [q; k; v] (aiayn's `w_qkv`), encoder-decoder attention's are queries and
the fused [k; v] (`w_q`, `w_kv`). Biases only where the model has them (the paper's
attention and output projection have none, sec. 3.2.2, 3.4); the feed-forward activation is
the model's (eq. 2's ReLU, or swish or gelu: `model.activation`). The model's own position
table (sec. 3.5's interleaved sinusoids, or Table 3 row E's learned ones) is written into
the spec, as CTranslate2's default is concatenated sin | cos halves. Embeddings are scaled
by sqrt(d_model) (sec. 3.4) and, where tied, the projection is the same matrix (stored
once). Sources get eos appended by CTranslate2 (`add_source_eos`) and decoding starts from
`model.bos_id`, as in aiayn.
"""

from __future__ import annotations

from pathlib import Path

import torch
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec, transformer_spec
from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

from aiayn.checkpoint import Checkpoint, load_checkpoint, vocab_files
from aiayn.errors import ExportError
from aiayn.export.common import (
    PENALTY, array, n_positions, pieces, refuse_unrepresentable, restricted_attention,
    write_marker, written_atomically,
)  # fmt: skip
from aiayn.model.layers import sinusoid_table
from aiayn.model.transformer import Transformer

TARGET = "CTranslate2"
ACTIVATIONS = {"relu": common_spec.Activation.RELU, "swish": common_spec.Activation.SWISH,
               "gelu": common_spec.Activation.GELU}  # `model.activation`  # fmt: skip
README = """\
# A CTranslate2 model exported by `aiayn export`

Translate with `ctranslate2` and `sentencepiece` (pip install ctranslate2 sentencepiece):

```python
import ctranslate2, sentencepiece

source = sentencepiece.SentencePieceProcessor(model_file="{out}/{src_spm}")
target = sentencepiece.SentencePieceProcessor(model_file="{out}/{tgt_spm}")
translator = ctranslate2.Translator("{out}", device="cpu")  # compute_type="int8" for speed
sources = [source.encode(text, out_type=str) for text in ["The children open the door."]]
results = translator.translate_batch(sources, beam_size={beam}, min_decoding_length={min_len},
                                     max_decoding_length=256, suppress_sequences={suppress})
print([target.decode(r.hypotheses[0]) for r in results])
```

CTranslate2 appends the source eos itself (`add_source_eos` in config.json) and starts
decoding from `{start}`, as aiayn does; `suppress_sequences` keeps it from producing the
padding and start tokens, as aiayn never does. Its length penalty divides by
length ** alpha, {penalty}; greedy decoding (beam_size=1) picks the same tokens.
"""


def unrepresentable(model: Transformer) -> list[str]:
    """What CTranslate2's `TransformerSpec` cannot hold: empty for every Table 3 row but B
    with d_k != d_v (CTranslate2 has one head dimension for queries, keys and values), and
    restricted self-attention."""
    c = model.config
    problems = restricted_attention(c)
    if c.key_dim != c.value_dim:
        problems.append(f"its heads have one dimension for keys and values, this model "
                        f"d_k={c.key_dim}, d_v={c.value_dim}")  # fmt: skip
    return problems


class AiaynConverter(Converter):
    """CTranslate2's converter for a loaded aiayn checkpoint (`Converter.convert(out, ...)`)."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint

    def _load(self) -> transformer_spec.TransformerSpec:
        return model_spec(self.checkpoint)


def model_spec(ckpt: Checkpoint) -> transformer_spec.TransformerSpec:
    """A `TransformerSpec` holding the checkpoint's weights and vocabularies."""
    model, c = ckpt.model, ckpt.config.model
    refuse_unrepresentable(TARGET, unrepresentable(model))
    pre_norm = c.norm == "pre"
    stacks = dict(num_heads=c.n_heads, pre_norm=pre_norm, activation=ACTIVATIONS[c.activation],
                  head_dim=c.key_dim)  # fmt: skip
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(c.n_layers, **stacks),
        transformer_spec.TransformerDecoderSpec(c.n_layers, **stacks),
    )
    positions = n_positions(ckpt.config)
    _inputs(spec.encoder, model.src_embed.weight, _table(model.positional, positions))
    _inputs(spec.decoder, model.tgt_embed.weight, _table(model.tgt_positional, positions))
    spec.decoder.projection.weight = array(model.output_weight)  # (vocab, d_model)
    if model.output_bias is not None:  # `model.output_bias`; the paper's projection has none
        spec.decoder.projection.bias = array(model.output_bias)
    if pre_norm:  # the final LayerNorm of each pre-LN stack
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    for ours, theirs in zip(model.encoder, spec.encoder.layer):
        own = [ours.self_attn.w_qkv, ours.self_attn.w_o]  # fused [q; k; v], then W^O
        _attention(theirs.self_attention, own, ours.res_attn.norm)
        _ffn(theirs.ffn, ours.ffn, ours.res_ffn.norm)
    for ours, theirs in zip(model.decoder, spec.decoder.layer):
        own = [ours.self_attn.w_qkv, ours.self_attn.w_o]
        _attention(theirs.self_attention, own, ours.res_self.norm)
        cross = ours.cross_attn
        _attention(theirs.attention, [cross.w_q, cross.w_kv, cross.w_o], ours.res_cross.norm)
        _ffn(theirs.ffn, ours.ffn, ours.res_ffn.norm)
    _vocabulary(spec, ckpt)
    spec.config.layer_norm_epsilon = c.ln_eps
    return spec


def _table(positional, n: int) -> torch.Tensor:
    """(positions, d_model): the learned table (row E), or `n` rows of the sinusoids."""
    if positional.learned:
        return positional.weight
    return sinusoid_table(n, positional.d_model)


def _inputs(spec, embedding: torch.Tensor, table: torch.Tensor) -> None:
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = array(embedding)  # (vocab, d_model)
    spec.scale_embeddings = True  # x sqrt(d_model), sec. 3.4
    spec.position_encodings.encodings = array(table)  # (positions, d_model)


def _linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = array(linear.weight)  # (out, in)
    if linear.bias is not None:  # optional in CTranslate2: none where aiayn has none
        spec.bias = array(linear.bias)


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = array(norm.weight), array(norm.bias)


def _attention(spec, linears: list[torch.nn.Linear], norm: torch.nn.LayerNorm) -> None:
    for theirs, ours in zip(spec.linear, linears):
        _linear(theirs, ours)
    _norm(spec.layer_norm, norm)


def _ffn(spec, ffn, norm: torch.nn.LayerNorm) -> None:
    _linear(spec.linear_0, ffn.w_1)
    _linear(spec.linear_1, ffn.w_2)
    _norm(spec.layer_norm, norm)


def _vocabulary(spec, ckpt: Checkpoint) -> None:
    """The sentencepiece pieces as token names, and which of them are unk, bos (the
    decoder's start: aiayn's <s>, an imported MarianMT model's <pad>) and eos."""
    target, c = pieces(ckpt.tgt_vocab), ckpt.config.model
    spec.register_source_vocabulary(pieces(ckpt.src_vocab))
    spec.register_target_vocabulary(target)
    config = spec.config
    config.unk_token, config.bos_token = target[ckpt.tgt_vocab.unk_id], target[c.bos_id]
    config.eos_token, config.decoder_start_token = target[c.eos_id], target[c.bos_id]
    config.add_source_eos = True  # aiayn's sources end in eos (`Translator._encode`)


def check_quantization(quantization: str | None) -> None:
    """Refuse a weight type CTranslate2 does not have (None: float32)."""
    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise ExportError(f"unknown --quantization {quantization!r}; CTranslate2 takes "
                          f"{', '.join(ACCEPTED_MODEL_TYPES)}")  # fmt: skip


def export_ctranslate2(
    checkpoint: str | Path, out: str | Path, quantization: str | None = None, force: bool = False
) -> Path:
    """Convert a checkpoint directory into CTranslate2 model directory `out`, weights stored
    as `quantization` (CTranslate2's names: int8, int8_float32, float16, ...; None: float32),
    with the sentencepiece model(s) and a README beside it."""
    check_quantization(quantization)
    ckpt = load_checkpoint(checkpoint)
    refuse_unrepresentable(TARGET, unrepresentable(ckpt.model))
    with written_atomically(out, force) as tmp:
        AiaynConverter(ckpt).convert(str(tmp), quantization=quantization, force=True)
        src_spm, tgt_spm = _copy_vocabularies(ckpt, tmp)
        decode = ckpt.config.decode
        c, names = ckpt.config.model, pieces(ckpt.tgt_vocab)
        suppress = [[names[i]] for i in sorted({c.pad_id, c.bos_id})]
        text = README.format(out=Path(out), src_spm=src_spm, tgt_spm=tgt_spm, beam=decode.beam,
                             min_len=decode.min_len, suppress=suppress, start=names[c.bos_id],
                             penalty=PENALTY[decode.length_penalty])  # fmt: skip
        (tmp / "README.md").write_text(text, "utf-8")
        write_marker(tmp, "ctranslate2", ckpt, quantization=quantization or "float32")
    return Path(out)


def _copy_vocabularies(ckpt: Checkpoint, out: Path) -> tuple[str, str]:
    """Write the checkpoint's sentencepiece model(s); -> the source and target file names
    (an imported MarianMT model's: source.spm and target.spm, as in its directory)."""
    names = vocab_files(ckpt.config)
    if ckpt.config.model.vocab_format == "marian":
        names = ("source.spm", "target.spm")
    for name, vocab in zip(names, (ckpt.src_vocab, ckpt.tgt_vocab)):
        (out / name).write_bytes(vocab.spm_bytes)
    return names
