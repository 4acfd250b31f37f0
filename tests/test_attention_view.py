"""attention_view: the weights the model really uses, every layer and head, in bertviz's layout."""

from __future__ import annotations

import html
import json
import math

import pytest
import torch

from aiayn.attention_view import (
    KINDS,
    attention_maps,
    capture_weights,
    explain,
    readability,
    readable_layers,
    to_bertviz,
    to_json,
)
from aiayn.translate import Translator
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    path = save_tiny_checkpoint(tmp_path_factory.mktemp("view") / "ckpt", attention_bias=True)
    return Translator.from_checkpoint(path, beam=2)


def _batch(translator):
    """Two sources of different lengths (the second padded) and two targets."""
    pad = translator.model.config.pad_id
    src = torch.tensor([[5, 9, 7, 11, 3], [8, 6, 3, pad, pad]])  # (batch, src_len)
    tgt_in = torch.tensor([[2, 12, 14, 4], [2, 10, pad, pad]])  # (batch, tgt_len)
    return src, tgt_in


def test_rows_sum_to_one_and_masked_positions_are_exactly_zero(translator):
    src, tgt_in = _batch(translator)
    weights = capture_weights(translator.model, src, tgt_in)
    layers, heads = translator.model.config.n_layers, translator.model.config.n_heads
    assert weights["encoder"].shape == (layers, 2, heads, 5, 5)
    assert weights["decoder"].shape == (layers, 2, heads, 4, 4)
    assert weights["cross"].shape == (layers, 2, heads, 4, 5)
    for w in weights.values():
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    assert weights["encoder"][:, 1, :, :, 3:].eq(0).all()  # the padded sentence's padding
    assert weights["cross"][:, 1, :, :, 3:].eq(0).all()
    above = torch.ones(4, 4, dtype=torch.bool).triu(1)  # later target positions
    assert weights["decoder"][..., above].eq(0).all()
    assert weights["decoder"][..., ~above].gt(0).all()


def test_the_weights_give_back_each_modules_own_output(translator):
    """out = W^O concat_i(weights_i V_i): the recomputed outputs equal the module's outputs,
    so the weights are the ones the model uses (with biases, which the fixture turns on)."""
    model = translator.model
    src, tgt_in = _batch(translator)
    outputs, inputs = {}, {}

    def keep(module, args, kwargs, out):
        outputs[id(module)], inputs[id(module)] = out, (args, kwargs)

    modules = [*(l.self_attn for l in model.encoder), *(l.self_attn for l in model.decoder),
               *(l.cross_attn for l in model.decoder)]  # fmt: skip
    handles = [m.register_forward_hook(keep, with_kwargs=True) for m in modules]
    with torch.no_grad():
        model(src, tgt_in)
    for h in handles:
        h.remove()
    weights = capture_weights(model, src, tgt_in)
    by_kind = {"encoder": [l.self_attn for l in model.encoder],
               "decoder": [l.self_attn for l in model.decoder],
               "cross": [l.cross_attn for l in model.decoder]}  # fmt: skip
    for kind, ms in by_kind.items():
        for layer, m in enumerate(ms):
            args, kwargs = inputs[id(m)]
            x = args[0]
            with torch.no_grad():
                if m.cross:
                    memory = args[1] if len(args) > 1 else kwargs["memory"]
                    _, v = m.project_kv(memory)  # (batch, heads, src_len, d_v)
                else:
                    h_dk = m.n_heads * m.d_k
                    v = m.w_qkv(x)[..., 2 * h_dk :].unflatten(-1, (m.n_heads, m.d_v))
                    v = v.transpose(1, 2)  # (batch, heads, len, d_v)
                heads = weights[kind][layer] @ v  # (batch, heads, q_len, d_v)
                out = m.w_o(heads.transpose(1, 2).flatten(2))  # (batch, q_len, d_model)
            torch.testing.assert_close(out, outputs[id(m)], rtol=1e-5, atol=1e-5)


def test_no_hook_is_left_behind(translator):
    src, tgt_in = _batch(translator)
    capture_weights(translator.model, src, tgt_in)
    assert all(not m._forward_pre_hooks for m in translator.model.modules())


def test_explain_uses_the_models_own_translation_and_names_the_pieces(translator):
    text = "the cat sat on a mat"
    maps = explain(translator, text)
    (best, *_), *_ = translator.hypotheses([text])  # the search's own tokens
    assert maps.target == ["<s>", *map(translator.tgt_vocab.piece, best.tokens)]
    assert translator.tgt_vocab.decode(best.tokens) == translator.translate([text])[0]
    assert translator.hypotheses(["  ", text])[0] == []  # a blank text is not translated
    assert maps.source[-1] == "</s>" and "".join(maps.source[:-1]).replace("▁", " ").strip() == text
    given = explain(translator, text, target="der Hund")
    assert "".join(given.target[1:]).replace("▁", " ").strip() == "der Hund"
    assert given.cross.shape[-2:] == (len(given.target), len(given.source))


def test_bertviz_layout_and_the_pages_json_hold_the_same_weights(translator):
    maps = explain(translator, "die Katze", target="the cat")
    viz = json.loads(json.dumps(to_bertviz(maps)))
    assert [a["name"] for a in viz["attention"]] == ["Encoder", "Decoder", "Cross"]
    cross = viz["attention"][2]
    assert cross["left_text"] == maps.target and cross["right_text"] == maps.source
    torch.testing.assert_close(torch.tensor(cross["attn"]), maps.cross)
    page = to_json(maps, digits=4)
    for kind in KINDS:
        torch.testing.assert_close(torch.tensor(page[kind]), maps.kind(kind), atol=1e-4, rtol=0)
    weights = [w for layer in page["cross"] for head in layer for row in head for w in row]
    assert max(len(json.dumps(w)) for w in weights) <= len("0.1234")  # no float32 tails
    assert viz["include_layers"] == list(range(translator.model.config.n_layers))


def test_attention_maps_of_ids(translator):
    vocab = translator.src_vocab
    maps = attention_maps(translator.model, vocab, vocab, [7, 8, vocab.eos_id], [9])
    assert maps.source[-1] == "</s>" and maps.target == ["<s>", vocab.piece(9)]
    assert maps.encoder.shape[-2:] == (3, 3) and maps.decoder.shape[-2:] == (2, 2)


def test_the_page_embeds_any_sentence_as_data_never_as_markup(translator):
    from aiayn.attention_plot import render_html

    text = 'a {{TITLE}} </script><b>"\\ {{JS}}'
    maps = explain(translator, "the cat", target="der Hund")
    page = render_html(maps, text, "der Hund")
    data = page.split("const DATA = ", 1)[1].split(";</script>", 1)[0]
    assert json.loads(data)["source_text"] == text and "</script><b>" not in data
    assert f"<title>aiayn attention: {html.escape(text)}</title>" in page
    assert page.count("<script>") == 3 and page.count("{{") == 4  # the text's own, twice


def test_readability_is_the_information_a_layer_gives_about_which_key_a_query_reads():
    n = 5
    uniform = torch.full((n, n), 1 / n)
    sink = torch.zeros(n, n)
    sink[:, -1] = 1  # every query on the last key (as heads often do on </s>)
    aligned = torch.eye(n)[torch.randperm(n)]  # each query on a key of its own
    blurred = 0.8 * aligned + 0.2 * uniform
    # (layers, heads, q_len, k_len): each layer's two heads are the same kind of map
    weights = torch.stack([torch.stack([m, m[:, torch.randperm(n)]])
                           for m in (uniform, sink, blurred, aligned)])  # fmt: skip
    score = readability(weights)
    torch.testing.assert_close(score[:2], torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(score[3], torch.tensor(math.log(n), dtype=torch.float64))
    assert 0 < score[2] < score[3]
    assert int(score.argmax()) == 3
    heads_swapped = readability(weights.flip(1))  # the order of heads does not matter
    torch.testing.assert_close(heads_swapped, score)


def test_the_pages_json_names_each_kinds_most_readable_layer(translator):
    maps = explain(translator, "the cat sat on a mat")
    layers = readable_layers(maps)
    for kind in KINDS:
        scores = readability(maps.kind(kind))
        assert scores[layers[kind]] == scores.max()  # the best of the model's layers
    tgt_len, src_len = maps.cross.shape[-2:]
    sharpened = maps.cross.clone()  # layer 0: each target piece on a source piece of its own
    sharpened[0] = torch.eye(src_len)[torch.arange(tgt_len) % src_len]
    sharpened[1] = 1 / src_len  # layer 1: uniform
    maps.cross = sharpened
    assert readable_layers(maps)["cross"] == 0
    assert to_json(maps)["readable_layer"] == readable_layers(maps)
