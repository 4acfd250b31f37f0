"""Which float32 product a compiled wide library takes: ATen's (MKL's) or oneDNN's packed one.

A wide library multiplies many rows at once (`compiled_step`'s crossover gives it the wide
batches). Built unfrozen, its products are ATen's `addmm`, which is MKL on x86; built frozen
(Inductor's `freezing`), they are oneDNN's inner products over weights packed once. Which is
the faster depends on the CPU: MKL picks its widest kernels only on Intel's processors, and
oneDNN picks its own by instruction set alone. So the choice is measured, per model and
machine, before the build: each function's own weight shapes (`linears`) at its typical wide
row count (`ROWS`), both products, the best of `ROUNDS` rounds taken in turns, summed over
the products a call makes. The build freezes a function's wide library where oneDNN's sum is
the smaller, and keeps the timings in the artifact (`compiled_step.PRODUCTS_FILE`).

Both are float32 products, accumulated in float32 in different orders, so the two builds
differ in the last bits, as the narrow and the wide library already do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.model.transformer import Transformer

# A function's typical wide call: 16 sentences of beam 4 for a decoder step, 16 sentences
# of 16 tokens for the source; each function named as its libraries are (`Compiled`'s
# fields: the search step makes the decoder step's products).
ROWS = {"step": 64, "source": 256}
ROUNDS = 5


def linears(model: Transformer, function: str) -> list[nn.Linear]:
    """The linear maps that `function` ("step" or "source") multiplies by: the decoder's and
    the pre-softmax projection, or the encoder's."""
    if function == "step":
        return [model.out_proj, *(m for m in model.decoder.modules() if isinstance(m, nn.Linear))]
    return [m for m in model.encoder.modules() if isinstance(m, nn.Linear)]


def can_pack() -> bool:
    """Whether this PyTorch has oneDNN's packed float32 products (an x86 build with oneDNN)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def measure(model: Transformer, seconds: Callable[[Callable[[], Tensor]], float]) -> dict:
    """{function: {"frozen": oneDNN's sum is the smaller, "ms": [MKL, oneDNN] per call's
    products}} for each function of `ROWS`; `seconds(product)` times one product (the
    caller's clock). Without oneDNN here (`can_pack`), nothing is frozen and nothing timed."""
    chosen = {}
    for function, rows in ROWS.items():
        shapes = Counter((tuple(m.weight.shape), m.bias is not None) for m in linears(model, function))
        mkl = onednn = 0.0
        for ((out, inp), bias), count in shapes.items() if can_pack() else ():
            x = torch.zeros(rows, inp)  # (rows, in)
            weight, b = torch.zeros(out, inp), torch.zeros(out) if bias else None  # (out, in)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)  # as freezing packs it
            pair = (lambda: F.linear(x, weight, b),  # ATen's: MKL's on x86
                    lambda: torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], ""))  # fmt: skip
            for product in pair:  # the first calls' one-off costs (kernels built)
                product()
            rounds = [[seconds(product) for product in pair] for _ in range(ROUNDS)]
            best = [min(times) for times in zip(*rounds)]  # [MKL, oneDNN]
            mkl, onednn = mkl + count * best[0], onednn + count * best[1]
        chosen[function] = {"frozen": 0 < onednn < mkl,
                            "ms": [round(mkl * 1e3, 4), round(onednn * 1e3, 4)]}  # fmt: skip
    return chosen
