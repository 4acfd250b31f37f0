"""Devices and precisions: a device named by the user (`train.device`, `aiayn translate
--device`), checked once; what it multiplies natively; the autocast a precision runs in."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from aiayn.errors import ConfigError


def parse_device(name: str | torch.device, key: str) -> torch.device:
    """`name` as a torch.device; a ConfigError naming `key` for a name torch does not know
    or a CUDA device this machine does not have (torch would fail later, deep inside)."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"{key}={name!r} is not a device; use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{key}={name!r} but no CUDA GPU is available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}={name!r}: this machine has {torch.cuda.device_count()} GPUs")
    elif device.type != "cpu":
        raise ConfigError(f"{key}={name!r}: aiayn runs on cpu or cuda devices")
    return device


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 natively, as PyTorch reports it: a CUDA GPU with
    bfloat16 units (not emulated), or a CPU with AVX-512 BF16 or AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    # Private in torch 2.13; a version without them counts as no.
    return any(
        getattr(torch.cpu, check, lambda: False)()
        for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    )


def resolve_precision(precision: str, device: torch.device) -> str:
    """`train.precision` as training runs it: "auto" is "bf16" where `device` multiplies
    bfloat16 natively (`native_bf16`) and "fp32" elsewhere; the others as they are (fp16,
    with its loss scaling, on a CUDA GPU only)."""
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("train.precision=fp16 needs a CUDA GPU; use bf16 or fp32 on CPU")
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(device) else "fp32"


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """Where a forward pass runs for a resolved `precision`: as it is in fp32, else under
    autocast to bfloat16 or float16 (the weights, and Adam's state, stay float32)."""
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def check_int8(device: str | torch.device, dtype: torch.dtype | None) -> None:
    """Refuse int8 on anything but the CPU, or from anything but float32 (None = float32)."""
    if torch.device(device).type != "cpu":
        raise ConfigError(f"int8 quantization runs on the CPU only, not on {device}")
    if dtype not in (None, torch.float32):
        raise ConfigError(f"int8 quantization starts from float32 weights, not {dtype}")
