"""MarianMT model directories shaped like OPUS-MT's, built in the test, never downloaded.

An OPUS-MT directory holds a `MarianMTModel` (post-LN, swish, sinusoids, tied embeddings
scaled by sqrt(d_model), biases everywhere, `final_logits_bias`), a source and a target
sentencepiece model (unigram) and `vocab.json`, which numbers the pieces of both models as
the Marian converter does: `</s>` 0, `<unk>` 1, the source pieces, the target pieces not
among them, `<pad>` last (the decoder's start). Here the sentencepiece models are trained on
a few hundred demo-corpus lines, a few hundred pieces each, and the weights are random:
transformers' own initialisation, then biases, LayerNorm gains and `final_logits_bias` made
non-zero, the embeddings made `sharpness` times larger (so that a step's best token stands
out, as in a trained model, and the searches make real choices), and eos favoured by
`eos_bias` in `final_logits_bias`, and allowed after `min_new_tokens` (so that eos competes
with the other tokens at many steps, and some translations end before the length limits).
Random deep networks say much the same at every step: their "translations" repeat a token,
but each step's choice is the model's, which is what the agreement tests compare.
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path

import sentencepiece as spm
import torch
import transformers

from aiayn.data.demo_corpus import demo_splits

SPLITS = demo_splits(n_train=400, n_valid=10, n_test=30, seed=11)
# Helsinki-NLP/opus-mt-*'s shape; init_std: of the random weights (transformers' is 0.02)
OPUS_MT = dict(d_model=512, layers=6, heads=8, ffn=2048, init_std=0.05)
TINY = dict(d_model=16, layers=2, heads=4, ffn=32, init_std=0.3)  # varied searches
GENTLE = dict(TINY, init_std=0.1)  # smaller weights, which int8 rounds more finely


@functools.lru_cache(maxsize=None)
def spm_model(side: int, size: int) -> bytes:
    """A unigram sentencepiece model of one side of the demo corpus (0: English, 1: German),
    with sentencepiece's default special pieces, as OPUS-MT's are."""
    out = io.BytesIO()
    spm.set_random_generator_seed(1)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([pair[side] for pair in SPLITS.train]), model_writer=out,
        vocab_size=size, model_type="unigram", character_coverage=1.0, minloglevel=2,
    )  # fmt: skip
    return out.getvalue()


def marian_table(source: bytes, target: bytes) -> dict[str, int]:
    """vocab.json as the Marian converter writes it: </s>, <unk>, the pieces, <pad> last."""
    table = {"</s>": 0, "<unk>": 1}
    for model in (source, target):
        sp = spm.SentencePieceProcessor()
        sp.LoadFromSerializedProto(model)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                table.setdefault(sp.id_to_piece(i), len(table))
    table[">>deu<<"] = len(table)  # a target-language token, as multilingual models have
    table["<pad>"] = len(table)
    return table


def build_marian(
    out: Path, shape: dict = TINY, *, activation: str = "swish", tied: bool = True,
    biases: bool = True, sharpness: float = 3.0, eos_bias: float = 4.0, min_new_tokens: int = 3,
    pieces: int = 200, seed: int = 0, weights_file: str = "model.safetensors", **config: object,
) -> Path:  # fmt: skip
    """An OPUS-MT-like directory in `out` (see the module docstring); `config` overrides
    MarianConfig keys. -> `out`."""
    out.mkdir(parents=True, exist_ok=True)
    source, target = spm_model(0, pieces), spm_model(1, pieces)
    (out / "source.spm").write_bytes(source)
    (out / "target.spm").write_bytes(target)
    table = marian_table(source, target)
    (out / "vocab.json").write_text(json.dumps(table, ensure_ascii=False), encoding="utf-8")
    pad = table["<pad>"]
    settings = dict(
        vocab_size=len(table), d_model=shape["d_model"], encoder_layers=shape["layers"],
        decoder_layers=shape["layers"], encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"], encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"], init_std=shape["init_std"], scale_embedding=True,
        activation_function=activation,
        max_position_embeddings=512, pad_token_id=pad, decoder_start_token_id=pad,
        eos_token_id=0, forced_eos_token_id=0, bos_token_id=0, tie_word_embeddings=tied,
        static_position_embeddings=True, normalize_before=False, normalize_embedding=False,
        add_final_layer_norm=False,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**{**settings, **config})).eval()
    model.generation_config = transformers.GenerationConfig(
        num_beams=4, max_length=512, bad_words_ids=[[pad]], decoder_start_token_id=pad,
        eos_token_id=0, forced_eos_token_id=0, pad_token_id=pad, bos_token_id=0,
        min_new_tokens=min_new_tokens,
    )  # fmt: skip
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name or (biases and name.endswith("bias")):
                p.add_(torch.randn_like(p) * 0.1)
        model.model.shared.weight.mul_(sharpness)
        if not tied:
            model.lm_head.weight.normal_(0, shape["init_std"] * sharpness)
        if biases:
            model.final_logits_bias.normal_(0, 0.5)
        model.final_logits_bias[0, 0] += eos_bias  # </s> is 0
    model.save_pretrained(out, safe_serialization=weights_file.endswith(".safetensors"))
    transformers.MarianTokenizer(
        str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"),
        source_lang="en", target_lang="de",
    ).save_pretrained(out)  # fmt: skip
    return out


@functools.lru_cache(maxsize=4)
def hf_model(directory: Path) -> tuple:
    """(MarianTokenizer, MarianMTModel in eval mode) of a directory, loaded once."""
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    return tokenizer, transformers.MarianMTModel.from_pretrained(directory).eval()


def hf_translate(
    directory: Path, texts: list[str], num_beams: int, limits: list[int], **generate: object
) -> list[list[int]]:
    """transformers' translations (ids without the start token and eos), each sentence alone,
    with at most `limits[i]` new tokens (eos included), as aiayn's |Y| <= input + offset."""
    tokenizer, model = hf_model(directory)
    found = []
    for text, limit in zip(texts, limits):
        with torch.no_grad():
            ids = model.generate(**tokenizer([text], return_tensors="pt"), num_beams=num_beams,
                                 max_new_tokens=limit, **generate)[0].tolist()  # fmt: skip
        eos = model.generation_config.eos_token_id
        found.append([i for i in ids[1:] if i != eos])
    return found


@torch.no_grad()
def hf_logp(directory: Path, src: list[int], tgt: list[int]) -> torch.Tensor:
    """transformers' teacher-forced log P of each target token and the eos: (len(tgt) + 1,).
    `src` ends in eos; `tgt` has none."""
    _, model = hf_model(directory)
    start, eos = model.config.decoder_start_token_id, model.config.eos_token_id
    logits = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([[start, *tgt]]))
    gold = torch.tensor([*tgt, eos])[:, None]
    return logits.logits[0].log_softmax(-1).gather(1, gold)[:, 0]
