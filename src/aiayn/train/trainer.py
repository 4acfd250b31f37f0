"""The training loop of sec. 5: token-budget batches, Adam with the eq. 3 schedule, label
smoothing, checkpoints on a clock, exact resume, one CPU or many GPUs.

    result = train(load_config("configs/multi30k.yaml"))        # or `aiayn train CONFIG`
    result = train(config, resume="runs/multi30k")               # continue the newest save

One update (sec. 5.1, "approximately 25000 source tokens and 25000 target tokens") sums the
loss of `accum_steps` micro-batches on each of the N ranks and divides the gradient by the
number of real target tokens in all of them, so N ranks equal one process accumulating N
times as many micro-batches. Logits are computed at real target positions only.
"""

from __future__ import annotations

import math
import signal
import threading
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from aiayn import fast
from aiayn.config import Config, apply_overrides
from aiayn.data.run_data import RunData, load_run_data
from aiayn.device import resolve_precision
from aiayn.errors import ConfigError, TrainingError
from aiayn.fast.attention import kernel_preference
from aiayn.model.transformer import Transformer
from aiayn.train import distributed
from aiayn.train.checkpoints import RunCheckpoints, resume_candidates, step_checkpoints, step_name
from aiayn.train.init_from import init_from as init_weights_from
from aiayn.train.monitor import Monitor, format_summary, perplexity
from aiayn.train.run_state import LoopState, TrainingState, collect_state, restore, write_checkpoint
from aiayn.train.schedule import derive_accum_steps, make_optimizer, noam_lr, set_lr
from aiayn.train.state import seed_everything
from aiayn.train.loss import RealTokenLoss
from aiayn.train.validate import dev_bleu, real_positions, validation_loss


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

    @property
    def interrupted(self) -> bool:
        return self.stopped == "interrupted"


def train(
    config: Config, resume: str | Path | None = None, init_from: str | Path | None = None
) -> TrainResult:
    """Train as `config` says, in this process or, under `torchrun`, in each of its ranks.

    `resume`: a checkpoint directory, or a run's out_dir (its newest checkpoint): model,
    optimizer, schedule, every RNG and the data position are restored, so the run goes on
    as if it had never stopped. `config.model` must match the checkpoint's.
    `init_from`: a checkpoint whose weights a new run starts from (`train/init_from.py`).
    """
    if resume is not None and init_from is not None:
        raise ConfigError("--init-from starts a new run from a checkpoint's weights, --resume "
                          "continues a run: give one")  # fmt: skip
    started_here = not (torch.distributed.is_available() and torch.distributed.is_initialized())
    env = distributed.setup(config.train.device)
    finished = False  # alike on every rank; after an error the others may never arrive
    try:
        result = Trainer(config, env, resume, init_from).run()
        finished = True
        return result
    finally:
        if started_here:
            distributed.teardown(env, synchronize=finished)


def resume_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """The config a run resumed from `path` continues with: the checkpoint's, plus overrides."""
    from aiayn.checkpoint import read_config

    return apply_overrides(read_config(resume_candidates(path)[0]), overrides)


@dataclass
class _Update:
    """One update's global sums and the decisions all ranks agreed on."""

    smoothed: float
    nll: float
    tokens: float
    interrupt: bool
    time_up: bool
    save_due: bool
    outcome: str = "ok"  # ok | bad (non-finite: skipped) | overflow (fp16 scale lowered)
    grad_norm: float = math.nan


@dataclass
class _Clock:
    start: float = field(default_factory=time.monotonic)
    last_save: float = field(default_factory=time.monotonic)
    window_start: float = field(default_factory=time.monotonic)
    window_tokens: float = 0.0


class Trainer:
    """One run: builds everything in `__init__`, trains in `run`."""

    def __init__(
        self, config: Config, env: distributed.DistEnv, resume: str | Path | None,
        init_from: str | Path | None = None,
    ) -> None:  # fmt: skip
        self.env, t = env, config.train
        if Path(t.out_dir).exists() and not Path(t.out_dir).is_dir():
            raise ConfigError(f"train.out_dir={t.out_dir} is a file; it must be a directory")
        self.data: RunData = load_run_data(config, env.rank, env.world_size)
        self.config = config = self.data.config  # vocabulary sizes taken from the data
        self.precision = resolve_precision(t.precision, env.device)  # "auto" decided here
        if self.precision == "fp16" and env.device.type != "cuda":
            raise ConfigError("train.precision=fp16 needs a CUDA GPU; use bf16 or fp32 on CPU")
        seed_everything(t.seed)
        self.model = Transformer(config.model).to(env.device)
        if init_from is not None:  # fine-tuning: a checkpoint's weights, all else this run's
            data = self.data
            init_weights_from(self.model, init_from, config, data.src_vocab, data.tgt_vocab)
        # The training objective, with its model; the fast path swaps in its pieces (both
        # over the same parameters) unless train.fast is off (--reference).
        self.loss = RealTokenLoss(self.model, t.eps_ls)
        if t.fast:
            self.loss = fast.apply(self.loss, compiled=t.compile)
        if env.rank:  # the same initial weights everywhere, but each rank its own dropout
            seed_everything(t.seed + env.rank)
        self.params = list(self.model.parameters())
        self.optimizer = make_optimizer(self.params, t)
        self.scaler = torch.amp.GradScaler(env.device.type, enabled=self.precision == "fp16")
        derived = derive_accum_steps(self.data.sampler, t.update_tokens, env)
        loop = LoopState(accum_steps=t.accum_steps or derived)
        self.training_state = TrainingState(
            self.model, self.optimizer, self.scaler, loop, self.data.sampler
        )
        self.checkpoints = RunCheckpoints(t.out_dir, t.keep_last)
        candidates = None if resume is None else resume_candidates(resume)
        self._refuse_another_runs_dir(candidates)
        self.resumed_from = (
            None if candidates is None
            else restore(self.training_state, candidates, self.data, env)
        )  # fmt: skip
        self.forward = self.loss
        if env.distributed:
            self.forward = distributed.wrap_ddp(self.forward, env)
        self.batches = self.data.micro_batches()
        self.clock = _Clock()
        self.last_saved: Path | None = None  # a resumed checkpoint of this run counts as saved
        resumed = self.resumed_from
        if resumed is not None and resumed.parent.resolve() == self.checkpoints.dir.resolve():
            self.last_saved = resumed
        self.signal: int | None = None

    @property
    def state(self) -> LoopState:
        """The loop's counters (a resume replaces them in `training_state`)."""
        return self.training_state.loop

    def _refuse_another_runs_dir(self, candidates: list[Path] | None) -> None:
        """A run's checkpoints in train.out_dir are continued (--resume from that run), never
        mixed with a new run's: its pruning would delete the new run's checkpoints as the
        older ones (or the old run's), and `best/` would be overwritten by a worse model."""
        found = step_checkpoints(self.checkpoints.dir)
        ours = self.checkpoints.dir.resolve()
        if found and not (candidates and candidates[0].parent.resolve() == ours):
            raise ConfigError(
                f"train.out_dir={self.config.train.out_dir} already holds a run (checkpoints up "
                f"to {found[-1][1].name}); continue it with --resume "
                f"{self.config.train.out_dir}, or set another train.out_dir"
            )

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> TrainResult:
        t, env = self.config.train, self.env
        self.monitor = Monitor(Path(t.out_dir), self.state.step, t.max_steps, env.is_main)
        if env.is_main:
            self.checkpoints.clean_temporaries()
            if self.resumed_from is not None:
                aside = self.checkpoints.set_aside_after(self.state.step)
                if aside is not None:
                    target, moved = aside
                    warnings.warn(
                        f"resumed from step {self.state.step}: moved the newer "
                        f"{', '.join(moved)} to {target}, so that this run's checkpoints "
                        "are one line of history"
                    )
        self.monitor.record(
            "start", self.state.step, resumed_from=str(self.resumed_from), precision=self.precision,
            world_size=env.world_size, accum_steps=self.state.accum_steps,
        )  # fmt: skip
        self.model.train()
        try:
            with _StopSignals(self):
                stopped = self._loop()
            result = self._finish(stopped)
        finally:
            self.monitor.close()
        return result

    def _loop(self) -> str:
        t = self.config.train
        while True:
            if self.state.step >= t.max_steps:
                return "max_steps"
            if t.max_epochs and self.data.epochs_done() >= t.max_epochs:
                return "max_epochs"
            update = self._update()
            stepped = update.outcome == "ok"
            step = self.state.step
            if stepped and t.valid_every_steps and step % t.valid_every_steps == 0:
                if self._validate():
                    return "patience"
            every = t.save_every_steps
            if update.save_due or (stepped and every and step % every == 0):
                self._save()
            if update.interrupt:
                return "interrupted"
            if update.time_up:
                return "max_time"

    def _finish(self, stopped: str) -> TrainResult:
        """Validate and save the final state (unless just done), print the summary."""
        step = self.state.step
        validated = self.data.valid is None or self.state.valid_step == step
        if stopped != "interrupted" and not validated:
            self._validate()
        if self.last_saved is None or self.last_saved.name != step_name(step):
            self._save()
        digests = distributed.gather_to_main(distributed.weights_digest(self.model), self.env)
        result = TrainResult(
            out_dir=Path(self.config.train.out_dir), steps=step, epoch=self.data.sampler.epoch,
            stopped=stopped, final_checkpoint=self.last_saved,
            best_checkpoint=self.checkpoints.best, best_valid_nll=self.state.best_valid_nll,
            last_valid=self.state.last_valid, train_nll=self.state.last_train_nll,
            elapsed_s=time.monotonic() - self.clock.start, signal=self.signal,
        )  # fmt: skip
        self.monitor.record("end", step, stopped=stopped, elapsed_s=round(result.elapsed_s, 1),
                            rank_weights_sha256=digests)  # fmt: skip
        if digests and len(set(digests)) > 1:
            self.monitor.message("aiayn train: warning: ranks ended with different weights")
        self.monitor.message(format_summary(result))
        return result

    # --- one update ----------------------------------------------------------------------
    def _update(self) -> _Update:
        t, env = self.config.train, self.env
        sums = torch.zeros(2, dtype=torch.float64, device=env.device)  # smoothed, nll
        tokens = 0
        for i in range(self.state.accum_steps):
            last = i == self.state.accum_steps - 1
            sync = nullcontext() if last or not env.distributed else self.forward.no_sync()
            batch = next(self.batches)
            with sync:
                smoothed, nll = self._loss(batch)
                self.scaler.scale(smoothed / t.update_tokens).backward()
            sums += torch.stack([smoothed.detach(), nll.detach()]).double()
            tokens += batch.n_tgt_tokens
        smoothed, nll, total, *votes = distributed.all_reduce_sum(
            [*sums.tolist(), tokens, *self._wants()], env
        )
        update = _Update(smoothed, nll, total, *(vote > 0 for vote in votes))
        self.state.tokens_seen += int(update.tokens)
        if not math.isfinite(update.smoothed):
            update.outcome = "bad"
        else:
            update.outcome, update.grad_norm = self._step(update.tokens)
        self.optimizer.zero_grad(set_to_none=True)
        self._account(update)
        return update

    def _loss(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(smoothed sum, NLL sum) of one micro-batch, over its real target tokens."""
        positions, target = real_positions(batch.tgt_out, self.config.model.pad_id, self.env.device)
        batch = batch.to(self.env.device, non_blocking=True)
        with self._forward_context():
            return self.forward(batch.src, batch.tgt_in, positions, target)

    def _step(self, tokens: float) -> tuple[str, float]:
        """Scale the summed gradients to a per-token mean, clip, take the Adam step."""
        t = self.config.train
        self.scaler.unscale_(self.optimizer)
        # DDP averaged over ranks: x world_size restores the sum; / tokens makes it a mean.
        factor = t.update_tokens * self.env.world_size / tokens
        for p in self.params:
            if p.grad is not None:
                p.grad.mul_(factor)
        norm = nn.utils.clip_grad_norm_(self.params, t.clip_norm or math.inf).item()
        if not math.isfinite(norm) and not self.scaler.is_enabled():
            return "bad", norm
        set_lr(self.optimizer, self._lr(self.state.step + 1))
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scaler.is_enabled() and self.scaler.get_scale() < scale:
            return "overflow", norm  # fp16: the scaler skipped this step and lowered its scale
        self.state.step += 1
        return "ok", norm

    def _lr(self, step: int) -> float:
        t = self.config.train
        return noam_lr(step, self.config.model.d_model, t.warmup, t.lr_scale)

    def _wants(self) -> list[float]:
        """This rank's votes: stop (signal), stop (time limit), save (clock); summed over ranks."""
        t, now = self.config.train, time.monotonic()
        time_up = t.max_time_minutes and now - self.clock.start >= 60 * t.max_time_minutes
        save_due = t.save_every_minutes and now - self.clock.last_save >= 60 * t.save_every_minutes
        main = self.env.is_main
        return [float(self.signal is not None), float(main and time_up), float(main and save_due)]

    def _account(self, update: _Update) -> None:
        """Count bad updates (stop after max_bad_steps in a row), log, move the bar."""
        t, step = self.config.train, self.state.step
        if update.outcome == "bad":
            self.state.bad_steps += 1
            self.monitor.message(
                f"aiayn train: warning: non-finite loss or gradient at update {step + 1}; skipped "
                f"({self.state.bad_steps} in a row, stopping at {t.max_bad_steps})"
            )
            self.monitor.record("skip", step, reason="non-finite", in_a_row=self.state.bad_steps)
            if self.state.bad_steps >= t.max_bad_steps:
                kept = (f"the last good checkpoint is {self.last_saved}" if self.last_saved
                        else "no checkpoint had been saved yet")  # fmt: skip
                raise TrainingError(
                    f"{self.state.bad_steps} updates in a row had a non-finite loss or gradient "
                    f"(after update {step}); {kept}. Lower the learning rate (train.lr_scale), "
                    f"use train.precision=fp32 or set train.clip_norm"
                )
            return
        self.state.bad_steps = 0
        if update.outcome == "overflow":
            self.monitor.record("skip", step, reason="fp16 overflow", scale=self.scaler.get_scale())
            return
        tokens = max(update.tokens, 1.0)
        self.state.last_train_nll = update.nll / tokens
        clock = self.clock
        clock.window_tokens += update.tokens
        elapsed = max(time.monotonic() - clock.window_start, 1e-9)
        speed = clock.window_tokens / elapsed
        self.monitor.progress(step, update.smoothed / tokens, self._lr(step), speed)
        if step % t.log_every_steps == 0:
            self.monitor.record(
                "train", step, epoch=self.data.sampler.epoch, loss=update.smoothed / tokens,
                nll=update.nll / tokens, ppl=perplexity(update.nll / tokens), lr=self._lr(step),
                tokens=int(update.tokens), tokens_per_s=round(speed, 1),
                grad_norm=update.grad_norm, elapsed_s=round(time.monotonic() - clock.start, 1),
            )  # fmt: skip
            clock.window_start, clock.window_tokens = time.monotonic(), 0.0

    @contextmanager
    def _forward_context(self):
        """Where the loss's forward runs: autocast for `train.precision`, and on the fast
        path the GPU attention kernel of `train.attention_kernel`."""
        t, device = self.config.train, self.env.device
        if self.precision == "fp32":
            autocast = nullcontext()
        else:
            dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
            autocast = torch.autocast(device.type, dtype=dtype)
        kernel = kernel_preference(t.attention_kernel, device) if t.fast else nullcontext()
        with autocast, kernel:
            yield

    # --- validation and checkpoints ------------------------------------------------------
    def _validate(self) -> bool:
        """Dev loss (and BLEU); save `best` on a new best NLL. True when patience runs out."""
        t, env, state = self.config.train, self.env, self.state
        if self.data.valid is None:
            return False
        stats = validation_loss(self.loss, self.data.valid, self.config.data.max_tokens,
                                env, self._forward_context())  # fmt: skip
        if t.valid_bleu_lines and env.is_main:
            stats["bleu"] = dev_bleu(
                self.model, self.data.valid, self.data.tgt_vocab, t.valid_bleu_lines,
                self.config.data.max_tokens, env.device,
            )  # fmt: skip
        if not math.isfinite(stats["nll"]):
            # Finite weights whose outputs are not: the run has diverged. Nothing after this
            # is worth keeping as best, and the step checkpoints since the last good dev loss
            # may hold the same weights, so the message points to `best/`.
            best = self.checkpoints.best if state.best_valid_nll is not None else None
            kept = (f"the best model so far is {best} (dev NLL {state.best_valid_nll:.3f})"
                    if best is not None else "no validation had a finite loss before")  # fmt: skip
            raise TrainingError(
                f"the dev loss is {stats['nll']} after update {state.step}: the model has "
                f"diverged; {kept}. Lower the learning rate (train.lr_scale) or set "
                "train.clip_norm"
            )
        state.valid_step, state.last_valid = state.step, stats
        if state.best_valid_nll is None or stats["nll"] < state.best_valid_nll:
            state.best_valid_nll, state.stale_validations = stats["nll"], 0
            if env.is_main:
                run, data = self.training_state, self.data
                self.checkpoints.save_best(lambda path: write_checkpoint(path, run, data, None))
        else:
            state.stale_validations += 1
        self.monitor.record("valid", state.step, **stats)
        bleu = f", BLEU {stats['bleu']:.2f}" if "bleu" in stats else ""
        self.monitor.message(
            f"update {state.step}: dev NLL {stats['nll']:.3f}, ppl {stats['ppl']:.2f}{bleu}"
            f"{' (best)' if state.stale_validations == 0 else ''}"
        )
        return bool(t.patience) and state.stale_validations >= t.patience

    def _save(self) -> Path:
        """A step checkpoint with trainer state (every rank takes part: RNG states)."""
        payload = collect_state(self.training_state, self.env)
        self.last_saved = self.checkpoints.dir / step_name(self.state.step)
        if self.env.is_main:
            run, data = self.training_state, self.data
            write = lambda path: write_checkpoint(path, run, data, payload)  # noqa: E731
            self.checkpoints.save_step(self.state.step, write)
            self.monitor.record("checkpoint", self.state.step, path=str(self.last_saved))
        self.clock.last_save = time.monotonic()
        return self.last_saved


class _StopSignals:
    """Ctrl-C (SIGINT) or SIGTERM: finish the update, save a checkpoint, stop. A second
    signal interrupts at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.previous: dict[int, object] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.trainer.signal is not None:
            raise KeyboardInterrupt
        self.trainer.signal = signum
        self.trainer.monitor.message(
            f"aiayn train: {signal.Signals(signum).name}: saving a checkpoint after this update "
            "(again to stop at once)"
        )

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
