"""Which float32 product a compiled wide library takes: ATen's (MKL's) or oneDNN's packed one.

A wide library multiplies many rows at once (`compiled_step`'s crossover gives it the wide
batches). Built unfrozen, its products are ATen's `addmm`, which is MKL on x86; built frozen
(Inductor's `freezing`), they are oneDNN's inner products over weights packed once. Which is
the faster depends on the CPU: MKL picks its widest kernels only on Intel's processors, and
oneDNN picks its own by instruction set alone. So the choice is measured, per model and
machine, before the build: each function's own weight shapes (`linears`) at the fewest rows
its wide library is likely to serve and at a typical wide call (`ROWS`), both products, the
best of `ROUNDS` rounds taken in turns, summed over the products a call makes. The build
freezes a function's wide libraries where oneDNN's sum is the smaller at the typical wide
call, and keeps the timings in the artifact (`compiled_step.PRODUCTS_FILE`). This is a
first sieve: a frozen library is then timed against an unfrozen build of the same
function, beside the narrow library, and kept only where the search is the faster with it
(`compiled_step._keep_faster_wide`). So the sieve does not ask oneDNN to win at the fewest
rows: its fixed cost per call loses there on small weights, but the narrow library may
serve those rows, and the whole libraries' timing says. (On an AVX-512 CPU where MKL runs
its AVX2 kernels, a small model's products were MKL's the faster at 16 rows and oneDNN's
at 64, and its frozen library made the search faster.)

Both are float32 products, accumulated in float32 in different orders, so the two builds
differ in the last bits, as the narrow and the wide library already do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.fast.static_step import _step_linears
from aiayn.model.transformer import Transformer

# A function's fewest rows in a wide call, and a typical one: 4 and 16 sentences of beam 4
# for a decoder step, 1 and 16 sentences of 16 tokens for the source; each function named as
# its libraries are (`Compiled`'s fields: the search step makes the decoder step's products).
ROWS = {"step": (16, 64), "source": (16, 256)}
ROUNDS = 5


def linears(model: Transformer, function: str) -> list[nn.Linear]:
    """The linear maps that `function` ("step" or "source") multiplies by: a decoder step's
    (`static_step._step_linears`: each layer's but the encoder-decoder keys' and values', and
    the pre-softmax projection), or the source keys' (`SourceKeys`: the encoder's, then each
    decoder layer's encoder-decoder keys and values)."""
    if function == "step":
        return [model.get_submodule(path) for path in _step_linears(model)]
    encoder = [m for m in model.encoder.modules() if isinstance(m, nn.Linear)]
    return [*encoder, *(layer.cross_attn.w_kv for layer in model.decoder)]


def can_pack() -> bool:
    """Whether this PyTorch has oneDNN's packed float32 products (an x86 build with oneDNN)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def measure(model: Transformer, seconds: Callable[[Callable[[], Tensor]], float]) -> dict:
    """{function: {"frozen": oneDNN's sum is the smaller at the typical wide call, "ms": {rows:
    [MKL, oneDNN]} per call's products}} for each function of `ROWS`; `seconds(product)`
    times one product (the caller's clock). Without oneDNN here (`can_pack`), nothing is
    frozen and nothing timed."""
    chosen = {}
    for function, row_counts in ROWS.items():
        shapes = Counter((tuple(m.weight.shape), m.bias is not None) for m in linears(model, function))
        sums = {rows: _sums(shapes, rows, seconds) for rows in row_counts} if can_pack() else {}
        chosen[function] = {"frozen": bool(sums) and sums[row_counts[-1]][1] < sums[row_counts[-1]][0],
                            "ms": {rows: [round(t * 1e3, 4) for t in pair] for rows, pair in sums.items()}}  # fmt: skip
    return chosen


def _sums(shapes: Counter, rows: int, seconds: Callable) -> tuple[float, float]:
    """Seconds of MKL's and of oneDNN's products of `rows` rows by weights of `shapes`
    {((out, in), bias): count}, summed over the counts."""
    mkl = onednn = 0.0
    for ((out, inp), bias), count in shapes.items():
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
    return mkl, onednn
