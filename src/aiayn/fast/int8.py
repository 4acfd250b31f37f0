"""Int8 dynamic quantization for CPU inference (not in the paper; a deployment option).

    model = quantize_int8(model)    # float32 CPU model, eval mode; changed in place

Every linear map (attention projections, feed-forward, and the pre-softmax projection of
sec. 3.4, a large share of each decoding step) gets int8 weights with one scale per output
row, and its input is quantized per call ("dynamic", one scale per tensor), as
CTranslate2's int8 does. Where the projection is tied to the embedding, the float
embedding stays for the lookups beside the projection's int8 copy. Embedding lookups,
LayerNorm, softmax and attention stay float32; where the CPU multiplies bfloat16 natively
the search keeps the encoder-decoder keys and values in bfloat16 (`cross_store_dtype`).

The compiled decoder step (`compiled_step`) takes int8 models too: traced, each product
is written in PyTorch's decomposed quantization ops, which Inductor compiles into oneDNN's
int8 products (`Int8Linear`). (A weight-only int8 step, the same int8 weights converted
inside Inductor's float products, was built before and measured slower than eager int8.)

The weights are quantized as `torch.ao.quantization.quantize_dynamic` with PyTorch's
per-channel dynamic qconfig would (a test holds them equal). `torch.ao.quantization` is
deprecated in favour of torchao (not a dependency) but works; its warnings are silenced.
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from aiayn.device import check_int8, native_bf16
from aiayn.fast.linear import padded_to_bucket
from aiayn.model.transformer import Transformer


def quantize_int8(model: Transformer) -> Transformer:
    """Int8 weights for every linear map, the output projection included; -> `model`.

    CPU and float32 only (the int8 kernels are CPU kernels and quantize from float32).
    Inference only: the quantized model cannot be trained or saved as a checkpoint.
    """
    weight = model.output_weight
    check_int8(weight.device, weight.dtype)
    model.eval()
    # The engine in use when the weights are packed is the one their products run on; the
    # process-wide setting is put back at once.
    previous, engine = torch.backends.quantized.engine, int8_engine()
    torch.backends.quantized.engine = engine
    try:
        reduce_range = seven_bits_more_exact()
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.Linear):  # the tied pre-softmax projection included
                model.set_submodule(name, Int8Linear.pack(module.weight, module.bias, reduce_range))
    finally:
        torch.backends.quantized.engine = previous
    return model


class Int8Linear(nn.Module):
    """x W^T + b with W packed in int8 and x quantized per call; (..., in) -> (..., out).

    PyTorch's dynamic `Linear` always quantizes its input to 7 bits (`reduce_range=True`),
    because fbgemm's AVX2 kernels add pairs of u8 x s8 products in 16 bits, which 8-bit
    inputs can overflow. oneDNN's kernels on AMX tiles and on AVX-512 VNNI add the products
    straight into 32 bits, so there the input keeps all 8 bits, which halves each product's
    error and brings int8 translation closer to float32 (`benchmarks/translate_speed.py`
    reports the agreement). Elsewhere
    7 bits stay.

    Traced for a compiler (`compiled_step`), the product is written as what it computes:
    the input quantized per tensor to `input_max` + 1 levels, and the int8 weights with their
    row scales, dequantized, then a float product (`graph_form`). Inductor's freezing
    pass turns exactly this pattern into oneDNN's int8 product with the weights packed once,
    so the compiled step multiplies in int8 as this module does eagerly: the same levels,
    the same whole-number sums, where oneDNN adds them exactly (`sums_exact_in_onednn`).
    Its rows are padded to `linear.bucket_rows` sizes, as
    the eager float32 oneDNN products' are: oneDNN keeps a kernel per row count, and a
    server whose compiled step met every count kept growing.
    """

    def __init__(self, packed, reduce_range: bool) -> None:
        super().__init__()
        # Weights and bias packed by `torch.ops.quantized.linear_prepack`; held in a tuple so
        # that `torch.export`, which cannot trace this packed object, does not look at it.
        self._packed = (packed,)
        self.reduce_range = reduce_range
        # The input's levels, 0 .. input_max, in the eager products and the traced form alike.
        self.input_max = 127 if reduce_range else 255
        weight, bias = torch.ops.quantized.linear_unpack(packed)  # the packed values, unpacked
        self.register_buffer("weight_int8", weight.int_repr())  # (out, in) int8
        self.register_buffer("weight_scale", weight.q_per_channel_scales().float())  # (out,)
        self.register_buffer("weight_zero", torch.zeros(weight.size(0), dtype=torch.long))  # (out,)
        self.register_buffer("bias", bias)  # (out,) float32, or None

    @classmethod
    def pack(cls, weight: torch.Tensor, bias: torch.Tensor | None, reduce_range: bool) -> Int8Linear:
        """weight (out, in) and bias (out,) or None, packed for the current quantized engine.

        Symmetric int8 with one scale per output row, max |w| of the row / 127.5: PyTorch's
        per-channel dynamic qconfig, whose observer computes it.
        """
        from torch.ao.quantization import per_channel_dynamic_qconfig

        weight = weight.detach().float()  # (out, in)
        b = None if bias is None else bias.detach().float()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*deprecated", category=DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*deprecated", category=UserWarning)
            observer = per_channel_dynamic_qconfig.weight()
            observer(weight)
            scale, zero_point = observer.calculate_qparams()  # (out,) each; zero points 0
            q = torch.quantize_per_channel(weight, scale.double(), zero_point.long(), 0, torch.qint8)
            return cls(torch.ops.quantized.linear_prepack(q, b), reduce_range)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return self.graph_form(x)
        return torch.ops.quantized.linear_dynamic(x, self.packed, reduce_range=self.reduce_range)

    @property
    def sums_exact_in_onednn(self) -> bool:
        """Whether oneDNN's int8 products (a compiled step's) add this module's u8 x s8
        products exactly: always for 7-bit inputs, whose pairs (at most 2 x 127 x 128)
        fit the 16-bit sums of kernels without VNNI (AVX2); for 8-bit ones only with
        32-bit sums (`onednn_sums_exact`). Exact sums of the same levels are the same
        numbers in every engine: the compiled step then finds the eager hypotheses."""
        return self.input_max == 127 or onednn_sums_exact()

    @property
    def packed(self):
        """The packed weights and bias, as `linear_dynamic` takes them."""
        return self._packed[0]

    def graph_form(self, x: torch.Tensor) -> torch.Tensor:
        """The same product as PyTorch's decomposed quantization ops (see the class doc):
        x (..., in) -> (..., out), one input scale over all of x as `linear_dynamic` takes."""
        from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa: F401

        rows = x.reshape(-1, x.size(-1))  # (tokens, in)
        n = rows.size(0)
        # zero rows up to a bucket's size (`linear.bucket_rows`): oneDNN builds and keeps a
        # kernel per row count. Zeros leave the input's scale as it was (its range holds 0).
        quantized, scale, zero = self._quantized_input(padded_to_bucket(rows))  # (padded, in)
        rows = torch.ops.quantized_decomposed.dequantize_per_tensor.tensor(
            quantized, scale, zero, 0, self.input_max, torch.uint8)  # fmt: skip
        return F.linear(rows, self.dequantized(), self.bias)[:n].view(*x.shape[:-1], -1)  # (..., out)

    def input_levels(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., in) quantized as `linear_dynamic` quantizes its input -> (the levels less
        the zero point, whole numbers in float32; their scale, (1,))."""
        quantized, scale, zero = self._quantized_input(x)
        return quantized.float() - zero, scale.float()

    def _quantized_input(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (..., in) quantized per tensor to `input_max` + 1 levels, in PyTorch's decomposed
        quantization ops -> (uint8 levels, scale, zero point)."""
        from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa: F401

        ops, levels = torch.ops.quantized_decomposed, (0, self.input_max, torch.uint8)
        scale, zero = ops.choose_qparams.tensor(x, *levels[:2], torch.finfo(torch.float32).eps, levels[2])
        return ops.quantize_per_tensor.tensor(x, scale, zero, *levels), scale, zero

    def dequantized(self) -> torch.Tensor:
        """(out, in) the int8 weights times their row scales, in float32: the values the int8
        product multiplies by."""
        from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa: F401

        return torch.ops.quantized_decomposed.dequantize_per_channel(
            self.weight_int8, self.weight_scale, self.weight_zero, 0, -128, 127, torch.int8)


def int8_engine() -> str:
    """The int8 kernels to pack for: oneDNN on CPUs with AMX tiles or AVX-512 VNNI, whose
    u8 x s8 products add up in 32 bits (so inputs may keep 8 bits, `Int8Linear`), else
    PyTorch's default. Without either, oneDNN's u8 x s8 kernels go through 16-bit sums as
    fbgemm's do (oneDNN's guide, "Nuances of int8 Computations"): the default stays. So it
    stays where `ONEDNN_MAX_CPU_ISA` caps oneDNN below VNNI (e.g. AVX2 on an AMX machine).
    """
    if onednn_sums_exact() and "onednn" in torch.backends.quantized.supported_engines:
        return "onednn"
    return torch.backends.quantized.engine


def onednn_sums_exact() -> bool:
    """Whether oneDNN's u8 x s8 products add in 32 bits here: a CPU with AMX tiles or
    AVX-512 VNNI, and no `ONEDNN_MAX_CPU_ISA` cap below them (`int8_engine`)."""
    # Both checks are private in torch 2.13; a version without them counts as neither.
    exact_sums = any(
        getattr(torch.cpu, check, lambda: False)()
        for check in ("_is_amx_tile_supported", "_is_vnni_supported")
    )
    return exact_sums and not _capped_below_vnni()


def seven_bits_more_exact() -> bool:
    """Whether the engine in use gives more exact products with inputs quantized to 7 bits
    than to 8, measured on one seeded product (d_model 512 -> 256) against float32.

    Where the kernels add u8 x s8 pairs in 16-bit sums (fbgemm or oneDNN without VNNI or
    AMX), 8-bit inputs saturate them and 7 bits win; with 32-bit sums 8 bits do. Which
    kernels run depends on the CPU, the engine and the ISA caps in the environment
    (fbgemm ignores oneDNN's), so the choice is measured rather than inferred.
    """
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(256, 512, generator=gen) / 512**0.5  # (out, in)
    x = torch.randn(64, 512, generator=gen)  # (tokens, in)
    with torch.no_grad():
        exact = x @ weight.T  # (tokens, out)
        errors = [(Int8Linear.pack(weight, None, seven)(x) - exact).norm().item() for seven in (False, True)]
    return errors[1] < errors[0]


# oneDNN's ISA caps (its `ONEDNN_MAX_CPU_ISA`, formerly `DNNL_MAX_CPU_ISA`) that leave out
# every 8-bit dot product with 32-bit sums (VNNI, AMX); the caps above them keep it.
_CAPS_BELOW_VNNI = frozenset({"SSE41", "AVX", "AVX2", "AVX512_CORE", "AVX512_MIC", "AVX512_MIC_4OPS"})


def _capped_below_vnni() -> bool:
    """Whether the environment caps oneDNN's kernels below VNNI."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    return cap.strip().upper() in _CAPS_BELOW_VNNI


def cross_store_dtype() -> torch.dtype | None:
    """The dtype in which the int8 model's search keeps the encoder-decoder keys and values:
    bfloat16 where the CPU multiplies it natively, else None (float32).

    Every decoding step reads all of them, in every layer; in bfloat16 the reads halve, and
    the step's two attention products over them run in oneDNN's bfloat16 kernels (float32
    sums). The int8 products round far more coarsely than bfloat16, and their inputs are
    rounded to 8 bits anyway. The self-attention stores stay float32: their written part is
    a strided slice, which PyTorch copies before a bfloat16 product.
    """
    return torch.bfloat16 if native_bf16(torch.device("cpu")) else None
