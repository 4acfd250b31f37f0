"""`aiayn train --init-from CKPT`: a new run that starts from a checkpoint's weights
(fine-tuning, or adapting a model to new data) instead of random ones.

Only the weights are taken. The optimizer, the learning-rate schedule (sec. 5.3: its own
`train.warmup`, `train.lr_scale`, `train.max_steps`), the data order and every counter are
the new run's, fresh, as in any run; `--resume` is what continues a run. The new data must
be encoded with the checkpoint's vocabulary (`aiayn prepare --vocab-from CKPT`), or its
token ids would mean other pieces, and the config must describe the checkpoint's network:
its `model` section equal but for dropout (`p_drop`, `p_drop_attn`, `p_drop_ffn`), which is
training, not architecture (sec. 5.4). Each refusal is one line naming the first difference.

    init_from(model, "runs/multi30k/avg5", config, data.src_vocab, data.tgt_vocab)
"""

from __future__ import annotations

from pathlib import Path

import torch

from aiayn.checkpoint import load_checkpoint
from aiayn.config import Config, model_differences
from aiayn.data.marian_vocab import AnyVocab
from aiayn.errors import ConfigError, DataError

NOT_ARCHITECTURE = ("p_drop", "p_drop_attn", "p_drop_ffn")  # regularisation (sec. 5.4)


def init_from(
    model: torch.nn.Module, checkpoint: str | Path, config: Config, src_vocab: AnyVocab,
    tgt_vocab: AnyVocab, resuming: bool = False,
) -> Path:  # fmt: skip
    """Copy checkpoint `checkpoint`'s weights into `model` (built from `config.model`), after
    checking that the run's data has its vocabulary and `config` its architecture, and that
    the run is a new one (not `resuming`)."""
    if resuming:
        raise ConfigError("--init-from starts a new run from a checkpoint's weights, --resume "
                          "continues a run: give one")  # fmt: skip
    path = Path(checkpoint)
    ckpt = load_checkpoint(path)
    for side, ours, theirs in (("source", src_vocab, ckpt.src_vocab),
                               ("target", tgt_vocab, ckpt.tgt_vocab)):  # fmt: skip
        if ours.sha256 != theirs.sha256:
            raise DataError(
                f"--init-from {path}: data.dir={config.data.dir} encodes its {side} side with "
                "another vocabulary than the checkpoint's; prepare the data with "
                f"`aiayn prepare --vocab-from {path}`"
            )
    difference = first_difference(ckpt.config, config)
    if difference:
        raise ConfigError(f"--init-from {path}: {difference}; fine-tuning keeps the "
                          f"architecture (start from {path / 'config.yaml'})")  # fmt: skip
    model.load_state_dict(ckpt.model.state_dict())
    return path


def first_difference(checkpoint: Config, run: Config) -> str | None:
    """'its model.KEY is A, this run's B' for the first architecture key that differs."""
    found = model_differences(checkpoint.model, run.model, "its model.{key} is {a!r}, this "
                              "run's {b!r}", ignore=NOT_ARCHITECTURE)  # fmt: skip
    return found[0] if found else None
