import dataclasses
import json
import math

import pytest
import torch

from aiayn.config import preset
from aiayn.model.layers import (
    PositionalEncoding,
    PositionwiseFeedForward,
    Residual,
    sinusoid_table,
)
from aiayn.model.transformer import Transformer, count_parameters, parameter_count
from conftest import tiny_model_config


def _eval_model(**overrides) -> Transformer:
    return Transformer(tiny_model_config(**overrides)).double().eval()


@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_decoder_is_causal(norm):
    model = _eval_model(norm=norm)
    src = torch.randint(4, 23, (2, 7))
    tgt = torch.randint(4, 23, (2, 6))
    base = model(src, tgt)
    for j in range(tgt.size(1)):
        changed = tgt.clone()
        changed[:, j] = (changed[:, j] + 1 - 4) % 19 + 4
        out = model(src, changed)
        torch.testing.assert_close(out[:, :j], base[:, :j], atol=1e-12, rtol=0)
        assert not torch.allclose(out[:, j:], base[:, j:])  # the change is seen from j on


@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_source_padding_changes_nothing(norm):
    model = _eval_model(norm=norm)
    src = torch.randint(4, 23, (1, 5))
    tgt = torch.randint(4, 23, (1, 4))
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model.encode(padded)[:, :5], model.encode(src), atol=1e-12, rtol=0)
    torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-12, rtol=0)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_residual_dropout_drops_the_sub_layer_output_never_the_input(pre_norm):
    # Sec. 5.4: dropout "to the output of each sub-layer, before it is added to the
    # sub-layer input". With a sub-layer that outputs zeros, nothing may change x.
    torch.manual_seed(0)
    residual = Residual(8, p_drop=0.5, pre_norm=pre_norm, eps=1e-6).train()
    x = torch.randn(4, 5, 8) + 2.0  # no zeros
    out = residual(x, torch.zeros_like)
    torch.testing.assert_close(out, x if pre_norm else residual.norm(x))
    if pre_norm:  # and the sub-layer's ones are each dropped (0) or scaled to 2
        added = residual(x, torch.ones_like) - x
        dropped, scaled = added.abs() < 1e-5, (added - 2.0).abs() < 1e-5
        assert (dropped | scaled).all() and dropped.any() and scaled.any()


def test_an_empty_batch_gives_empty_logits_and_gradients():
    model = Transformer(tiny_model_config(p_drop=0.1)).train()
    logits = model(torch.full((0, 5), 7), torch.full((0, 6), 7))
    assert logits.shape == (0, 6, 23)
    logits.sum().backward()
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_sinusoids_match_the_formula_at_hand_computed_positions():
    table = sinusoid_table(60, 8)
    # PE(pos, 2i) = sin(pos / 10000^(2i/8)), PE(pos, 2i+1) = cos(pos / 10000^(2i/8))
    assert table[0].tolist() == [0.0, 1.0] * 4
    assert table[1, 0] == pytest.approx(math.sin(1.0))
    assert table[1, 1] == pytest.approx(math.cos(1.0))
    assert table[3, 2] == pytest.approx(math.sin(3 / 10.0))  # 10000^(2/8) = 10
    assert table[3, 3] == pytest.approx(math.cos(3 / 10.0))
    assert table[50, 6] == pytest.approx(math.sin(50 / 1000.0))  # 10000^(6/8) = 1000
    assert table[50, 7] == pytest.approx(math.cos(50 / 1000.0))


def test_sinusoids_extend_past_max_len_and_learned_positions_refuse():
    sinus = PositionalEncoding(8, max_len=4, learned=False)
    out = sinus(torch.zeros(1, 10, 8))
    torch.testing.assert_close(out[0], sinusoid_table(10, 8).float())
    learned = PositionalEncoding(8, max_len=4, learned=True)
    with pytest.raises(ValueError, match="max_len=4"):
        learned(torch.zeros(1, 5, 8))


def test_row_e_preset_uses_learned_positions_a_table_per_stack():
    # As in ConvS2S [9], where the paper took learned positions from, and tensor2tensor.
    config = dataclasses.replace(preset("E-learned-pe").model, vocab_size=50, n_layers=1,
                                 d_model=16, d_ff=32, n_heads=2, max_len=20)  # fmt: skip
    model = Transformer(config).eval()
    assert model.positional.learned and model.tgt_positional is not model.positional
    names = {name for name, _ in model.named_parameters()}
    assert {"positional.weight", "tgt_positional.weight"} <= names
    assert not {n for n, _ in Transformer(tiny_model_config()).named_parameters()
                if "positional" in n}  # fmt: skip
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])
    memory, logits = model.encode(src), model(src, tgt)
    with torch.no_grad():
        model.tgt_positional.weight.add_(1.0)  # the decoder's table only
    torch.testing.assert_close(model.encode(src), memory)
    assert not torch.allclose(model(src, tgt), logits)


def test_a_row_e_checkpoint_of_one_shared_table_loads_into_both(tmp_path):
    from safetensors.torch import load_file, save_file

    from aiayn.checkpoint import META, WEIGHTS, load_checkpoint, save_checkpoint
    from aiayn.config import Config
    from tiny_checkpoint import tiny_vocab

    vocab = tiny_vocab()
    config = Config(model=tiny_model_config(vocab_size=vocab.size, positional="learned"))
    path = save_checkpoint(tmp_path / "e", Transformer(config.model), config, vocab, vocab)
    weights = load_file(path / WEIGHTS)
    del weights["tgt_positional.weight"]  # as saved before the decoder had its own
    save_file(weights, path / WEIGHTS, metadata={"format": "aiayn-checkpoint"})
    meta = json.loads((path / META).read_text())
    del meta["weights_sha256"]  # nor did it record a digest then
    (path / META).write_text(json.dumps(meta))
    model = load_checkpoint(path).model
    assert torch.equal(model.tgt_positional.weight, weights["positional.weight"])
    assert torch.equal(model.positional.weight, weights["positional.weight"])


def test_embeddings_are_scaled_and_tied():
    model = Transformer(tiny_model_config())
    assert model.src_embed is model.tgt_embed  # shared vocabulary: one matrix (sec. 3.4)
    tokens = torch.tensor([[5]])
    torch.testing.assert_close(model.tgt_embed(tokens)[0, 0], model.tgt_embed.weight[5] * 4.0)
    hidden = torch.randn(1, 1, 16)
    torch.testing.assert_close(model.project(hidden), hidden @ model.tgt_embed.weight.t())
    untied = Transformer(tiny_model_config(src_vocab_size=31, tie_embeddings=False))
    assert untied.src_embed is not untied.tgt_embed
    assert untied.src_embed.weight.shape == (31, 16)
    extra = 31 * 16 + 23 * 16
    assert count_parameters(untied) == count_parameters(Transformer(tiny_model_config())) + extra


def _assert_xavier_uniform(weight: torch.Tensor, name: str) -> None:
    """Drawn from U(-a, a), a = sqrt(6 / (fan_in + fan_out)) of this (out, in) matrix."""
    bound = math.sqrt(6.0 / sum(weight.shape))
    assert weight.abs().max() <= bound, name
    # U(-a, a) has std a / sqrt(3); 16k draws put the estimate within ~1% of it.
    assert weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05), name


def test_initialisation_is_xavier_per_projection_and_normal_for_embeddings():
    """The choices of `Transformer.reset_parameters`; each attention matrix W^Q, W^K, W^V
    on its own, also where one fused weight stacks them (`MultiHeadAttention`)."""
    torch.manual_seed(0)
    config = tiny_model_config(d_model=128, n_heads=4, d_ff=256, vocab_size=600,
                               attention_bias=True)  # fmt: skip
    model = Transformer(config)
    d = config.d_model
    for layer in [*model.encoder, *model.decoder]:
        for name, module in layer.named_modules():
            if hasattr(module, "w_qkv"):
                blocks = module.w_qkv.weight.split(d, dim=0)  # W^Q, W^K, W^V
            elif hasattr(module, "w_kv"):
                blocks = (module.w_q.weight, *module.w_kv.weight.split(d, dim=0))
            else:
                continue
            for i, w in enumerate([*blocks, module.w_o.weight]):
                assert w.shape == (d, d)
                _assert_xavier_uniform(w, f"{name} matrix {i}")
        ffn = layer.ffn
        _assert_xavier_uniform(ffn.w_1.weight, "w_1")
        _assert_xavier_uniform(ffn.w_2.weight, "w_2")
    biases = [m.bias for m in model.modules() if isinstance(m, torch.nn.Linear) and m.bias is not None]
    assert biases and all(torch.equal(b, torch.zeros_like(b)) for b in biases)
    # normal(0, d_model^-0.5): unit-variance entries once scaled by sqrt(d_model) (sec. 3.4)
    assert model.src_embed.weight.std().item() == pytest.approx(d**-0.5, rel=0.05)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and all(torch.equal(n.weight, torch.ones_like(n.weight)) for n in norms)


def test_post_ln_has_no_final_layer_norm_and_pre_ln_has_one():
    post = Transformer(tiny_model_config())
    pre = Transformer(tiny_model_config(norm="pre"))
    assert isinstance(post.encoder_norm, torch.nn.Identity)
    assert isinstance(pre.decoder_norm, torch.nn.LayerNorm)


# Table 3's parameter counts (millions). The paper does not give its vocabulary size here;
# the counts imply about 40k shared entries, and 40,000 puts every row within 2.5%.
PARAM_COUNT_VOCAB = 40000
PAPER_PARAMS_M = {
    "base": 65, "B-dk16": 58, "B-dk32": 60, "C-N2": 36, "C-N4": 50, "C-N8": 80, "C-d256": 28,
    "C-d1024": 168, "C-ff1024": 53, "C-ff4096": 90, "big": 213,
}  # fmt: skip


@pytest.mark.parametrize("name", PAPER_PARAMS_M)
def test_parameter_counts_match_table3(name):
    config = dataclasses.replace(preset(name).model, vocab_size=PARAM_COUNT_VOCAB)
    params = parameter_count(config)
    assert params / 1e6 == pytest.approx(PAPER_PARAMS_M[name], rel=0.025)


def test_parameter_count_equals_a_real_model():
    config = tiny_model_config()
    assert parameter_count(config) == count_parameters(Transformer(config))


def test_tiny_model_overfits_twenty_pairs_and_every_parameter_learns():
    """A budget of updates, not of seconds (a busy machine takes longer for the same
    updates): under 0.01 within 400 (this seed: 156)."""
    torch.manual_seed(1)
    config = tiny_model_config(d_model=32, d_ff=64, vocab_size=40)
    model = Transformer(config)
    src = torch.randint(4, 40, (20, 8))
    tgt = torch.randint(4, 40, (20, 8))
    tgt_in = torch.cat([torch.full((20, 1), 2), tgt[:, :-1]], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(400):
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt.flatten())
        optimizer.zero_grad()
        loss.backward()
        if step == 0:
            dead = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
            assert dead == []
        optimizer.step()
        if loss.item() < 0.01:
            break
    assert loss.item() < 0.01
