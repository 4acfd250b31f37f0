"""`aiayn.analysis.flops`: the products counted from the config are those PyTorch's FLOP
counter sees in a real training step (loss forward and backward, Adam's step), padding
included; `aiayn info --flops` and a run's summary give the count.

FlopCounterMode counts matrix products only (mm, addmm, bmm and the fused attention
kernels), so the comparison is of the products alone: the element-wise work, the loss's
softmax and the optimizer, which our count estimates beside them, are invisible to it. It
does not see every product either: PyTorch's CPU kernel for eq. 1
(`_scaled_dot_product_flash_attention_for_cpu`) and the fast path's oneDNN products are
calls it has no formula for, so the step runs the core with attention's math backend."""

import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from aiayn.analysis.flops import forward_matmul_flops, training_flops, training_flops_per_token
from aiayn.checkpoint import Checkpoint
from aiayn.cli import main
from aiayn.config import Config, ModelConfig, TrainConfig, preset
from aiayn.model.transformer import Transformer
from aiayn.loss import RealTokenLoss
from aiayn.train.monitor import format_summary
from aiayn.train.schedule import make_optimizer
from aiayn.train.trainer import train
from aiayn.train.validate import real_positions
from tiny_run import one_thread, prepared_data, tiny_config  # noqa: F401 (autouse fixture)


@pytest.mark.parametrize("model", [
    ModelConfig(vocab_size=50, d_model=16, n_heads=4, d_ff=24, n_layers=2, p_drop=0.1),
    ModelConfig(vocab_size=40, d_model=12, n_heads=2, d_k=5, d_v=7, d_ff=20, n_layers=1,
                p_drop=0.0, positional="learned", tie_embeddings=False, max_len=32),
])  # fmt: skip
def test_the_products_are_those_pytorch_counts_in_a_training_step(model):
    net = Transformer(model)
    loss = RealTokenLoss(net, eps=0.1)
    optimizer = make_optimizer(list(net.parameters()), TrainConfig())
    src = torch.tensor([[5, 6, 7, 8, 9, 3], [5, 6, 3, 0, 0, 0]])  # (2, 6), padded
    tgt_in = torch.tensor([[2, 10, 11, 12], [2, 13, 0, 0]])  # (2, 4)
    tgt_out = torch.tensor([[10, 11, 12, 3], [13, 3, 0, 0]])  # 6 real target tokens
    positions, target = real_positions(tgt_out, 0, torch.device("cpu"))
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        smoothed, _ = loss(src, tgt_in, positions, target)
        smoothed.backward()
        optimizer.step()
    expected = 3 * forward_matmul_flops(model, batch=2, src_len=6, tgt_len=4, tgt_tokens=6)
    assert counter.get_total_flops() == expected


def test_a_token_costs_six_flops_per_weight_it_meets_plus_attention():
    # The rule of thumb (Kaplan et al. 2020): training is ~6 FLOPs per weight a token meets.
    # Here every token meets its side's layers; the target ones the output projection too.
    config = preset("base")
    count = training_flops_per_token(config, length=1.0)  # attention over one position
    m = config.model
    layer = 4 * m.d_model**2 + 2 * m.d_model * m.d_ff  # an encoder layer's weights
    weights = m.n_layers * (layer + layer + 4 * m.d_model**2) + m.d_model * m.vocab_size
    scores = 3 * m.n_layers * 2 * m.n_heads * (m.key_dim + m.value_dim)  # 3 attentions, 1 key
    assert count.matmul_forward + count.matmul_backward == 6 * weights + 3 * scores
    assert count.total > count.matmul_forward + count.matmul_backward  # the rest is counted


def test_the_optimizer_share_falls_with_the_tokens_of_an_update():
    small, large = (Config(train=TrainConfig(update_tokens=n)) for n in (1000, 4000))
    a, b = training_flops_per_token(small), training_flops_per_token(large)
    assert a.optimizer == pytest.approx(4 * b.optimizer)
    assert (a.matmul_forward, a.loss, a.elementwise) == (b.matmul_forward, b.loss, b.elementwise)


def test_info_flops_counts_the_run_of_the_preset(capsys):
    assert main(["info", "base", "--flops", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    per_token = training_flops_per_token(preset("base")).total
    assert info["flops_per_target_token"] == per_token
    assert info["flops_run_target_tokens"] == 100000 * 25000  # sec. 5.2, 5.1
    assert info["flops_run"] == pytest.approx(per_token * 2.5e9)
    parts = [v for k, v in info.items() if k.startswith("flops_per_target_token_")]
    assert sum(parts) == pytest.approx(per_token) and len(parts) == 5
    assert main(["info", "big", "--flops"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["flops_run_target_tokens", "7,500,000,000"] for line in lines)
    keys = [line.split()[0] for line in lines]
    assert keys.index("params") < keys.index("flops_per_target_token")  # the model's first


def test_a_runs_summary_gives_its_training_flops(tmp_path):
    config = tiny_config(prepared_data(tmp_path / "data"), tmp_path / "run", "train.max_steps=3")
    result = train(config)
    saved = Checkpoint(result.final_checkpoint)
    tokens = saved.meta["tokens_seen"]
    used = saved.config  # the vocabulary's size taken from the data
    assert tokens > 0 and result.train_flops == pytest.approx(training_flops(used, tokens))
    assert f"training FLOPs:  {result.train_flops:.3g}" in format_summary(result)


def test_the_experiments_page_gives_the_count_of_each_preset():
    from pathlib import Path

    from aiayn.info import flops_info

    doc = (Path(__file__).resolve().parents[1] / "docs" / "experiments.md").read_text()
    for name in ("base", "big"):
        info = flops_info(preset(name))
        row = next(line for line in doc.splitlines()  # the FLOPs table's, not Table 3's
                   if line.startswith(f"| {name} | ") and "target tokens" in line)
        cells = [c.strip() for c in row.split("|")[1:-1]]
        shown = [float(c.replace("·10^", "e")) for c in cells[2:5]]
        assert shown[0] == float(f"{info['flops_per_target_token']:.2g}")
        assert shown[1] == float(f"{info['flops_run']:.2g}")
        assert float(cells[5]) == round(info["flops_run"] / shown[2], 2)
