"""When a run has gone wrong: the errors that stop it, each naming what is left to use.

A non-finite update is skipped (one overflow should not end a run), up to
`train.max_bad_steps` in a row; a non-finite dev loss means that the weights themselves
have diverged.
"""

from __future__ import annotations

from pathlib import Path

from aiayn.errors import TrainingError


def too_many_bad_updates(in_a_row: int, step: int, last_saved: Path | None) -> TrainingError:
    """`in_a_row` non-finite updates after update `step`: the last good checkpoint, and what
    to change."""
    kept = (f"the last good checkpoint is {last_saved}" if last_saved
            else "no checkpoint had been saved yet")  # fmt: skip
    return TrainingError(
        f"{in_a_row} updates in a row had a non-finite loss or gradient (after update {step}); "
        f"{kept}. Lower the learning rate (train.lr_scale), use train.precision=fp32 or set "
        "train.clip_norm"
    )


def diverged(nll: float, step: int, best: Path | None, best_nll: float | None) -> TrainingError:
    """A non-finite dev loss `nll` after update `step`: finite weights whose outputs are not.
    Nothing after this is worth keeping as best, and the step checkpoints since the last good
    dev loss may hold the same weights, so the message points to `best` (None: no finite dev
    loss before)."""
    kept = (f"the best model so far is {best} (dev NLL {best_nll:.3f})" if best is not None
            else "no validation had a finite loss before")  # fmt: skip
    return TrainingError(
        f"the dev loss is {nll} after update {step}: the model has diverged; {kept}. Lower the "
        "learning rate (train.lr_scale) or set train.clip_norm"
    )
