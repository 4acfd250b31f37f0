"""What `aiayn info` reports: a config's model hyperparameters and its parameter count."""

from __future__ import annotations

import dataclasses
from typing import Any

from aiayn.config import load_config
from aiayn.model.transformer import parameter_count


def model_info(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Every `ModelConfig` field, the d_k / d_v in use, and `params` (tied weights once)."""
    config = load_config(name_or_path, overrides)
    model = config.model
    info: dict[str, Any] = dataclasses.asdict(model)
    info["d_k"], info["d_v"] = model.key_dim, model.value_dim
    info["eps_ls"] = config.train.eps_ls  # Table 3 row D varies it beside the model
    info["params"] = parameter_count(model)
    return info


def format_info(info: dict[str, Any]) -> str:
    """One `key  value` line per entry, the parameter count with thousands separators."""
    width = max(map(len, info))
    return "\n".join(f"{key:<{width}}  {value:,}" if key == "params" else f"{key:<{width}}  {value}"
                     for key, value in info.items())  # fmt: skip
