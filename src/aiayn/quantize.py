"""Int8 dynamic quantization for CPU inference (not in the paper; a deployment option).

    model = quantize_int8(model)    # float32 CPU model, eval mode; changed in place

Every `nn.Linear` (attention projections, feed-forward) gets int8 weights with one scale
per output row, and its input is quantized per call ("dynamic", one scale per tensor).
The products are PyTorch's int8 kernels: oneDNN's on CPUs with AMX or AVX-512 VNNI (see
`int8_engine`), PyTorch's default (fbgemm's) elsewhere. CTranslate2's int8 also keeps a
scale per weight row. With oneDNN the inputs keep all 8 bits, where PyTorch's own module
cuts them to 7 (`Int8Linear`).
The tied pre-softmax projection (sec. 3.4) is `hidden @ embedding.t()` in
`Transformer.project`, not a module, yet at an 8k-37k vocabulary it is a large share of
each decoding step; so the quantized model also gets an int8 copy of that matrix, used by
`project` only. Embedding lookups, LayerNorm and softmax stay float32, and so does
attention, but for one narrowing: where the CPU multiplies bfloat16 natively, the cache
keeps the encoder-decoder keys and values in bfloat16 (`bf16_products`).

The model code keeps one path: `project` is replaced on this instance only, by the int8
module, so search and teacher forcing call `model.project(hidden)` as before.

The weights are quantized as `torch.ao.quantization.quantize_dynamic` with PyTorch's
per-channel dynamic qconfig would (a test holds them equal), but directly from each
`nn.Linear`'s weight, subclasses included (`quantize_dynamic` swaps only modules of the
exact types it knows). `torch.ao.quantization` is deprecated in favour of torchao (which is
not a dependency) but works in torch 2.13; its deprecation warnings are silenced here.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from aiayn.errors import ConfigError
from aiayn.model.transformer import Transformer


def quantize_int8(model: Transformer) -> Transformer:
    """Int8 weights for every linear map, the output projection included; -> `model`.

    CPU and float32 only (the int8 kernels are CPU kernels and quantize from float32).
    Inference only: the quantized model cannot be trained or saved as a checkpoint.
    """
    weight = model.tgt_embed.weight
    check_int8(weight.device, weight.dtype)
    model.eval()
    # The engine in use when the weights are packed is the one their products run on; the
    # process-wide setting is put back at once.
    previous, engine = torch.backends.quantized.engine, int8_engine()
    reduce_range = engine != "onednn"
    torch.backends.quantized.engine = engine
    try:
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.Linear):
                model.set_submodule(name, Int8Linear.pack(module.weight, module.bias, reduce_range))
        if model.config.tie_embeddings:
            # An int8 copy of the tied matrix for the projection; the float embedding stays
            # for the lookups.
            model.int8_projection = Int8Linear.pack(weight, None, reduce_range)
    finally:
        torch.backends.quantized.engine = previous
    if bf16_products():
        model.cross_cache_dtype = torch.bfloat16
    projection = model.int8_projection if model.config.tie_embeddings else model.out_proj
    # An instance attribute shadows the class's `project`: (..., d_model) -> (..., vocab).
    # Set through object.__setattr__, since nn.Module would file a module away in _modules.
    object.__setattr__(model, "project", projection)
    return model


class Int8Linear(nn.Module):
    """x W^T + b with W packed in int8 and x quantized per call; (..., in) -> (..., out).

    PyTorch's dynamic `Linear` always quantizes its input to 7 bits (`reduce_range=True`),
    because fbgemm's AVX2 kernels add pairs of u8 x s8 products in 16 bits, which 8-bit
    inputs can overflow. oneDNN's kernels on AMX tiles and on AVX-512 VNNI (`vpdpbusd`)
    add the products straight into 32 bits, so there the input keeps all 8 bits, which
    halves each product's error (relative error 1.1% against 2.1% for a (128, 512) x
    (512, 2048) product of random values, at the same speed) and brings int8 translation
    closer to float32. Of the 1,000 Multi30k test translations, int8 changed:
    - Intel Xeon (AMX), avg5 of `runs/bench-multi30k-v4`, `-v3`, `-v2`: 100, 84 and 105
      with 8 bits, against 136, 153 and 148 with 7; BLEU minus float32's +0.01 and +0.21
      (v4, v3), against +0.35 and +0.03 with 7 bits.
    - AMD EPYC Zen 4 (AVX-512 VNNI, no AMX), avg5 of `runs/bench-multi30k-v5`: 89 with 8
      bits on oneDNN, against 136 with 7 on PyTorch's default; BLEU minus float32's +0.11
      against -0.04.
    Elsewhere 7 bits stay.
    """

    def __init__(self, packed: torch.Tensor, reduce_range: bool) -> None:
        super().__init__()
        self.packed = packed  # weights and bias, packed by `torch.ops.quantized.linear_prepack`
        self.reduce_range = reduce_range

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
        return torch.ops.quantized.linear_dynamic(x, self.packed, reduce_range=self.reduce_range)


def int8_engine() -> str:
    """The int8 kernels to pack for: oneDNN on CPUs with AMX tiles or AVX-512 VNNI, whose
    u8 x s8 products add up in 32 bits (so inputs may keep 8 bits, `Int8Linear`), else
    PyTorch's default.

    Measured with benchmarks/translate_speed.py's base model, 2 vCPUs:
    - Intel Xeon with AMX, one batch of 113 sentences: beam search 2.2-2.4 s with oneDNN
      against 2.7-3.1 s with fbgemm, at the same agreement with float32.
    - AMD EPYC Zen 4 (AVX-512 VNNI), its 4 batches (500 sentences), 8 turns each: 14.59 s
      with oneDNN against 14.74 s with PyTorch's default ("x86"), the same speed; the
      largest teacher-forced log-probability difference from float32 0.082 against 0.102.
    Without either, oneDNN's u8 x s8 kernels go through 16-bit sums as fbgemm's do
    (oneDNN's guide, "Nuances of int8 Computations"): the default stays.
    """
    # Both checks are private in torch 2.13; a version without them counts as neither.
    exact_sums = any(
        getattr(torch.cpu, check, lambda: False)()
        for check in ("_is_amx_tile_supported", "_is_vnni_supported")
    )
    if exact_sums and "onednn" in torch.backends.quantized.supported_engines:
        return "onednn"
    return torch.backends.quantized.engine


def bf16_products() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16: AMD Zen 4 and later,
    Intel Xeons since Cooper Lake), so that the int8 model's cache may keep the
    encoder-decoder keys and values in bfloat16.

    Why: every decoding step reads all of them, in every layer (a base model's 6 layers
    hold 100 MB of them for 99 sentences of 41 tokens, more than the L3 cache). In
    bfloat16 the reads halve, and the step's two attention products over them run in
    oneDNN (float32 sums, the result rounded to bfloat16), not in MKL's float32 code. On
    the AMD EPYC, over translate_speed.py's 4 batches (torch.profiler), the weights times
    V, (792 x 4 x 41) x (41 x 64), took 0.21 ms a call against 0.70, K q^T 0.32 against
    0.57, and all the encoder-decoder products of a pass 0.39 s against 0.87. In-process
    A/Bs of aiayn's int8 beam search over those batches (medians): 11.53 s against 12.22
    (5 turns each), and 12.50 against 12.59 (6 turns, the machine noisy: passes of
    10.9-13.9 s). The largest teacher-forced log-probability difference from float32
    stayed where int8 puts it (0.109 against 0.113; the bfloat16 stores alone, on the
    float32 model, 0.009), and Multi30k test BLEU with int8 went from 34.03 to 34.27
    (float32: 34.15; benchmarks/README.md). The int8 products round far more coarsely
    than bfloat16 (8 bits per tensor against 8 significant bits per element), and their
    inputs, attention's output among them, are rounded to 8 bits anyway.
    The self-attention stores stay float32: their written part is a slice of a larger
    store, whose (sentences, heads) rows are not contiguous, and PyTorch copies such an
    operand before a bfloat16 product (MKL's float32 product reads it in place). With
    those stores in bfloat16 too, the search gained no more (11.99 s against 12.66).
    Without native bfloat16 (oneDNN would emulate it) nothing changes.
    """
    # Private in torch 2.13, as int8_engine's checks; a version without it counts as no.
    return getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()


def check_int8(device: str | torch.device, dtype: torch.dtype | None) -> None:
    """Refuse int8 on anything but the CPU, or from anything but float32 (None = float32)."""
    if torch.device(device).type != "cpu":
        raise ConfigError(f"int8 quantization runs on the CPU only, not on {device}")
    if dtype not in (None, torch.float32):
        raise ConfigError(f"int8 quantization starts from float32 weights, not {dtype}")
