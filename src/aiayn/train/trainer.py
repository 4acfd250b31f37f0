"""The training loop of sec. 5: token-budget batches, Adam with the eq. 3 schedule, label
smoothing, checkpoints on a clock, exact resume, one CPU or many GPUs.

    result = train(load_config("configs/multi30k.yaml"))        # or `aiayn train CONFIG`
    result = train(config, resume="runs/multi30k")               # continue the newest save

One update (sec. 5.1, "approximately 25000 source tokens and 25000 target tokens") sums the
loss of `accum_steps` micro-batches on each of the N ranks and divides the gradient by the
number of real target tokens in all of them, so N ranks equal one process accumulating N
times as many micro-batches. Logits are computed at real target positions only.

Around the loop: `run_dir.py` (out_dir), `resume.py` (what a checkpoint saves), `monitor.py`
(bar, log, throughput), `aiayn.device` (autocast), `signals.py` (Ctrl-C).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from aiayn import fast
from aiayn.analysis.flops import training_flops
from aiayn.config import Config
from aiayn.data.run_data import RunData, load_run_data
from aiayn.device import autocast, resolve_precision
from aiayn.loss import RealTokenLoss
from aiayn.model.transformer import Transformer
from aiayn.train import distributed
from aiayn.train.failures import diverged, too_many_bad_updates
from aiayn.train.init_from import init_from as init_weights_from
from aiayn.train.monitor import Monitor, TrainResult, format_summary
from aiayn.train.resume import LoopState, TrainingState, collect_state, restore, write_checkpoint
from aiayn.train.run_dir import RunDir, resume_candidates, step_name
from aiayn.train.schedule import adam_step, derive_accum_steps, make_optimizer, noam_lr
from aiayn.train.signals import StopSignals
from aiayn.train.state_json import seed_everything
from aiayn.train.validate import dev_bleu, real_positions, validation_loss


def train(
    config: Config, resume: str | Path | None = None, init_from: str | Path | None = None
) -> TrainResult:
    """Train as `config` says, in this process or, under `torchrun`, in each of its ranks.

    `resume`: a checkpoint directory, or a run's out_dir (its newest checkpoint): model,
    optimizer, schedule, every RNG and the data position are restored, so the run goes on
    as if it had never stopped. `config.model` must match the checkpoint's.
    `init_from`: a checkpoint whose weights a new run starts from (`train/init_from.py`).
    """
    with distributed.process_group(config.train.device) as env:
        return Trainer(config, env, resume, init_from).run()


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


class Trainer:
    """One run: builds everything in `__init__`, trains in `run`."""

    def __init__(
        self, config: Config, env: distributed.DistEnv, resume: str | Path | None,
        init_from: str | Path | None = None,
    ) -> None:  # fmt: skip
        self.env, t = env, config.train
        candidates = None if resume is None else resume_candidates(resume)
        self.run_dir = RunDir(t.out_dir, t.keep_last, candidates[0] if candidates else None)
        self.data: RunData = load_run_data(config, env.rank, env.world_size)
        self.config = config = self.data.config  # vocabulary sizes taken from the data
        self.precision = resolve_precision(t.precision, env.device)  # "auto" decided here
        seed_everything(t.seed)
        self.model = Transformer(config.model).to(env.device)
        if init_from is not None:  # fine-tuning: a checkpoint's weights, all else this run's
            init_weights_from(self.model, init_from, config, *self.data.vocabs, resume is not None)
        # The training objective, with its model: the fast path's, over the same parameters,
        # unless train.fast is off (--reference).
        core = RealTokenLoss(self.model, t.eps_ls)
        fast_path = dict(compiled=t.compile, attention_kernel=t.attention_kernel)
        self.loss = fast.for_training(core, **fast_path) if t.fast else core
        if env.rank:  # the same initial weights everywhere, but each rank its own dropout
            seed_everything(t.seed + env.rank)
        self.params = list(self.model.parameters())
        self.optimizer = make_optimizer(self.params, t)
        self.scaler = torch.amp.GradScaler(env.device.type, enabled=self.precision == "fp16")
        derived = derive_accum_steps(self.data.sampler, t.update_tokens, env)
        self.training_state = TrainingState(self.model, self.optimizer, self.scaler,
                                            LoopState(accum_steps=t.accum_steps or derived),
                                            self.data.sampler)  # fmt: skip
        self.resumed_from = candidates and restore(self.training_state, candidates, self.data, env)
        self.forward = distributed.wrap_ddp(self.loss, env) if env.distributed else self.loss
        self.batches = self.data.micro_batches()
        resumed = self.resumed_from  # counts as saved if it is one of this run's
        self.last_saved = resumed if resumed and self.run_dir.holds(resumed) else None
        self.last_save_time = time.monotonic()
        self.signal: int | None = None

    @property
    def state(self) -> LoopState:
        """The loop's counters (a resume replaces them in `training_state`)."""
        return self.training_state.loop

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> TrainResult:
        """Train until `train.max_steps`, the time limit or a stop signal, saving on the
        way; -> why it stopped and what it left (`TrainResult`)."""
        t, env = self.config.train, self.env
        self.monitor = Monitor(Path(t.out_dir), self.state.step, t.max_steps, env.is_main,
                               t.log_every_steps)  # fmt: skip
        if env.is_main:
            self.run_dir.open_at(self.state.step, resumed=self.resumed_from is not None)
        self.monitor.record("start", self.state.step, resumed_from=str(self.resumed_from),
                            precision=self.precision, world_size=env.world_size,
                            accum_steps=self.state.accum_steps)  # fmt: skip
        self.model.train()
        try:
            with StopSignals(self):
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
            best_checkpoint=self.run_dir.best, best_valid_nll=self.state.best_valid_nll,
            last_valid=self.state.last_valid, train_nll=self.state.last_train_nll,
            elapsed_s=self.monitor.elapsed_s, signal=self.signal,
            train_flops=training_flops(self.config, self.state.tokens_seen),
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
        with autocast(self.precision, self.env.device):
            return self.forward(batch.src, batch.tgt_in, positions, target)

    def _step(self, tokens: float) -> tuple[str, float]:
        """The Adam step of the summed gradients, as a per-token mean; -> (outcome, norm)."""
        t = self.config.train
        # DDP averaged over ranks: x world_size restores the sum; / tokens makes it a mean.
        factor = t.update_tokens * self.env.world_size / tokens
        outcome, norm = adam_step(self.optimizer, self.scaler, self.params, factor,
                                  t.clip_norm, self._lr(self.state.step + 1))  # fmt: skip
        if outcome == "ok":
            self.state.step += 1
        return outcome, norm

    def _lr(self, step: int) -> float:
        t = self.config.train
        return noam_lr(step, self.config.model.d_model, t.warmup, t.lr_scale)

    def _wants(self) -> list[float]:
        """This rank's votes: stop (signal), stop (time limit), save (clock); summed over ranks."""
        t, main = self.config.train, self.env.is_main
        time_up = t.max_time_minutes and self.monitor.elapsed_s >= 60 * t.max_time_minutes
        since_save = time.monotonic() - self.last_save_time
        save_due = t.save_every_minutes and since_save >= 60 * t.save_every_minutes
        return [float(self.signal is not None), float(main and time_up), float(main and save_due)]

    def _account(self, update: _Update) -> None:
        """Count bad updates (stop after max_bad_steps in a row); tell the monitor the rest."""
        t, step = self.config.train, self.state.step
        if update.outcome == "bad":
            self.state.bad_steps += 1
            self.monitor.message(
                f"aiayn train: warning: non-finite loss or gradient at update {step + 1}; skipped "
                f"({self.state.bad_steps} in a row, stopping at {t.max_bad_steps})"
            )
            self.monitor.record("skip", step, reason="non-finite", in_a_row=self.state.bad_steps)
            if self.state.bad_steps >= t.max_bad_steps:
                raise too_many_bad_updates(self.state.bad_steps, step, self.last_saved)
            return
        self.state.bad_steps = 0
        if update.outcome == "overflow":
            self.monitor.record("skip", step, reason="fp16 overflow", scale=self.scaler.get_scale())
            return
        self.state.last_train_nll = update.nll / max(update.tokens, 1.0)
        self.monitor.update(step, update.tokens, update.smoothed, update.nll, self._lr(step),
                            epoch=self.data.sampler.epoch, grad_norm=update.grad_norm)  # fmt: skip

    # --- validation and checkpoints ------------------------------------------------------
    def _validate(self) -> bool:
        """Dev loss (and BLEU); save `best` on a new best NLL. True when patience runs out."""
        t, env, state = self.config.train, self.env, self.state
        if self.data.valid is None:
            return False
        stats = validation_loss(self.loss, self.data.valid, self.config.data.max_tokens,
                                env, autocast(self.precision, env.device))  # fmt: skip
        if t.valid_bleu_lines and env.is_main:
            stats["bleu"] = dev_bleu(self.model, self.data.valid, self.data.tgt_vocab,
                                     t.valid_bleu_lines, self.config.data.max_tokens, env.device)
        if not math.isfinite(stats["nll"]):
            best = self.run_dir.best if state.best_valid_nll is not None else None
            raise diverged(stats["nll"], state.step, best, state.best_valid_nll)
        state.valid_step, state.last_valid = state.step, stats
        if state.best_valid_nll is None or stats["nll"] < state.best_valid_nll:
            state.best_valid_nll, state.stale_validations = stats["nll"], 0
            if env.is_main:
                run, data = self.training_state, self.data
                self.run_dir.save_best(lambda path: write_checkpoint(path, run, data, None))
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
        self.last_saved = self.run_dir.dir / step_name(self.state.step)
        if self.env.is_main:
            run, data = self.training_state, self.data
            write = lambda path: write_checkpoint(path, run, data, payload)  # noqa: E731
            self.run_dir.save_step(self.state.step, write)
            self.monitor.record("checkpoint", self.state.step, path=str(self.last_saved))
        self.last_save_time = time.monotonic()
        return self.last_saved
