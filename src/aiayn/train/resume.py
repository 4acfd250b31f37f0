"""A run's resumable state: what a training checkpoint stores and restores (sec. 5.2-5.3:
the weights, Adam's moments, the step of eq. 3, the data position, every RNG). A resume
opens the checkpoint once (`aiayn.checkpoint.Checkpoint`) and takes every part from it.

`trainer_state.json` of a step checkpoint (see `aiayn.checkpoint` for the directory):

    {"format": "aiayn-trainer-state", "version": 1, "world_size": N,
     "loop":      {"step", "accum_steps", "bad_steps", "tokens_seen", "best_valid_nll",
                   "stale_validations", "valid_step", "last_valid", "last_train_nll"},
     "sampler":   {"epoch", "index", "seed", "max_tokens", "world_size", "n_examples"},
     "optimizer": {"state": {"<param index>": {"step": {"tensor": NAME}, ...}},
                   "param_groups": [{"lr", "betas", "eps", ...}]},
     "scaler":    GradScaler state (fp16) or null,
     "rng":       per rank: {"python": [...], "numpy": [...], "cuda_devices": n}}

and `trainer_state.safetensors` the tensors: `optim.<i>.{step,exp_avg,exp_avg_sq}`,
`rng.<rank>.torch`, `rng.<rank>.cuda.<device>`. The learning rate needs no state: it is
eq. 3 of the step.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aiayn.checkpoint import TRAINER_JSON, Checkpoint, load_weights_into, save_checkpoint
from aiayn.config import Config, apply_overrides, load_config, model_differences
from aiayn.data.batching import TokenBatchSampler
from aiayn.data.run_data import RunData
from aiayn.errors import CheckpointError, ConfigError
from aiayn.train import distributed
from aiayn.train.run_dir import resume_candidates
from aiayn.train.state_json import (
    capture_rng,
    optimizer_from_json,
    optimizer_state_dict,
    optimizer_to_json,
    restore_rng,
)

FORMAT, VERSION = "aiayn-trainer-state", 1


@dataclass
class LoopState:
    """The loop's counters, saved as JSON in every step checkpoint."""

    accum_steps: int  # micro-batches per update per rank
    step: int = 0  # updates taken; the next uses eq. 3 at step + 1
    bad_steps: int = 0  # non-finite updates in a row
    tokens_seen: int = 0  # real target tokens over all ranks
    best_valid_nll: float | None = None
    stale_validations: int = 0  # validations since the best
    valid_step: int | None = None  # step of the last validation
    last_valid: dict | None = None
    last_train_nll: float | None = None


@dataclass
class TrainingState:
    """Everything an exact resume puts back: the objects are loaded in place, `loop` is
    replaced. The save and restore functions below know this object, not the trainer."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    loop: LoopState
    sampler: TokenBatchSampler  # its (epoch, index) is the data position


# --- saving -----------------------------------------------------------------------------
def collect_state(
    state: TrainingState, env: distributed.DistEnv
) -> tuple[dict[str, Any], dict[str, torch.Tensor]] | None:
    """The trainer state on rank 0 (None elsewhere); every rank must call it (RNG gather)."""
    gathered = distributed.gather_to_main(capture_rng(f"rng.{env.rank}"), env)
    if not env.is_main:
        return None
    optim, tensors = optimizer_to_json(state.optimizer)
    for _, rng_tensors in gathered:
        tensors.update(rng_tensors)
    saved = {
        "format": FORMAT, "version": VERSION, "world_size": env.world_size,
        "loop": dataclasses.asdict(state.loop), "sampler": state.sampler.state_dict(),
        "optimizer": optim,
        "scaler": state.scaler.state_dict() if state.scaler.is_enabled() else None,
        "rng": [scalars for scalars, _ in gathered],
    }  # fmt: skip
    return saved, tensors


def write_checkpoint(
    path: Path, state: TrainingState, data: RunData, payload: tuple | None
) -> Path:
    """A checkpoint of the model (+ the trainer state `payload`, if given) at `path`, with
    the run's config, vocabularies and languages (`data`)."""
    loop = state.loop
    meta = {"step": loop.step, "epoch": state.sampler.epoch, "tokens_seen": loop.tokens_seen,
            "train_nll": loop.last_train_nll, "valid": loop.last_valid,
            "languages": data.languages}  # fmt: skip
    return save_checkpoint(path, state.model, data.config, data.src_vocab, data.tgt_vocab,
                           meta, payload)  # fmt: skip


# --- restoring --------------------------------------------------------------------------
def resume_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The config a run resumed from `path` continues with: the checkpoint's, plus overrides."""
    return apply_overrides(Checkpoint(resume_candidates(path)[0]).config, overrides)


def run_config(
    name: str | None, overrides: list[str], resume: str | None, reference: bool = False
) -> Config:
    """What `aiayn train [PRESET_OR_CONFIG] [key=value ...] [--resume DIR] [--reference]`
    trains with: the preset or file `name` with `overrides`; without one, the resumed
    checkpoint's config (a first `key=value` is an override, not a file name)."""
    if name is not None and "=" in name and not Path(name).exists():
        name, overrides = None, [name, *overrides]  # `train --resume DIR key=value`
    overrides = [*overrides, *(["train.fast=false"] if reference else [])]
    if name is not None:
        return load_config(name, overrides)
    if resume is None:
        raise ConfigError("give a PRESET_OR_CONFIG, or --resume DIR")
    return resume_config(resume, overrides)


def restore(
    state: TrainingState, candidates: list[Path], data: RunData, env: distributed.DistEnv
) -> Path:
    """Load the newest readable of `candidates` into `state`; rank 0's choice holds. The
    checkpoint must hold `data`'s model config and vocabularies."""
    ckpt, weights = _open_first(candidates)
    chosen = Path(distributed.broadcast_from_main(str(ckpt.path), env))
    if chosen != ckpt.path:
        ckpt, weights = _open_first([chosen])
    _check_compatible(ckpt, data, env)
    saved, tensors = ckpt.trainer_state
    _load_saved(state, ckpt.path, saved, tensors, weights, data.config.train.accum_steps)
    if len(saved["rng"]) == env.world_size:
        restore_rng(saved["rng"][env.rank], tensors, f"rng.{env.rank}")
    return ckpt.path


def _load_saved(
    state: TrainingState, path: Path, saved: dict, tensors: dict, weights: dict, accum_steps: int
) -> None:
    """Model weights, Adam's moments, the fp16 scaler, the sampler position and the loop
    counters into `state`; `accum_steps` (the config's, 0 = derived) wins over the saved."""
    if hasattr(state.model.tgt_positional, "weight") and "tgt_positional.weight" not in weights:
        raise CheckpointError(
            f"{path}: saved when the encoder and decoder shared one table of learned positions; "
            "it translates and averages with this aiayn, but its optimizer state has no place "
            "for the decoder's own table, so training cannot resume from it"
        )
    load_weights_into(state.model, weights, path)
    changed = optimizer_from_json(state.optimizer, saved["optimizer"], tensors)
    if changed:
        warnings.warn(f"Adam's {', '.join(changed)} from {path}: not an exact resume")
    if saved.get("scaler") and state.scaler.is_enabled():
        state.scaler.load_state_dict(saved["scaler"])
    state.sampler.load_state_dict(saved["sampler"])
    loop = LoopState(**saved["loop"])
    if accum_steps and accum_steps != loop.accum_steps:
        warnings.warn(f"train.accum_steps changed from {loop.accum_steps}: not an exact resume")
        loop.accum_steps = accum_steps
    state.loop = loop


def _open_first(candidates: list[Path]) -> tuple[Checkpoint, dict]:
    """The first candidate whose trainer state and weights read back whole, and its weights."""
    problems = []
    for path in candidates:
        try:
            ckpt = Checkpoint(path)
            _check_state(path, *ckpt.trainer_state)
            return ckpt, ckpt.read_weights()
        except CheckpointError as err:
            warnings.warn(f"skipping {path}: {err}")
            problems.append(str(err))
    raise CheckpointError("no checkpoint could be resumed: " + "; ".join(problems))


def _check_state(path: Path, state: dict, tensors: dict[str, torch.Tensor]) -> None:
    """Everything `restore` reads from the trainer state is there, in this version's form,
    or a CheckpointError says what is not (and `_open_first` tries an older checkpoint)."""
    file = path / TRAINER_JSON
    if state.get("format") != FORMAT:
        raise CheckpointError(f"{file}: trainer state format {state.get('format')!r}")
    version = state.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise CheckpointError(
            f"{file}: trainer state version {version!r}; this aiayn reads {VERSION}"
        )
    try:
        LoopState(**state["loop"])
        optimizer_state_dict(state["optimizer"], tensors)
        read = [state["sampler"]["epoch"], state["sampler"]["index"]]  # what restore reads
        for rank, scalars in enumerate(state["rng"]):
            read += [scalars["python"], scalars["numpy"], tensors[f"rng.{rank}.torch"]]
    except KeyError as err:
        raise CheckpointError(f"{path}: the trainer state lacks {err}") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(f"{file}: malformed trainer state ({err})") from None


def _check_compatible(ckpt: Checkpoint, data: RunData, env: distributed.DistEnv) -> None:
    """The checkpoint must hold this model and vocabulary; one rank count per run."""
    path, saved, config = ckpt.path, ckpt.config, data.config
    diff = model_differences(
        saved.model, config.model, "model.{key}: {a} in the checkpoint, {b} now"
    )
    if diff:
        hint = (
            "; a run started before attention_bias existed had biases: add "
            "model.attention_bias=true to resume it"
            if saved.model.attention_bias and not config.model.attention_bias
            else ""
        )
        raise CheckpointError(
            f"{path}: a different architecture ({'; '.join(diff)}){hint}"
        )
    src, tgt = ckpt.vocabs
    if (src.sha256, tgt.sha256) != (data.src_vocab.sha256, data.tgt_vocab.sha256):
        raise CheckpointError(
            f"{path}: its vocabulary differs from {config.data.dir}'s; resume with the "
            "data it was trained on"
        )
    world_size = ckpt.trainer_state[0].get("world_size", 1)
    if world_size != env.world_size:
        raise CheckpointError(
            f"{path}: saved by {world_size} process(es), resumed by "
            f"{env.world_size}; the batch order would differ (resume with the same count)"
        )
