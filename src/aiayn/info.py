"""What `aiayn info` reports: a config's model hyperparameters and its parameter count and,
with `flops`, its training FLOPs per target token (`aiayn.analysis.flops`, Table 2)."""

from __future__ import annotations

import dataclasses
from typing import Any

from aiayn.analysis.flops import DEFAULT_LENGTH, training_flops_per_token
from aiayn.config import Config, load_config
from aiayn.model.transformer import parameter_count


def model_info(
    name_or_path: str, overrides: list[str] | tuple[str, ...] = (), flops: bool = False
) -> dict[str, Any]:
    """Every `ModelConfig` field, the d_k / d_v in use, `params` (tied weights once) and,
    with `flops`, the training FLOPs (`flops_info`)."""
    config = load_config(name_or_path, overrides)
    model = config.model
    info: dict[str, Any] = dataclasses.asdict(model)
    info["d_k"], info["d_v"] = model.key_dim, model.value_dim
    info["eps_ls"] = config.train.eps_ls  # Table 3 row D varies it beside the model
    info["params"] = parameter_count(model)
    return {**info, **flops_info(config)} if flops else info


def flops_info(config: Config, length: float = DEFAULT_LENGTH) -> dict[str, Any]:
    """Training FLOPs per target token by part and in all, and over the config's run:
    train.max_steps updates of train.update_tokens target tokens (sentences of `length`)."""
    count = training_flops_per_token(config, length)
    tokens = config.train.update_tokens * config.train.max_steps
    parts = {f"flops_per_target_token_{k}": v for k, v in vars(count).items()}
    return {"flops_sentence_length": length, **parts, "flops_per_target_token": count.total,
            "flops_run_target_tokens": tokens, "flops_run": count.total * tokens}  # fmt: skip


def text_lines(info: dict[str, Any]) -> list[str]:
    """`aiayn info`'s lines, a key and its value each: counts with thousands separators,
    FLOPs in scientific notation."""
    width = max(map(len, info))
    return [f"{key:<{width}}  {_shown(key, value)}" for key, value in info.items()]


def _shown(key: str, value: Any) -> str:
    if key in ("params", "flops_run_target_tokens"):
        return f"{value:,}"
    if key.startswith("flops_per") or key == "flops_run":
        return f"{value:.4g}"
    return str(value)
