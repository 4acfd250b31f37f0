"""`fast/wide_products.py`: which float32 product a compiled wide library takes, measured on
the model's own shapes (the compiled libraries that result are tested in test_static_step)."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from aiayn.fast import wide_products
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config


def _linear_count(model: nn.Module) -> int:
    return sum(isinstance(m, nn.Linear) for m in model.modules())


def test_each_function_multiplies_by_its_own_weights():
    """The step's maps are the decoder's and the pre-softmax projection, less the encoder-
    decoder keys' and values', which the source keys compute (`SourceKeys`) with the
    encoder's: between them every map once."""
    model = Transformer(tiny_model_config(tie_embeddings=False)).eval()
    step, source = (wide_products.linears(model, f) for f in ("step", "source"))
    kv = {id(layer.cross_attn.w_kv) for layer in model.decoder}
    assert model.out_proj in step and not kv & {id(m) for m in step}
    assert kv <= {id(m) for m in source}
    assert len(source) == _linear_count(model.encoder) + len(kv)
    assert not {id(m) for m in step} & {id(m) for m in source}
    assert len(step) + len(source) == _linear_count(model)


@pytest.mark.skipif(not wide_products.can_pack(), reason="no oneDNN in this PyTorch")
@pytest.mark.parametrize("mkl, onednn", [(2e-3, 1e-3), (1e-3, 2e-3)])
def test_a_library_is_frozen_where_onednns_products_sum_to_less(mkl, onednn):
    """The timings ([MKL, oneDNN] per product, in turns) are summed over every product a
    call makes: ms is each product's best time times the products of its shape, at each
    row count."""
    model = Transformer(tiny_model_config()).eval()
    clock = itertools.cycle([mkl, onednn])
    chosen = wide_products.measure(model, lambda product: next(clock))
    for function, row_counts in wide_products.ROWS.items():
        products = len(wide_products.linears(model, function))
        pair = [round(products * mkl * 1e3, 4), round(products * onednn * 1e3, 4)]
        assert chosen[function] == {"frozen": onednn < mkl, "ms": {rows: pair for rows in row_counts}}


@pytest.mark.skipif(not wide_products.can_pack(), reason="no oneDNN in this PyTorch")
@pytest.mark.parametrize("onednn_wins_at", [16, 64])
def test_the_typical_wide_call_decides(onednn_wins_at):
    """oneDNN faster at the typical wide call (64 rows for the step) and slower at the fewest
    rows (16): frozen, the whole libraries then timed (`compiled_step._keep_faster_wide`);
    faster at the fewest rows only: not frozen."""
    model = Transformer(tiny_model_config()).eval()
    calls = itertools.count()  # the products are timed in turns: MKL's, then oneDNN's

    def seconds(product):
        if next(calls) % 2 == 0:  # MKL
            return 2e-3
        return 1e-3 if product().size(0) == onednn_wins_at else 3e-3

    chosen = wide_products.measure(model, seconds)
    assert chosen["step"]["frozen"] is (onednn_wins_at == 64)
    assert chosen["source"]["frozen"] is False  # its typical wide call is 256 tokens
    other = 64 if onednn_wins_at == 16 else 16
    assert chosen["step"]["ms"][onednn_wins_at][1] < chosen["step"]["ms"][onednn_wins_at][0]
    assert chosen["step"]["ms"][other][1] > chosen["step"]["ms"][other][0]


@pytest.mark.skipif(not wide_products.can_pack(), reason="no oneDNN in this PyTorch")
def test_both_products_are_run_at_the_functions_row_counts():
    model = Transformer(tiny_model_config()).eval()
    ran = []

    def seconds(product):
        ran.append(product().shape)  # (rows, out)
        return 1e-3

    wide_products.measure(model, seconds)
    assert {shape[0] for shape in ran} == {r for rows in wide_products.ROWS.values() for r in rows}
    vocab = model.config.vocab_size
    for rows in wide_products.ROWS["step"]:  # the pre-softmax projection, both ways, each round
        assert ran.count((rows, vocab)) == 2 * wide_products.ROUNDS


def test_without_onednn_nothing_is_frozen_or_timed(monkeypatch):
    monkeypatch.setattr(wide_products, "can_pack", lambda: False)
    chosen = wide_products.measure(Transformer(tiny_model_config()).eval(), lambda p: 1 / 0)
    assert chosen == {f: {"frozen": False, "ms": {}} for f in wide_products.ROWS}
