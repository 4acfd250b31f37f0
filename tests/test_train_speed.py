"""`benchmarks/train_speed.py`: the peers train aiayn's network with aiayn's dropout and loss;
ratios only for the systems that ran; `--systems` refused without aiayn or with a name it
does not know."""

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import train_speed  # noqa: E402

from aiayn.config import ModelConfig  # noqa: E402
from aiayn.model.transformer import Transformer  # noqa: E402
from aiayn.loss import label_smoothed_loss  # noqa: E402

torch.set_num_threads(1)


def test_ratios_cover_the_systems_that_ran():
    every = {"aiayn": 12.0, "aiayn_attention_bias": 9.0, "hf_marian": 6.0,
             "torch_nn_transformer": 4.0}  # fmt: skip
    assert train_speed.ratios(every) == {
        "ratio_aiayn_over_hf_marian": 2.0,
        "ratio_aiayn_over_torch": 3.0,
        "ratio_aiayn_attention_bias_over_hf_marian": 1.5,
        "ratio_aiayn_attention_bias_over_torch": 2.25,
    }
    assert train_speed.ratios({"aiayn": 12.0, "hf_marian": 6.0}) == {
        "ratio_aiayn_over_hf_marian": 2.0
    }
    assert train_speed.ratios({"aiayn": 12.0}) == {}


@pytest.mark.parametrize("systems", ["hf_marian", "aiayn,fairseq"])
def test_systems_without_aiayn_or_unknown_are_refused(systems, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_speed.py", "--systems", systems])
    with pytest.raises(SystemExit) as exit_info:
        train_speed.main()
    assert exit_info.value.code == 2
    assert "--systems: aiayn and any of" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(torch.ops.mkldnn, "_linear_pointwise"), reason="no oneDNN")
def test_flops_of_onednn_products_are_counted_as_for_mm(monkeypatch):
    """aiayn's FLOPs per token (and so its share of the peak) must not drop where its linear
    maps run on oneDNN, an op FlopCounterMode does not know by itself."""
    import aiayn.fast.linear as linear_module

    x, w = torch.randn(2, 8, 32), torch.randn(16, 32)  # 16 rows: a size inference keeps
    counts = []
    for faster in (True, False):
        monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: faster)
        with FlopCounterMode(display=False) as counter:
            linear_module.linear(x, w)
        counts.append(counter.get_total_flops())
    assert counts == [2 * 16 * 32 * 16] * 2


def _copy_into_torch_peer(ours: Transformer, peer: train_speed.TorchPeer) -> None:
    """aiayn's weights (with attention biases) into the `nn.Transformer` peer, layer by layer."""
    pairs = [(peer.embed.weight, ours.tgt_embed.weight)]
    for mine, theirs in zip(ours.encoder, peer.core.encoder.layers):
        norms = (mine.res_attn, mine.res_ffn)
        attentions = [(theirs.self_attn, mine.self_attn.w_qkv, mine.self_attn.w_o)]
        pairs += _layer_pairs(theirs, mine, norms, attentions)
    for mine, theirs in zip(ours.decoder, peer.core.decoder.layers):
        norms = (mine.res_self, mine.res_cross, mine.res_ffn)
        cross_in = torch.cat([mine.cross_attn.w_q.weight, mine.cross_attn.w_kv.weight])
        cross_bias = torch.cat([mine.cross_attn.w_q.bias, mine.cross_attn.w_kv.bias])
        pairs += [(theirs.multihead_attn.in_proj_weight, cross_in),
                  (theirs.multihead_attn.in_proj_bias, cross_bias),
                  (theirs.multihead_attn.out_proj.weight, mine.cross_attn.w_o.weight),
                  (theirs.multihead_attn.out_proj.bias, mine.cross_attn.w_o.bias)]  # fmt: skip
        attentions = [(theirs.self_attn, mine.self_attn.w_qkv, mine.self_attn.w_o)]
        pairs += _layer_pairs(theirs, mine, norms, attentions)
    with torch.no_grad():
        for theirs, mine in pairs:
            theirs.copy_(mine)


def _layer_pairs(theirs, mine, norms, attentions) -> list:
    pairs = [(theirs.linear1.weight, mine.ffn.w_1.weight), (theirs.linear1.bias, mine.ffn.w_1.bias),
             (theirs.linear2.weight, mine.ffn.w_2.weight), (theirs.linear2.bias, mine.ffn.w_2.bias)]
    for attention, w_qkv, w_o in attentions:  # [q; k; v] rows in both
        pairs += [(attention.in_proj_weight, w_qkv.weight), (attention.in_proj_bias, w_qkv.bias),
                  (attention.out_proj.weight, w_o.weight), (attention.out_proj.bias, w_o.bias)]
    for k, residual in enumerate(norms, start=1):
        norm = getattr(theirs, f"norm{k}")
        pairs += [(norm.weight, residual.norm.weight), (norm.bias, residual.norm.bias)]
    return pairs  # fmt: skip


def test_torch_peer_computes_aiayns_network_with_attention_biases():
    """Same function with the same weights: post-LN, LayerNorm eps, no final LayerNorm."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=29, d_model=16, n_heads=4, d_ff=32, n_layers=2,
                         attention_bias=True)  # fmt: skip
    ours, peer = Transformer(config).eval(), train_speed.TorchPeer(16, 4, 32, 2, 29).eval()
    with torch.no_grad():  # LayerNorms away from (1, 0), so that an extra one would show
        for module in ours.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5), module.bias.uniform_(-0.5, 0.5)
    _copy_into_torch_peer(ours, peer)
    src, tgt_in = torch.randint(4, 29, (3, 7)), torch.randint(4, 29, (3, 5))
    src[0, 5:] = tgt_in[1, 3:] = 0  # padding
    assert train_speed.PAD_ID == 0
    real = tgt_in.ne(0)  # what padded positions output is each library's own business
    torch.testing.assert_close(peer(src, tgt_in)[real], ours(src, tgt_in)[real], rtol=1e-4,
                               atol=1e-4)  # fmt: skip


def test_torch_peer_drops_out_only_embeddings_and_sublayer_outputs():
    """With the embedding and residual dropouts at 0, training mode is deterministic: no
    attention or activation dropout is left (nn.Transformer has both by default)."""
    torch.manual_seed(0)
    peer = train_speed.TorchPeer(16, 4, 32, 2, 29).train()
    for module in peer.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    src, tgt_in = torch.randint(4, 29, (3, 7)), torch.randint(4, 29, (3, 5))
    torch.testing.assert_close(peer(src, tgt_in), peer(src, tgt_in), rtol=0, atol=0)


def test_peers_and_marian_use_aiayns_dropout_and_layer_norm():
    marian = train_speed.marian_peer(16, 4, 32, 2, 29)
    assert (marian.config.dropout, marian.config.attention_dropout,
            marian.config.activation_dropout) == (train_speed.P_DROP, 0.0, 0.0)  # fmt: skip
    epsilons = {m.eps for m in marian.modules() if isinstance(m, torch.nn.LayerNorm)}
    assert epsilons == {ModelConfig.ln_eps}


def test_peer_loss_is_aiayns_label_smoothed_loss():
    """1 - eps on the target, eps / (V - 1) elsewhere, padding skipped: the same sum."""
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 29)
    target = torch.randint(1, 29, (3, 5))
    target[0, 3:] = 0

    class Batch:
        tgt_out = target

    ours = label_smoothed_loss(logits.flatten(0, 1), target.flatten(), 0.1, pad_id=0)[0]
    torch.testing.assert_close(train_speed.peer_loss(logits, Batch), ours.sum())


def test_the_bf16_system_trains_in_bfloat16_whatever_the_dtype_asked():
    assert train_speed.system_dtype("aiayn_bf16", torch.float32) == torch.bfloat16
    assert train_speed.system_dtype("aiayn", torch.float32) == torch.float32
    assert train_speed.system_dtype("hf_marian", torch.bfloat16) == torch.bfloat16
    assert "aiayn_bf16" in train_speed.steppers("small", "cpu", None, 64, names=("aiayn_bf16",))
