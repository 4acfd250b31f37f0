"""`aiayn import --from huggingface DIR OUT`: a MarianMT model directory (the layout of the
OPUS-MT models) as an aiayn checkpoint; the inverse of `export/huggingface.py`.

MarianMT is the paper's network (post-LN layers, sec. 3.1; tied embeddings scaled by
sqrt(d_model), 3.4; fixed sinusoids, 3.5) with choices of its own, each an ordinary
`model.*` option here: the feed-forward activation its config names (OPUS-MT's: swish),
LayerNorm epsilon 1e-5 (PyTorch's default, which its layers use), biases on the attention
projections and on the logits (`final_logits_bias`: `model.output_bias`), each kept only
where it is not all zeros, a decoder that starts from the pad token (`model.bos_id`), and
its vocabulary, two sentencepiece models numbered by one table (`model.vocab_format:
marian`, `data/marian_vocab.py`). Its positions are [sin | cos] halves: every channel is
permuted back to the paper's interleaved order, the inverse of the export's permutation.
Decoding takes the generation config's `num_beams`, `length_penalty` (a division by
|Y| ** alpha: `decode.length_penalty: power`) and minimum length, with transformers' beam
search rules (`decode.beam_rules: transformers`); the maximum length stays aiayn's, input +
`decode.max_len_offset` tokens per sentence (transformers' `max_length` is one for the whole
batch and rarely reached).

Only files are read, and transformers is not needed: config.json (generation_config.json
if there is one), the weights, source.spm, target.spm and vocab.json. The weights are
`model.safetensors`, or `pytorch_model.bin` through `torch.load(weights_only=True)`, which
unpickles tensors and plain containers only and never runs the file's code; anything in it
that is not a tensor is refused. What aiayn cannot represent (another model type, a
LayerNorm on the embeddings, pre-LN with its final LayerNorms, positions other than the
sinusoids, separate vocabularies, encoder and decoder of different shapes) is refused with
one line naming it, before OUT is written.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from aiayn.checkpoint import save_checkpoint
from aiayn.config import Config, DecodeConfig, ModelConfig
from aiayn.data.marian_vocab import MarianVocab
from aiayn.errors import AiaynError, ModelImportError
from aiayn.export.common import channel_order
from aiayn.jsonfile import read_object
from aiayn.model.attention import MultiHeadAttention
from aiayn.model.layers import sinusoid_table
from aiayn.model.transformer import Transformer

# MarianConfig's defaults (transformers 4.x) for the keys read here, for configs without them.
MARIAN_DEFAULTS: dict[str, Any] = {
    "model_type": "marian", "vocab_size": 58101, "d_model": 1024, "encoder_layers": 12,
    "decoder_layers": 12, "encoder_attention_heads": 16, "decoder_attention_heads": 16,
    "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096, "activation_function": "gelu",
    "max_position_embeddings": 1024, "dropout": 0.1, "attention_dropout": 0.0,
    "activation_dropout": 0.0, "scale_embedding": False, "pad_token_id": 58100,
    "eos_token_id": 0, "decoder_start_token_id": 58100,
    "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
}  # fmt: skip
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
LN_EPS = 1e-5  # nn.LayerNorm's default, which MarianMT's layers are built with
POSITIONS = ("encoder.embed_positions.weight", "decoder.embed_positions.weight")


def import_huggingface(directory: str | Path, out: str | Path, force: bool = False) -> Path:
    """Write MarianMT model directory `directory` as aiayn checkpoint `out` (an existing
    checkpoint there is replaced only with `force`)."""
    directory, out = Path(directory), Path(out)
    if (out.exists() or out.is_symlink()) and not force:
        raise ModelImportError(f"{out}: exists; --force replaces it (if it is a checkpoint)")
    hf = read_config(directory)
    weights = read_weights(directory)
    problems = unrepresentable(hf, weights)
    if problems:
        raise ModelImportError(f"cannot import {directory}: {'; '.join(problems)}")
    try:
        config = Config(model=model_config(hf, weights), decode=decode_config(directory, hf))
    except AiaynError as err:
        raise ModelImportError(f"cannot import {directory}: {err}") from None
    src_vocab, tgt_vocab = marian_vocabs(directory, config.model)
    model = Transformer(config.model)
    load_marian_weights(model, weights, directory)
    meta = {"imported_from": str(directory.resolve()), "imported_format": "MarianMT"}
    languages = marian_languages(directory)
    if languages is not None:  # the pair `aiayn serve` routes it by
        meta["languages"] = languages
    return save_checkpoint(out, model, config, src_vocab, tgt_vocab, meta)


def marian_languages(directory: Path) -> dict[str, str] | None:
    """{"source", "target"}: the codes OPUS-MT's tokenizer_config.json gives as source_lang
    and target_lang, as given; None where it does not name both."""
    settings = directory / "tokenizer_config.json"
    found = _json_object(settings) if settings.is_file() else {}
    pair = found.get("source_lang"), found.get("target_lang")
    if not all(isinstance(code, str) and code for code in pair):
        return None
    return {"source": pair[0], "target": pair[1]}


def read_config(directory: Path) -> dict[str, Any]:
    """config.json with MarianConfig's defaults for the keys it leaves out."""
    if not (directory / "config.json").is_file():
        raise ModelImportError(f"{directory}: not a HuggingFace model directory (no config.json)")
    return {**MARIAN_DEFAULTS, **_json_object(directory / "config.json")}


def read_weights(directory: Path) -> dict[str, Tensor]:
    """The tensors of model.safetensors or else pytorch_model.bin, named as in a
    `MarianModel` (without the `model.` of a `MarianMTModel`)."""
    for name in WEIGHT_FILES:
        file = directory / name
        if file.is_file():
            weights = _safetensors(file) if file.suffix == ".safetensors" else load_bin(file)
            return {key.removeprefix("model."): tensor for key, tensor in weights.items()}
    sharded = sorted(p.name for p in directory.glob("*.index.json"))
    found = f" (weights in shards, {sharded[0]}, are not read)" if sharded else ""
    raise ModelImportError(f"{directory}: no {' or '.join(WEIGHT_FILES)}{found}")


def load_bin(file: Path) -> dict[str, Tensor]:
    """A pytorch_model.bin's tensors. `torch.load(weights_only=True)` unpickles tensors and
    plain containers only, and refuses any other object before it is built, so that no code
    the file names runs; what it lets through must still be a mapping of names to tensors."""
    try:
        data = torch.load(file, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as err:
        if "Weights only load failed" in str(err):  # an object weights_only does not build
            found = re.search(r"GLOBAL ([\w.]+)", str(err))  # the callable the file names
            what = f" ({found.group(1)})" if found else ""
            raise ModelImportError(f"{file}: holds an object that is not a tensor{what}; aiayn "
                                   "reads .bin files with torch.load(weights_only=True), which "
                                   "refuses it and runs no code from them") from None  # fmt: skip
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ModelImportError(f"{file}: truncated or corrupt ({first})") from None
    if not isinstance(data, dict):
        raise ModelImportError(f"{file}: holds a {type(data).__name__}, not named tensors")
    bad = [repr(k) for k, v in data.items() if not (isinstance(k, str) and torch.is_tensor(v))]
    if bad:
        raise ModelImportError(f"{file}: holds entries that are not tensors ({', '.join(bad[:5])})")
    return data


def unrepresentable(hf: dict[str, Any], weights: dict[str, Tensor]) -> list[str]:
    """What an aiayn `Transformer` cannot hold, one phrase each (empty: importable)."""
    problems = []
    if hf["model_type"] != "marian":
        problems.append(f"model_type {hf['model_type']!r} (aiayn imports MarianMT, 'marian')")
    for what in ("layers", "attention_heads", "ffn_dim"):
        enc, dec = hf[f"encoder_{what}"], hf[f"decoder_{what}"]
        if enc != dec:
            problems.append(f"encoder_{what}={enc}, decoder_{what}={dec} (aiayn's are one value)")
    if hf["d_model"] % hf["encoder_attention_heads"]:
        problems.append(f"d_model={hf['d_model']} not divisible by its heads")
    if hf["activation_function"] not in ACTIVATIONS:
        problems.append(f"activation_function {hf['activation_function']!r} (aiayn has "
                        f"{', '.join(sorted(set(ACTIVATIONS.values())))})")  # fmt: skip
    if not hf["scale_embedding"]:
        problems.append("scale_embedding false (aiayn scales embeddings by sqrt(d_model), "
                        "sec. 3.4)")  # fmt: skip
    if not hf["share_encoder_decoder_embeddings"]:
        problems.append("separate source and target vocabularies (share_encoder_decoder_"
                        "embeddings false)")  # fmt: skip
    if hf.get("normalize_embedding") or any("layernorm_embedding" in k for k in weights):
        problems.append("a LayerNorm on the embeddings (layernorm_embedding), which aiayn's "
                        "model does not have")  # fmt: skip
    final = [k for k in weights if k.startswith(("encoder.layer_norm.", "decoder.layer_norm."))]
    if hf.get("normalize_before") or hf.get("add_final_layer_norm") or final:
        problems.append("pre-LN with a final LayerNorm per stack (normalize_before, "
                        f"{final[0] if final else 'add_final_layer_norm'}): MarianMT's layers "
                        "are post-LN and transformers would leave them out")  # fmt: skip
    if hf.get("static_position_embeddings") is False or not _sinusoids(hf, weights):
        problems.append("positions that are not MarianMT's sinusoids (learned positions of "
                        "another layout; aiayn's are the paper's, sec. 3.5)")  # fmt: skip
    return problems


def _sinusoids(hf: dict[str, Any], weights: dict[str, Tensor]) -> bool:
    """Whether the position tables the file holds (old files do) are Marian's sinusoids."""
    d = hf["d_model"]
    for table in (weights[name] for name in POSITIONS if name in weights):
        if table.dim() != 2 or table.size(1) != d:
            return False
        marian = sinusoid_table(table.size(0), d)[:, channel_order(d)]  # [sin | cos]
        if not torch.allclose(table.double(), marian, atol=1e-4, rtol=0):
            return False
    return True


def model_config(hf: dict[str, Any], weights: dict[str, Tensor]) -> ModelConfig:
    """The `model.*` options of a MarianMT config; biases all zeros are left out."""
    attention = [t for k, t in weights.items() if re.search(r"_attn\.\w+_proj\.bias$", k)]
    logits = weights.get("final_logits_bias")
    return ModelConfig(
        vocab_size=hf["vocab_size"], d_model=hf["d_model"], n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"], n_layers=hf["encoder_layers"], p_drop=hf["dropout"],
        p_drop_attn=hf["attention_dropout"], p_drop_ffn=hf["activation_dropout"],
        max_len=hf["max_position_embeddings"], ln_eps=LN_EPS,
        tie_embeddings=hf["tie_word_embeddings"], attention_bias=any(t.any() for t in attention),
        activation=ACTIVATIONS[hf["activation_function"]],
        output_bias=logits is not None and bool(logits.any()), pad_id=hf["pad_token_id"],
        bos_id=hf["decoder_start_token_id"], eos_id=hf["eos_token_id"], vocab_format="marian",
    )  # fmt: skip


def decode_config(directory: Path, hf: dict[str, Any]) -> DecodeConfig:
    """Beam, alpha and minimum length from generation_config.json (else config.json, where
    older models keep them), with transformers' defaults (greedy, alpha 1, no minimum).
    transformers' `min_length` counts the decoder's start token; aiayn's `min_len` does not."""
    file = directory / "generation_config.json"
    gen = _json_object(file) if file.is_file() else hf
    min_len = max(int(gen.get("min_length") or 0) - 1, int(gen.get("min_new_tokens") or 0), 0)
    beam, alpha = int(gen.get("num_beams") or 1), float(gen.get("length_penalty", 1.0))
    return DecodeConfig(beam=beam, alpha=alpha, min_len=min_len, length_penalty="power",
                        beam_rules="transformers")  # fmt: skip


def marian_vocabs(directory: Path, model: ModelConfig) -> tuple[MarianVocab, MarianVocab]:
    """The source and target sides: source.spm and target.spm, numbered by vocab.json."""
    files = {name: directory / name for name in ("source.spm", "target.spm", "vocab.json")}
    missing = [name for name, file in files.items() if not file.is_file()]
    if missing or (directory / "target_vocab.json").is_file():
        why = f"no {', '.join(missing)}" if missing else "a separate target_vocab.json"
        raise ModelImportError(f"cannot import {directory}: {why} (MarianMT's tokenizer is "
                               "source.spm and target.spm numbered by one vocab.json)")  # fmt: skip
    table = _json_object(files["vocab.json"])
    n = model.vocab_size
    if sorted(table.values()) != list(range(n)):
        raise ModelImportError(f"{files['vocab.json']}: does not number {n} pieces 0..{n - 1} "
                               "(the model's embeddings), one id each")  # fmt: skip
    pieces = sorted(table, key=table.__getitem__)
    settings = directory / "tokenizer_config.json"
    unk = _json_object(settings).get("unk_token", "<unk>") if settings.is_file() else "<unk>"
    if not isinstance(unk, str) or unk not in table:
        raise ModelImportError(f"{files['vocab.json']}: has no unknown token {unk!r}")
    ids = dict(pad_id=model.pad_id, unk_id=table[unk], bos_id=model.bos_id, eos_id=model.eos_id)
    try:
        return tuple(MarianVocab(files[name].read_bytes(), pieces, **ids, source=str(files[name]))
                     for name in ("source.spm", "target.spm"))  # type: ignore[return-value]
    except AiaynError as err:
        raise ModelImportError(str(err)) from None


@torch.no_grad()
def load_marian_weights(model: Transformer, weights: dict[str, Tensor], where: Path) -> None:
    """Copy a MarianModel's tensors into `model`, each channel of the residual stream put
    back in the paper's order: columns of the maps that read it, rows of those that write
    it, LayerNorm vectors."""
    d = model.config.d_model
    inv = torch.argsort(channel_order(d))  # aiayn's channel i is Marian's channel inv[i]
    take = _Taker(weights, where)
    names = ("shared.weight", "decoder.embed_tokens.weight", "encoder.embed_tokens.weight")
    embed = next((k for k in names if k in weights), names[0])  # the one embedding matrix
    model.tgt_embed.weight.copy_(take(embed, model.tgt_embed.weight.shape)[:, inv])
    if not model.config.tie_embeddings:
        model.out_proj.weight.copy_(take("lm_head.weight", model.out_proj.weight.shape)[:, inv])
    if model.output_bias is not None:
        model.output_bias.copy_(take("final_logits_bias", (1, model.config.vocab_size))[0])
    for i, layer in enumerate(model.encoder):
        prefix = f"encoder.layers.{i}."
        _attention(layer.self_attn, take, prefix + "self_attn.", inv)
        _ffn(layer.ffn, take, prefix, inv)
        _norm(layer.res_attn.norm, take, prefix + "self_attn_layer_norm.", inv)
        _norm(layer.res_ffn.norm, take, prefix + "final_layer_norm.", inv)
    for i, layer in enumerate(model.decoder):
        prefix = f"decoder.layers.{i}."
        _attention(layer.self_attn, take, prefix + "self_attn.", inv)
        _attention(layer.cross_attn, take, prefix + "encoder_attn.", inv)
        _ffn(layer.ffn, take, prefix, inv)
        _norm(layer.res_self.norm, take, prefix + "self_attn_layer_norm.", inv)
        _norm(layer.res_cross.norm, take, prefix + "encoder_attn_layer_norm.", inv)
        _norm(layer.res_ffn.norm, take, prefix + "final_layer_norm.", inv)
    ignored = {*names, "lm_head.weight", "final_logits_bias", *POSITIONS}  # copies, or zeros
    unknown = sorted(set(weights) - take.used - ignored)
    if unknown:
        raise ModelImportError(f"cannot import {where}: tensors aiayn's model has no place for "
                               f"({', '.join(unknown[:5])})")  # fmt: skip


class _Taker:
    """`take(name, shape)`: a tensor of the file, checked to be there and of that shape."""

    def __init__(self, weights: dict[str, Tensor], where: Path) -> None:
        self.weights, self.where, self.used = weights, where, set()

    def __call__(self, name: str, shape: tuple[int, ...] | torch.Size) -> Tensor:
        tensor = self.weights.get(name)
        if tensor is None or tuple(tensor.shape) != tuple(shape):
            found = "missing" if tensor is None else f"of shape {tuple(tensor.shape)}"
            raise ModelImportError(f"cannot import {self.where}: tensor {name} is {found}, "
                                   f"its config asks for {tuple(shape)}")  # fmt: skip
        self.used.add(name)
        return tensor


def _attention(ours: MultiHeadAttention, take: _Taker, prefix: str, inv: Tensor) -> None:
    """q, k, v read the residual stream (input columns); out_proj writes it (output rows)."""
    h_dk = ours.n_heads * ours.d_k
    d_model = ours.w_o.out_features
    q, k, v = (take(f"{prefix}{n}_proj.weight", (h_dk, d_model))[:, inv] for n in "qkv")
    if ours.cross:
        ours.w_q.weight.copy_(q)
        ours.w_kv.weight.copy_(torch.cat([k, v]))  # (2 * h * d_k, d_model): [k; v]
    else:
        ours.w_qkv.weight.copy_(torch.cat([q, k, v]))  # (3 * h * d_k, d_model): [q; k; v]
    ours.w_o.weight.copy_(take(prefix + "out_proj.weight", (d_model, h_dk))[inv])
    biases = [take(f"{prefix}{n}_proj.bias", (h_dk,)) for n in "qkv"]
    out_bias = take(prefix + "out_proj.bias", (d_model,))[inv]
    if ours.w_o.bias is None:  # all zeros (`model_config`): the paper's matrices
        return
    if ours.cross:
        ours.w_q.bias.copy_(biases[0])
        ours.w_kv.bias.copy_(torch.cat(biases[1:]))
    else:
        ours.w_qkv.bias.copy_(torch.cat(biases))
    ours.w_o.bias.copy_(out_bias)


def _ffn(ffn, take: _Taker, prefix: str, inv: Tensor) -> None:
    d_ff, d_model = ffn.w_1.weight.shape
    ffn.w_1.weight.copy_(take(prefix + "fc1.weight", (d_ff, d_model))[:, inv])
    ffn.w_1.bias.copy_(take(prefix + "fc1.bias", (d_ff,)))
    ffn.w_2.weight.copy_(take(prefix + "fc2.weight", (d_model, d_ff))[inv])
    ffn.w_2.bias.copy_(take(prefix + "fc2.bias", (d_model,))[inv])


def _norm(norm: torch.nn.LayerNorm, take: _Taker, prefix: str, inv: Tensor) -> None:
    shape = norm.weight.shape
    norm.weight.copy_(take(prefix + "weight", shape)[inv])
    norm.bias.copy_(take(prefix + "bias", shape)[inv])


def _json_object(file: Path) -> dict[str, Any]:
    return read_object(file, ModelImportError)


def _safetensors(file: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelImportError(f"{file}: truncated or corrupt safetensors file ({err})") from None
