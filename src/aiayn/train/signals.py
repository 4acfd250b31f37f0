"""Ctrl-C (SIGINT) and SIGTERM during training: finish the update, save, stop.

    with StopSignals(trainer):       # sets trainer.signal; the loop saves and returns
        trainer.loop()
"""

from __future__ import annotations

import signal
import threading


class StopSignals:
    """Ctrl-C (SIGINT) or SIGTERM: finish the update, save a checkpoint, stop. A second
    signal interrupts at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, trainer) -> None:
        """`trainer`: has `signal` (set here) and `monitor` (told here)."""
        self.trainer = trainer
        self.previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
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
