"""What a user sees of a run: a progress bar, a JSON-lines log, optional TensorBoard curves.

    <out_dir>/train_log.jsonl     one JSON object a line: {"event": "train" | "valid" |
                                  "checkpoint" | "skip" | "start" | "end", "step": ..., ...}
    <out_dir>/tensorboard/        scalars, only if `tensorboard` is installed

Only rank 0 monitors; other ranks get a `Monitor(enabled=False)` that does nothing.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

LOG_FILE = "train_log.jsonl"


def perplexity(nll_per_token: float) -> float:
    """exp(NLL per token), inf rather than an overflow error."""
    return math.exp(nll_per_token) if nll_per_token < 700 else math.inf


class Monitor:
    """The bar, the log and the run's throughput: `update` is told of every update taken."""

    def __init__(
        self, out_dir: Path, start_step: int, max_steps: int, enabled: bool, log_every: int = 100
    ) -> None:  # fmt: skip
        self.enabled, self.log_every = enabled, log_every
        self.start_time = time.monotonic()
        self._window_start, self._window_tokens = self.start_time, 0.0  # throughput window
        self._bar = None
        self._log = None
        self._tb = None
        if not enabled:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        self._log = _open_log(out_dir / LOG_FILE)
        self._tb = _tensorboard(out_dir / "tensorboard")
        # disable=None: no bar when stderr is not a terminal (logs, CI); the JSON log remains.
        self._bar = tqdm(
            total=max_steps, initial=start_step, unit="step", file=sys.stderr, disable=None,
            dynamic_ncols=True, desc="train",
        )  # fmt: skip

    def record(self, event: str, step: int, **values: Any) -> None:
        """A line in the JSON log and, for numbers of train/valid events, TensorBoard."""
        if not self.enabled:
            return
        line = {"event": event, "step": step, "time": round(time.time(), 3), **values}
        self._log.write(json.dumps(line, allow_nan=True) + "\n")
        self._log.flush()
        if self._tb is not None and event in ("train", "valid"):
            for key, value in values.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(f"{event}/{key}", value, step)

    @property
    def elapsed_s(self) -> float:
        """Seconds since the run (this process's part of it) started."""
        return time.monotonic() - self.start_time

    def update(self, step: int, tokens: float, smoothed: float, nll: float, lr: float,
               **values: Any) -> None:  # fmt: skip
        """An update taken: its real target tokens and loss sums over them; moves the bar
        and, every `log_every` steps, writes a "train" line with the tokens per second since
        the last one (`values`: more fields for it)."""
        self._window_tokens += tokens
        speed = self._window_tokens / max(time.monotonic() - self._window_start, 1e-9)
        loss, nll = smoothed / max(tokens, 1.0), nll / max(tokens, 1.0)
        if self._bar is not None:
            self._bar.n = step
            self._bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}")
        if step % self.log_every == 0:
            self.record(
                "train", step, loss=loss, nll=nll, ppl=perplexity(nll), lr=lr, tokens=int(tokens),
                tokens_per_s=round(speed, 1), elapsed_s=round(self.elapsed_s, 1), **values,
            )  # fmt: skip
            self._window_start, self._window_tokens = time.monotonic(), 0.0

    def message(self, text: str) -> None:
        """A line on stderr that does not break the progress bar."""
        if self.enabled:
            tqdm.write(text, file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._log is not None:
            self._log.close()
        if self._tb is not None:
            self._tb.close()


def _open_log(path: Path):
    """Append; a line cut short by a killed process is ended before new lines follow."""
    handle = open(path, "a+", encoding="utf-8")
    if handle.tell() > 0:
        handle.seek(handle.tell() - 1)
        if handle.read(1) != "\n":
            handle.write("\n")
    return handle


def _tensorboard(path: Path):
    """A SummaryWriter if `tensorboard` is installed, else None (it is optional)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(path))


@dataclass
class TrainResult:
    """What `train` did; `stopped` is max_steps, max_epochs, max_time, patience or interrupted."""

    out_dir: Path
    steps: int
    epoch: int
    stopped: str
    final_checkpoint: Path | None
    best_checkpoint: Path | None = None
    best_valid_nll: float | None = None
    last_valid: dict | None = None
    train_nll: float | None = None  # per target token, last update
    elapsed_s: float = 0.0
    signal: int | None = None  # the signal that interrupted the run, if one did
    train_flops: float | None = None  # of all its updates (`analysis.flops`), resumed ones too

    @property
    def interrupted(self) -> bool:
        return self.stopped == "interrupted"


def format_summary(result: TrainResult) -> str:
    """The lines printed when a run ends."""
    lines = [
        f"training stopped ({result.stopped}) after {result.steps:,} updates, "
        f"epoch {result.epoch}, {result.elapsed_s / 60:.1f} min",
    ]
    if result.train_nll is not None:
        nll = result.train_nll
        lines.append(f"  last train loss: NLL {nll:.3f}/token, ppl {perplexity(nll):.2f}")
    if result.best_valid_nll is not None:
        lines.append(
            f"  best dev loss:   NLL {result.best_valid_nll:.3f}/token, "
            f"ppl {perplexity(result.best_valid_nll):.2f} ({result.best_checkpoint})"
        )
    if result.last_valid and "bleu" in result.last_valid:
        lines.append(f"  last dev BLEU (greedy, subset): {result.last_valid['bleu']:.2f}")
    if result.train_flops:
        lines.append(f"  training FLOPs:  {result.train_flops:.3g} (aiayn info --flops counts them)")
    lines.append(f"  final checkpoint: {result.final_checkpoint}")
    return "\n".join(lines)
