"""A device named by the user (`train.device`, `aiayn translate --device`), checked once."""

from __future__ import annotations

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
    bfloat16 natively (`native_bf16`) and "fp32" elsewhere; the others as they are."""
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(device) else "fp32"
