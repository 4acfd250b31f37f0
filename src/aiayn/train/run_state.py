"""A run's data and its resumable state: what a training checkpoint stores and restores.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from aiayn.checkpoint import (
    TRAINER_JSON,
    load_weights_into,
    read_config,
    read_trainer_state,
    read_vocabs,
    read_weights,
    save_checkpoint,
)
from aiayn.config import Config
from aiayn.data.batching import Batch, TokenBatchSampler, collate
from aiayn.data.binarize import BinarizedDataset, load_manifest, load_vocabs
from aiayn.data.vocab import Vocab
from aiayn.errors import CheckpointError, ConfigError, DataError
from aiayn.train import distributed
from aiayn.train.state import (
    capture_rng,
    optimizer_from_json,
    optimizer_state_dict,
    optimizer_to_json,
    restore_rng,
)

if TYPE_CHECKING:
    from aiayn.train.trainer import Trainer

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
class RunData:
    """The prepared data of a run: vocabularies, train/valid splits, this rank's batches."""

    config: Config  # the run's config, model vocabulary sizes set from the data
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: BinarizedDataset
    valid: BinarizedDataset | None
    sampler: TokenBatchSampler
    derived_accum_steps: int  # micro-batches that make about train.update_tokens

    def micro_batches(self) -> Iterator[Batch]:
        """This rank's training batches, epoch after epoch, from the sampler's position."""
        while True:
            for indices in self.sampler:
                yield collate([self.train[int(i)] for i in indices], ids=indices)

    def epochs_done(self) -> int:
        sampler = self.sampler
        return sampler.epoch + int(sampler.index >= len(sampler))


def load_run_data(config: Config, env: distributed.DistEnv) -> RunData:
    """Open `config.data.dir`; the model's vocabulary sizes are set to the data's."""
    if not config.data.dir:
        raise ConfigError("set data.dir to a directory made by `aiayn prepare`")
    manifest = load_manifest(config.data.dir)
    src_vocab, tgt_vocab = load_vocabs(config.data.dir)
    joint = src_vocab.sha256 == tgt_vocab.sha256 and manifest["vocab"].get("joint", True)
    model = dataclasses.replace(
        config.model, vocab_size=tgt_vocab.size, src_vocab_size=None if joint else src_vocab.size
    )
    config = dataclasses.replace(config, model=model)
    train = BinarizedDataset(config.data.dir, "train")
    valid = None
    if "valid" in manifest["splits"]:
        valid = BinarizedDataset(config.data.dir, "valid")
        valid = valid if len(valid) else None
    for dataset in (train, valid):
        if dataset is not None:
            dataset.check_ids(src_vocab.size, tgt_vocab.size)
    _check_lengths(config, train, valid)
    sampler = TokenBatchSampler(
        train.src_lengths, train.tgt_lengths, config.data.max_tokens, seed=config.data.seed,
        rank=env.rank, world_size=env.world_size,
    )  # fmt: skip
    accum = derive_accum_steps(sampler, config.train.update_tokens, env)
    return RunData(config, src_vocab, tgt_vocab, train, valid, sampler, accum)


def _check_lengths(config: Config, train: BinarizedDataset, valid: BinarizedDataset | None) -> None:
    """Refuse, before the first update, examples the run could not take later: a valid one
    longer than data.max_tokens (the valid split is never filtered, and would otherwise fail
    at the first validation, hours in), and any longer than learned positions reach."""
    model = config.model
    limits = [("data.max_tokens", config.data.max_tokens, [("valid", valid)])]
    if model.positional == "learned":
        limits.append(("model.max_len", model.max_len, [("train", train), ("valid", valid)]))
    for key, limit, splits in limits:
        for split, dataset in splits:
            if dataset is None:
                continue
            for side in ("src", "tgt"):
                sizes = getattr(dataset, f"{side}_lengths").astype(int) + 1  # + eos, or bos
                too_long = (sizes > limit).nonzero()[0]
                if len(too_long):
                    i = int(too_long[0])
                    line = f" (line {i + 1})" if split == "valid" else ""  # never filtered
                    raise DataError(
                        f"{config.data.dir}: {split} example {i}{line} has {sizes[i]} {side} "
                        f"positions "
                        f"(eos or bos included), more than {key}={limit} ({len(too_long)} such "
                        f"examples); raise {key}, or shorten them and run `aiayn prepare` again"
                    )


def derive_accum_steps(sampler: TokenBatchSampler, update_tokens: int, env) -> int:
    """Micro-batches per rank so that an update holds about `update_tokens` real target
    tokens, from the mean of the first epoch's batches (padding does not count)."""
    batches = sampler.epoch_batches(0)
    tokens = sum(int(sampler.tgt_sizes[b].sum()) for b in batches)
    tokens, count = distributed.all_reduce_sum([float(tokens), float(len(batches))], env)
    per_batch = tokens / max(count, 1.0)
    return max(1, round(update_tokens / (env.world_size * per_batch)))


# --- saving -----------------------------------------------------------------------------
def collect_state(trainer: Trainer) -> tuple[dict[str, Any], dict[str, torch.Tensor]] | None:
    """The trainer state on rank 0 (None elsewhere); every rank must call it (RNG gather)."""
    env = trainer.env
    gathered = distributed.gather_to_main(capture_rng(f"rng.{env.rank}"), env)
    if not env.is_main:
        return None
    optim, tensors = optimizer_to_json(trainer.optimizer)
    for _, rng_tensors in gathered:
        tensors.update(rng_tensors)
    state = {
        "format": FORMAT, "version": VERSION, "world_size": env.world_size,
        "loop": dataclasses.asdict(trainer.state), "sampler": trainer.data.sampler.state_dict(),
        "optimizer": optim,
        "scaler": trainer.scaler.state_dict() if trainer.scaler.is_enabled() else None,
        "rng": [scalars for scalars, _ in gathered],
    }  # fmt: skip
    return state, tensors


def write_checkpoint(trainer: Trainer, path: Path, payload: tuple | None) -> Path:
    """A checkpoint of the model (+ the trainer state `payload`, if given) at `path`."""
    state, tensors = payload if payload is not None else (None, None)
    loop = trainer.state
    meta = {"step": loop.step, "epoch": trainer.data.sampler.epoch, "tokens_seen": loop.tokens_seen,
            "train_nll": loop.last_train_nll, "valid": loop.last_valid}  # fmt: skip
    data = trainer.data
    return save_checkpoint(path, trainer.model, trainer.config, data.src_vocab, data.tgt_vocab,
                           meta, state, tensors)  # fmt: skip


# --- restoring --------------------------------------------------------------------------
def restore(trainer: Trainer, candidates: list[Path]) -> Path:
    """Load the newest readable of `candidates` into `trainer`; rank 0's choice holds."""
    env = trainer.env
    path, state, tensors, weights = _read_first(candidates)
    chosen = Path(distributed.broadcast_from_main(str(path), env))
    if chosen != path:
        path, state, tensors, weights = _read_first([chosen])
    _check_compatible(trainer, path, state)
    if hasattr(trainer.model.tgt_positional, "weight") and "tgt_positional.weight" not in weights:
        raise CheckpointError(
            f"{path}: saved when the encoder and decoder shared one table of learned positions; "
            "it translates and averages with this aiayn, but its optimizer state has no place "
            "for the decoder's own table, so training cannot resume from it"
        )
    load_weights_into(trainer.model, weights, path)
    changed = optimizer_from_json(trainer.optimizer, state["optimizer"], tensors)
    if changed:
        warnings.warn(f"Adam's {', '.join(changed)} from {path}: not an exact resume")
    if state.get("scaler") and trainer.scaler.is_enabled():
        trainer.scaler.load_state_dict(state["scaler"])
    trainer.data.sampler.load_state_dict(state["sampler"])
    loop = LoopState(**state["loop"])
    if trainer.config.train.accum_steps and trainer.config.train.accum_steps != loop.accum_steps:
        warnings.warn(f"train.accum_steps changed from {loop.accum_steps}: not an exact resume")
        loop.accum_steps = trainer.config.train.accum_steps
    trainer.state = loop
    if len(state["rng"]) == env.world_size:
        restore_rng(state["rng"][env.rank], tensors, f"rng.{env.rank}")
    return path


def _read_first(candidates: list[Path]) -> tuple[Path, dict, dict, dict]:
    """The first candidate whose trainer state and weights read back whole."""
    problems = []
    for path in candidates:
        try:
            state, tensors = read_trainer_state(path)
            _check_state(path, state, tensors)
            return path, state, tensors, read_weights(path)
        except CheckpointError as err:
            warnings.warn(f"skipping {path}: {err}")
            problems.append(str(err))
    raise CheckpointError("no checkpoint could be resumed: " + "; ".join(problems))


def _check_state(path: Path, state: dict, tensors: dict[str, torch.Tensor]) -> None:
    """Everything `restore` reads from the trainer state is there, in this version's form,
    or a CheckpointError says what is not (and `_read_first` tries an older checkpoint)."""
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


def _check_compatible(trainer: Trainer, path: Path, state: dict) -> None:
    """The checkpoint must hold this model and vocabulary; one rank count per run."""
    saved = read_config(path)
    if saved.model != trainer.config.model:
        ours, theirs = dataclasses.asdict(trainer.config.model), dataclasses.asdict(saved.model)
        diff = [f"model.{k}: {theirs[k]} in the checkpoint, {ours[k]} now" for k in ours
                if ours[k] != theirs[k]]  # fmt: skip
        hint = (
            "; a run started before attention_bias existed had biases: add "
            "model.attention_bias=true to resume it"
            if saved.model.attention_bias and not trainer.config.model.attention_bias
            else ""
        )
        raise CheckpointError(f"{path}: a different architecture ({'; '.join(diff)}){hint}")
    src, tgt = read_vocabs(path, saved)
    if (src.sha256, tgt.sha256) != (trainer.data.src_vocab.sha256, trainer.data.tgt_vocab.sha256):
        raise CheckpointError(
            f"{path}: its vocabulary differs from {trainer.config.data.dir}'s; resume with the "
            "data it was trained on"
        )
    if state.get("world_size", 1) != trainer.env.world_size:
        raise CheckpointError(
            f"{path}: saved by {state.get('world_size')} process(es), resumed by "
            f"{trainer.env.world_size}; the batch order would differ (resume with the same count)"
        )
