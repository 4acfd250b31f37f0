"""`aiayn import --from huggingface`: a MarianMT (OPUS-MT) directory becomes a checkpoint that
computes and translates as transformers does, without downloading a model.

The models are built in the test (`marian_models.py`): OPUS-MT's conventions and config keys,
two sentencepiece models trained on the demo corpus, random weights. One test runs a model
of OPUS-MT's size (d_model 512, 6+6 layers, ~44M parameters: about a minute on two busy
cores); the others use the same layout at d_model 16. Agreement is checked in float32:
teacher-forced log-probabilities within 1e-5, greedy and beam-search outputs identical
(aiayn's `decode.length_penalty: power` and `decode.beam_rules: transformers`, which the
import sets), and export -> import -> export bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import ctranslate2
import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import marian_models as mm
from aiayn.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from aiayn.cli import main
from aiayn.config import Config
from aiayn.convert import import_model
from aiayn.data.marian_vocab import MarianVocab, vocab_from_bytes
from aiayn.errors import CheckpointError, ModelImportError
from aiayn.export import export_checkpoint
from aiayn.model.transformer import Transformer
from aiayn.serve.service import ServeConfig
from aiayn.translate import Translator
from conftest import tiny_model_config
from serve_helpers import request, running
from tiny_checkpoint import tiny_vocab
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

TEXTS = [src for src, _ in mm.SPLITS.test]


@pytest.fixture(scope="module")
def opus(tmp_path_factory) -> tuple[Path, Path]:
    """(a d_model-16 OPUS-MT-like directory, its import by the command line)."""
    root = tmp_path_factory.mktemp("opus")
    directory = mm.build_marian(root / "hf")
    assert main(["import", "--from", "huggingface", str(directory), str(root / "ckpt")]) == 0
    return directory, root / "ckpt"


def check_scores(directory: Path, loaded: Checkpoint, targets: list[list[int]] | None = None):
    """Teacher-forced log-probabilities agree with transformers' within 1e-5: of the first
    demo test pairs, or of their sources with `targets` (token ids). Float32 rounds a
    log-probability of -20 to about 2e-6, and the two libraries sum in other orders: the
    targets must be ones the model finds likely (log-probabilities of a few units), as a
    trained model finds its references (`build_marian(sharpness=1)`, or its own outputs)."""
    start = loaded.config.model.bos_id
    pairs = mm.SPLITS.test[:4] if targets is None else zip(TEXTS, targets)
    for src_text, tgt_text in pairs:
        src = loaded.src_vocab.encode(src_text) + [loaded.src_vocab.eos_id]
        tgt = loaded.tgt_vocab.encode(tgt_text) if isinstance(tgt_text, str) else tgt_text
        with torch.no_grad():
            logits = loaded.model(torch.tensor([src]), torch.tensor([[start, *tgt]]))
        gold = torch.tensor([*tgt, loaded.tgt_vocab.eos_id])[:, None]
        ours = logits[0].log_softmax(-1).gather(1, gold)[:, 0]
        torch.testing.assert_close(ours, mm.hf_logp(directory, src, tgt), atol=1e-5, rtol=0)


def limits(translator: Translator, texts: list[str]) -> list[int]:
    """aiayn's largest |Y| per sentence (input + eos + offset): transformers' max_new_tokens."""
    offset = translator.decode.max_len_offset
    return [len(ids) + 1 + offset for ids in translator.src_vocab.encode_batch(texts)]


def test_an_opus_mt_sized_model_scores_and_translates_as_transformers(tmp_path):
    """The one model of OPUS-MT's size: `aiayn import` + `aiayn translate` give transformers'
    greedy translations, beam search (4) its beam translations, and the log-probabilities
    of those agree within 1e-5. Short sentences and limits keep the searches short."""
    directory = mm.build_marian(tmp_path / "opus-mt", mm.OPUS_MT)
    ckpt = tmp_path / "ckpt"
    assert main(["import", "--from", "huggingface", str(directory), str(ckpt)]) == 0
    texts = sorted(TEXTS, key=len)[:2]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    args = ["translate", "--checkpoint", str(ckpt), "--beam", "1", "--max-len-offset", "3"]
    assert main([*args, "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]) == 0
    loaded = load_checkpoint(ckpt)
    m = loaded.config.model
    assert (m.d_model, m.n_layers, m.n_heads, m.d_ff, m.activation) == (512, 6, 8, 2048, "swish")
    decode = dataclasses.replace(loaded.config.decode, max_len_offset=3)
    translator = Translator(loaded.model, loaded.src_vocab, loaded.tgt_vocab, decode)
    greedy = mm.hf_translate(directory, texts, 1, limits(translator, texts))
    tokenizer, _ = mm.hf_model(directory)
    decoded = [tokenizer.decode(ids, skip_special_tokens=True) for ids in greedy]
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == decoded
    beam = mm.hf_translate(directory, texts, 4, limits(translator, texts))
    assert [h[0].tokens for h in translator.hypotheses(texts)] == beam  # the checkpoint's beam 4
    check_scores(directory, loaded, targets=greedy)
    check_scores(directory, loaded, targets=beam)


def test_the_import_takes_opus_mts_options_and_vocabulary(opus):
    directory, ckpt = opus
    loaded = load_checkpoint(ckpt)
    m, d = loaded.config.model, loaded.config.decode
    table = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    assert (m.activation, m.ln_eps, m.attention_bias, m.output_bias) == ("swish", 1e-5, True, True)
    assert (m.pad_id, m.bos_id, m.eos_id) == (table["<pad>"], table["<pad>"], table["</s>"])
    assert (m.vocab_format, m.shared_vocab, m.tie_embeddings) == ("marian", True, True)
    # generation_config.json: 4 beams, transformers' length penalty 1.0 and min_new_tokens 3
    assert (d.beam, d.alpha, d.min_len, d.length_penalty, d.beam_rules) == (
        4, 1.0, 3, "power", "transformers")  # fmt: skip
    assert isinstance(loaded.src_vocab, MarianVocab) and loaded.src_vocab.size == len(table)
    assert loaded.src_vocab.spm_bytes == (directory / "source.spm").read_bytes()
    assert loaded.tgt_vocab.spm_bytes == (directory / "target.spm").read_bytes()


def test_pieces_and_ids_are_marian_tokenizers(opus):
    """Source and target text encode to MarianTokenizer's ids (a leading language code is one
    token, unknown characters <unk>), and ids decode to its text without special tokens."""
    directory, ckpt = opus
    loaded = load_checkpoint(ckpt)
    tokenizer, _ = mm.hf_model(directory)
    texts = [*TEXTS[:5], ">>deu<< " + TEXTS[5], "Ein Mann 日本 ★ spielt.", ""]
    for text in texts:
        assert loaded.src_vocab.encode(text) + [0] == tokenizer(text).input_ids
        assert loaded.tgt_vocab.encode(text) + [0] == tokenizer(text_target=text).input_ids
    assert loaded.src_vocab.encode_batch(texts) == [loaded.src_vocab.encode(t) for t in texts]
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        ids = torch.randint(0, loaded.tgt_vocab.size, (12,), generator=generator).tolist()
        ids[3:5] = [loaded.tgt_vocab.eos_id, loaded.tgt_vocab.pad_id]  # specials are dropped
        assert loaded.tgt_vocab.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True)


def test_a_marian_vocabulary_is_one_file_and_a_damaged_one_is_named(opus, tmp_path):
    _, ckpt = opus
    loaded = load_checkpoint(ckpt)
    for vocab in (loaded.src_vocab, tiny_vocab()):  # either kind comes back from its bytes
        again = vocab_from_bytes(vocab.model_bytes)
        assert type(again) is type(vocab) and again.sha256 == vocab.sha256
    assert loaded.src_vocab.id_space == loaded.tgt_vocab.id_space  # one table, two models
    assert loaded.src_vocab.sha256 != loaded.tgt_vocab.sha256
    damaged = Path(shutil.copytree(ckpt, tmp_path / "ckpt"))
    blob = (damaged / "src_vocab.marian").read_bytes()
    (damaged / "src_vocab.marian").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(CheckpointError, match="src_vocab.marian is missing or invalid"):
        load_checkpoint(damaged)


VARIANTS = {
    "swish": dict(),
    "gelu": dict(activation="gelu"),
    "relu, no biases": dict(activation="relu", biases=False, eos_bias=0.0),
    "untied projection": dict(tied=False),
    "pytorch_model.bin": dict(weights_file="pytorch_model.bin"),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_layout_scores_as_transformers(tmp_path, variant):
    directory = mm.build_marian(tmp_path / "hf", sharpness=1.0, **VARIANTS[variant])
    loaded = load_checkpoint(import_model(directory, "huggingface", tmp_path / "ckpt"))
    m = loaded.config.model
    options = VARIANTS[variant]
    assert m.activation == options.get("activation", "swish")
    assert m.attention_bias == m.output_bias == options.get("biases", True)
    assert m.tie_embeddings == options.get("tied", True)
    check_scores(directory, loaded)


def test_greedy_and_beam_search_give_transformers_translations(opus):
    """Every sentence, at several beams and length penalties: the same tokens. Some end
    before the length limit and some at it (where transformers forces eos), so both the
    finishing and the stopping rules are compared."""
    directory, ckpt = opus
    texts, ended_early, at_limit = TEXTS[:8], 0, 0
    for beam, alpha in [(1, 1.0), (4, 0.6), (4, 1.0), (6, 2.0)]:
        translator = Translator.from_checkpoint(ckpt, beam=beam, alpha=alpha, max_len_offset=8)
        limit = limits(translator, texts)
        ours = [h[0].tokens for h in translator.hypotheses(texts)]
        assert ours == mm.hf_translate(directory, texts, beam, limit, length_penalty=alpha)
        ended_early += sum(len(t) + 1 < n for t, n in zip(ours, limit))
        at_limit += sum(len(t) + 1 == n for t, n in zip(ours, limit))
    assert ended_early >= 10 and at_limit >= 10


def test_tensor2tensors_rules_find_other_translations_than_transformers(opus):
    """Why the import sets `decode.beam_rules: transformers`: with aiayn's default rules
    (any of the 2 * beam candidates may finish; stop only when no live hypothesis can win),
    beam search finds other, better-scored translations on the same model."""
    _, ckpt = opus
    texts = TEXTS[:10]
    hyps = {}
    for rules in ("transformers", "t2t"):
        translator = Translator.from_checkpoint(ckpt, beam=4, alpha=1.0, max_len_offset=8)
        translator.decode.beam_rules = rules
        hyps[rules] = [h[0] for h in translator.hypotheses(texts)]
    assert any(a.tokens != b.tokens for a, b in zip(hyps["transformers"], hyps["t2t"]))


def random_checkpoint(path: Path, **model) -> Path:
    vocab = tiny_vocab()
    config = tiny_model_config(vocab_size=vocab.size, **model)
    torch.manual_seed(1)
    net = Transformer(config)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "norm" in name or name.endswith("bias"):  # gains and biases that are not 1, 0
                p.add_(torch.randn_like(p) * 0.1)
    return save_checkpoint(path, net, Config(model=config), vocab, vocab)


def tensors(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


def same_tensors(a: Path, b: Path) -> None:
    first, second = tensors(a), tensors(b)
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name
    for name in ("vocab.json", "source.spm", "target.spm"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize(
    "layout", [{}, {"attention_bias": True}, {"tie_embeddings": False},
               {"activation": "swish", "output_bias": True, "ln_eps": 1e-5}],
)  # fmt: skip
def test_export_import_export_is_bit_identical(tmp_path, layout):
    ckpt = random_checkpoint(tmp_path / "ckpt", **layout)
    first = export_checkpoint(ckpt, "huggingface", tmp_path / "hf1")
    back = import_model(first, "huggingface", tmp_path / "back")
    second = export_checkpoint(back, "huggingface", tmp_path / "hf2")
    same_tensors(first, second)
    # the network comes back whole: the paper's bias-free matrices stay bias-free
    original, imported = load_checkpoint(ckpt).config.model, load_checkpoint(back).config.model
    for key in ("attention_bias", "output_bias", "tie_embeddings", "activation"):
        assert getattr(imported, key) == getattr(original, key)


def test_import_then_export_gives_back_the_directorys_tensors(opus, tmp_path):
    directory, ckpt = opus
    out = export_checkpoint(ckpt, "huggingface", tmp_path / "hf")
    same_tensors(directory, out)


def bin_file(directory: Path, content: object) -> Path:
    """`directory` with its weights replaced by a pytorch_model.bin of `content`."""
    (directory / "model.safetensors").unlink(missing_ok=True)
    torch.save(content, directory / "pytorch_model.bin")
    return directory


class RunsCode:
    """A pickle that, unpickled by plain `torch.load`, would create `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pytorch_model_bin_is_read_with_weights_only_and_must_hold_only_tensors(opus, tmp_path):
    directory, ckpt = opus
    weights = tensors(directory)
    copy = mm.build_marian(tmp_path / "bin")
    via_bin = import_model(bin_file(copy, weights), "huggingface", tmp_path / "from-bin")
    assert tensors(via_bin).keys() == tensors(ckpt).keys()
    assert all(torch.equal(a, tensors(ckpt)[k]) for k, a in tensors(via_bin).items())
    marker = tmp_path / "code-ran"
    cases = {
        "holds entries that are not tensors ('step')": {**weights, "step": 5},
        "holds a list, not named tensors": list(weights.values()),
        "holds an object that is not a tensor (posix.system)": {"x": RunsCode(marker)},
    }
    for message, content in cases.items():
        with pytest.raises(ModelImportError, match=message.replace("(", r"\(").replace(")", r"\)")):
            import_model(bin_file(copy, content), "huggingface", tmp_path / "refused")
        assert not (tmp_path / "refused").exists() and not marker.exists()
    bin_file(copy, weights)
    whole = (copy / "pytorch_model.bin").read_bytes()
    (copy / "pytorch_model.bin").write_bytes(whole[: len(whole) // 2])  # cut short
    with pytest.raises(ModelImportError, match="truncated or corrupt"):
        import_model(copy, "huggingface", tmp_path / "refused")


def edit(directory: Path, **changes: object) -> None:
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))


def add_tensor(directory: Path, name: str, tensor: torch.Tensor) -> None:
    save_file({**tensors(directory), name: tensor}, str(directory / "model.safetensors"))


def drop_tensor(directory: Path, name: str) -> None:
    kept = {k: v for k, v in tensors(directory).items() if k != name}
    save_file(kept, str(directory / "model.safetensors"))


REFUSALS = {
    "model_type 'bart'": lambda d: edit(d, model_type="bart"),
    "a LayerNorm on the embeddings": lambda d: add_tensor(
        d, "model.encoder.layernorm_embedding.weight", torch.ones(16)),
    "pre-LN with a final LayerNorm per stack (normalize_before, encoder.layer_norm.weight)":
        lambda d: add_tensor(d, "model.encoder.layer_norm.weight", torch.ones(16)),
    "positions that are not MarianMT's sinusoids": lambda d: add_tensor(
        d, "model.encoder.embed_positions.weight", torch.randn(512, 16)),
    "learned positions": lambda d: edit(d, static_position_embeddings=False),
    "activation_function 'gelu_new'": lambda d: edit(d, activation_function="gelu_new"),
    "encoder_layers=2, decoder_layers=1": lambda d: edit(d, decoder_layers=1),
    "scale_embedding false": lambda d: edit(d, scale_embedding=False),
    "separate source and target vocabularies": lambda d: edit(
        d, share_encoder_decoder_embeddings=False),
    "a separate target_vocab.json": lambda d: (d / "target_vocab.json").write_text("{}"),
    "no source.spm": lambda d: (d / "source.spm").unlink(),
    "tensor decoder.layers.1.fc2.weight is missing": lambda d: drop_tensor(
        d, "model.decoder.layers.1.fc2.weight"),
    "truncated or corrupt safetensors file": lambda d: (d / "model.safetensors").write_bytes(
        b"\x10"),
}  # fmt: skip


@pytest.mark.parametrize("problem", REFUSALS)
def test_what_aiayn_cannot_represent_is_refused_in_one_line_before_out_is_written(
    opus, tmp_path, capsys, problem
):
    directory = mm.build_marian(tmp_path / "hf")
    REFUSALS[problem](directory)
    out = tmp_path / "out"
    code = main(["import", "--from", "huggingface", str(directory), str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("aiayn import: error:") and problem.split(" (")[0] in err, err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["hf"]


def test_an_existing_out_is_replaced_only_with_force(opus, tmp_path):
    directory, _ = opus
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    with pytest.raises(ModelImportError, match="exists; --force"):
        import_model(directory, "huggingface", tmp_path / "notes")
    with pytest.raises(Exception, match="not an aiayn checkpoint"):
        import_model(directory, "huggingface", tmp_path / "notes", force=True)
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep"
    ckpt = import_model(directory, "huggingface", tmp_path / "ckpt")
    assert import_model(directory, "huggingface", ckpt, force=True) == ckpt


def test_an_imported_model_serves_shows_its_attention_and_exports_to_ctranslate2(tmp_path):
    """Item 5 of the issue: an OPUS-MT-like import, served (beam 4, the checkpoint's), its
    attention drawn, and exported again to CTranslate2, each agreeing with transformers:
    the same translations, the same attention weights of every layer and head, and
    CTranslate2's log-probabilities (float32: within 1e-4, its greedy translations the same;
    int8: close, as int8 rounding allows)."""
    directory = mm.build_marian(tmp_path / "hf", mm.GENTLE)
    ckpt = import_model(directory, "huggingface", tmp_path / "ckpt")
    texts = TEXTS[:4]
    tokenizer, hf = mm.hf_model(directory)
    translator = Translator.from_checkpoint(ckpt)
    beam = mm.hf_translate(directory, texts, 4, limits(translator, texts))
    with running(ServeConfig(str(ckpt))) as (url, _):
        reply = request(f"{url}/v1/translate", {"text": texts})
    served = [t["text"] for t in reply.body["translations"]]
    assert served == [tokenizer.decode(ids, skip_special_tokens=True) for ids in beam]

    out = tmp_path / "attention.json"
    args = ["attention", "--checkpoint", str(ckpt), "--format", "json", "-o", str(out)]
    reference = mm.SPLITS.test[0][1]  # a given translation: the demo's reference
    assert main([*args, "--target", reference, texts[0]]) == 0
    views = json.loads(out.read_text())["attention"]
    ours = {view["name"]: torch.tensor(view["attn"]) for view in views}
    src, tgt = tokenizer(texts[0]).input_ids, translator.tgt_vocab.encode(reference)
    eager = transformers.MarianMTModel.from_pretrained(directory, attn_implementation="eager")
    start = hf.config.decoder_start_token_id
    with torch.no_grad():
        theirs = eager.eval()(input_ids=torch.tensor([src]), output_attentions=True,
                              decoder_input_ids=torch.tensor([[start, *tgt]]))  # fmt: skip
    for name, weights in [("Encoder", theirs.encoder_attentions),
                          ("Decoder", theirs.decoder_attentions),
                          ("Cross", theirs.cross_attentions)]:  # fmt: skip
        expected = torch.stack([layer[0] for layer in weights])  # (layers, heads, q_len, k_len)
        torch.testing.assert_close(ours[name], expected, atol=1e-5, rtol=0)

    pairs = [(s, translator.tgt_vocab.encode(t)) for s, t in mm.SPLITS.test[:8]]
    hf_scores = torch.cat([mm.hf_logp(directory, tokenizer(s).input_ids, t) for s, t in pairs])
    greedy = mm.hf_translate(directory, texts, 1, limits(translator, texts))
    for quantization in (None, "int8"):
        ct2 = export_checkpoint(ckpt, "ctranslate2", tmp_path / f"ct2-{quantization}",
                                quantization=quantization)  # fmt: skip
        model = ctranslate2.Translator(str(ct2), compute_type=quantization or "float32",
                                       intra_threads=1)  # fmt: skip
        pieces = lambda ids: [translator.tgt_vocab.piece(i) for i in ids]  # noqa: E731
        results = model.score_batch([pieces(translator.src_vocab.encode(s)) for s, _ in pairs],
                                    [pieces(t) for _, t in pairs])  # fmt: skip
        scores = torch.tensor([p for r in results for p in r.log_probs])
        if quantization is None:
            torch.testing.assert_close(scores, hf_scores, atol=1e-4, rtol=0)
            found = model.translate_batch(
                [pieces(translator.src_vocab.encode(s)) for s in texts], beam_size=1,
                min_decoding_length=translator.decode.min_len, suppress_sequences=[["<pad>"]],
                max_decoding_length=max(limits(translator, texts)) - 1,
            )  # fmt: skip
            ids = [[translator.tgt_vocab.pieces.index(p) for p in r.hypotheses[0]] for r in found]
            limited = [i[: n - 1] for i, n in zip(ids, limits(translator, texts))]
            assert limited == greedy
        else:  # measured: about 1% of the log-probabilities' size on this model
            assert torch.corrcoef(torch.stack([scores, hf_scores]))[0, 1] > 0.99
            assert (scores - hf_scores).abs().mean() < 0.03 * hf_scores.abs().mean()
