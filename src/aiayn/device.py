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
