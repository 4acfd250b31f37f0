"""Trainer state as JSON + tensors, never pickles: RNG states and the optimizer's state.

A checkpoint's `trainer_state.json` holds the scalars and `trainer_state.safetensors` the
tensors (see `aiayn.checkpoint`). Here live the conversions both ways:

- RNGs: Python's `random.getstate()` is (version, 625 ints, gauss) -> a JSON list; NumPy's
  legacy global state (MT19937: 624 uint32 + position + cached Gaussian) -> JSON; torch's
  CPU and CUDA generator states are uint8 tensors -> tensors `rng.torch`, `rng.cuda.<i>`.
- The optimizer: `state_dict()` with every tensor replaced by the name of a stored tensor
  (`optim.<param index>.<key>`), the rest (param groups, lr, betas) kept as JSON.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

RngState = tuple[dict[str, Any], dict[str, torch.Tensor]]


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng(prefix: str = "rng") -> RngState:
    """Every RNG of this process: (JSON-able dict, tensors named `<prefix>.torch` ...)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    scalars = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }
    tensors = {f"{prefix}.torch": torch.get_rng_state()}
    for i in range(scalars["cuda_devices"]):
        tensors[f"{prefix}.cuda.{i}"] = torch.cuda.get_rng_state(i)
    return scalars, tensors


def restore_rng(
    scalars: dict[str, Any], tensors: dict[str, torch.Tensor], prefix: str = "rng"
) -> None:
    """Put back what `capture_rng` took (CUDA states only for devices present in both)."""
    version, internal, gauss = scalars["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = scalars["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors[f"{prefix}.torch"])
    present = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for i in range(min(present, scalars.get("cuda_devices", 0))):
        torch.cuda.set_rng_state(tensors[f"{prefix}.cuda.{i}"], i)


def optimizer_to_json(optimizer: torch.optim.Optimizer, prefix: str = "optim") -> RngState:
    """`optimizer.state_dict()` as (JSON-able dict, tensors named `<prefix>.<index>.<key>`)."""
    state_dict = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    state: dict[str, dict[str, Any]] = {}
    for index, values in state_dict["state"].items():
        state[str(index)] = {}
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                name = f"{prefix}.{index}.{key}"
                tensors[name] = value.detach().to("cpu").contiguous()
                state[str(index)][key] = {"tensor": name}
            else:
                state[str(index)][key] = value
    groups = [_jsonable(group) for group in state_dict["param_groups"]]
    return {"state": state, "param_groups": groups}, tensors


def optimizer_state_dict(scalars: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict:
    """The `state_dict()` that `optimizer_to_json` wrote, its tensors taken from `tensors`;
    a KeyError names a tensor that is missing."""
    state: dict[int, dict[str, Any]] = {}
    for index, values in scalars["state"].items():
        state[int(index)] = {
            key: tensors[value["tensor"]] if _is_tensor_ref(value) else value
            for key, value in values.items()
        }
    return {"state": state, "param_groups": [dict(group) for group in scalars["param_groups"]]}


def optimizer_from_json(
    optimizer: torch.optim.Optimizer, scalars: dict[str, Any], tensors: dict[str, torch.Tensor]
) -> list[str]:
    """Load the moments and step counts that `optimizer_to_json` wrote into `optimizer`
    (tensors move to its devices); -> the hyperparameters that differ from the checkpoint's.

    The state and the rate are the checkpoint's (the trainer sets the rate anew each step
    anyway, eq. 3). Every other setting of the param groups is `optimizer`'s own: the betas
    and eps of the run's config (a resume that overrides `train.betas` gets them, as its
    saved config.yaml then says), and how to compute the update (a checkpoint from a
    per-parameter Adam resumes with the fused one, and vice versa)."""
    state_dict = optimizer_state_dict(scalars, tensors)
    changed = []
    for group, own in zip(state_dict["param_groups"], optimizer.param_groups):
        for key, value in own.items():
            if key in ("params", "lr"):
                continue
            saved = group.get(key)
            saved = tuple(saved) if key == "betas" and saved is not None else saved
            if key in ("betas", "eps", "weight_decay") and saved is not None and saved != value:
                changed.append(f"{key} {saved} -> {value}")
            group[key] = value
    optimizer.load_state_dict(state_dict)
    return sorted(set(changed))


def _is_tensor_ref(value: Any) -> bool:
    return isinstance(value, dict) and "tensor" in value


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.item()
    return value
