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
    model = Transformer(tiny_model_config(tie_embeddings=False)).eval()
    step, source = (wide_products.linears(model, f) for f in ("step", "source"))
    assert step[0] is model.out_proj and len(step) == 1 + _linear_count(model.decoder)
    assert len(source) == _linear_count(model.encoder) and source
    assert not {id(m) for m in step} & {id(m) for m in source}


@pytest.mark.skipif(not wide_products.can_pack(), reason="no oneDNN in this PyTorch")
@pytest.mark.parametrize("mkl, onednn", [(2e-3, 1e-3), (1e-3, 2e-3)])
def test_a_library_is_frozen_where_onednns_products_sum_to_less(mkl, onednn):
    """The timings ([MKL, oneDNN] per product, in turns) are summed over every product a
    call makes: ms is each product's best time times the products of its shape."""
    model = Transformer(tiny_model_config()).eval()
    clock = itertools.cycle([mkl, onednn])
    chosen = wide_products.measure(model, lambda product: next(clock))
    for function in ("step", "source"):
        products = len(wide_products.linears(model, function))
        assert chosen[function] == {"frozen": onednn < mkl,
                                    "ms": [round(products * mkl * 1e3, 4),
                                           round(products * onednn * 1e3, 4)]}  # fmt: skip


@pytest.mark.skipif(not wide_products.can_pack(), reason="no oneDNN in this PyTorch")
def test_both_products_are_run_at_the_functions_typical_wide_rows():
    model = Transformer(tiny_model_config()).eval()
    ran = []

    def seconds(product):
        ran.append(product().shape)  # (rows, out)
        return 1e-3

    wide_products.measure(model, seconds)
    rows = {shape[0] for shape in ran}
    assert rows == set(wide_products.ROWS.values())
    vocab = model.config.vocab_size
    assert (wide_products.ROWS["step"], vocab) in ran  # the pre-softmax projection, both ways
    assert ran.count((wide_products.ROWS["step"], vocab)) == 2 * wide_products.ROUNDS


def test_without_onednn_nothing_is_frozen_or_timed(monkeypatch):
    monkeypatch.setattr(wide_products, "can_pack", lambda: False)
    chosen = wide_products.measure(Transformer(tiny_model_config()).eval(), lambda p: 1 / 0)
    assert chosen == {f: {"frozen": False, "ms": [0.0, 0.0]} for f in wide_products.ROWS}
