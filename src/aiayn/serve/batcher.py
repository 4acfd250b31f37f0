"""Dynamic batching: concurrent requests gathered into token-budget batches for one worker.

The model runs in one worker thread (which may hand each batch to the model's own process:
`worker.py`), never in the server's event loop. A request becomes a
`Job` (its sentences and decoding options) in a queue; the worker takes the oldest job and
adds the jobs behind it that decode with the same options until the batch would pass
`max_batch_tokens` padded source tokens (the longest sentence times the sentences, as
`translate.token_batches` counts them) or `max_wait_ms` have passed since the oldest
arrived, or since the worker finished its last batch if that is later; then it runs the
batch as one call. `max_batch_tokens=1, max_wait_ms=0` serves one
request at a time, for comparison. A job whose caller gave up (its future cancelled) before
the worker took it is dropped unrun.

Several models (`models.py`) have a batcher each, and the batchers share one `Turns`: at most
`slots` batches run at once (the service gives one per `--threads` share of the CPU's cores,
one on a GPU), in the order the batches were ready, so a model's batch waits behind at most
one batch of each other model, never behind a queue of them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol


class Runner(Protocol):
    """What the worker calls: one batch of sentences, all with the same `options`."""

    def run(self, sources: Sequence[Any], options: Hashable, extras: Sequence[Any]) -> list: ...

    def close(self) -> None:
        """Free what the runner holds (its process, say); the worker calls it as it stops."""


@dataclass
class Job:
    """One request: its sentences as the runner takes them (the service's: their source ids,
    encoded once, before they queue), their source lengths in tokens, and how to decode
    them. `extras[i]` travels with sentence i to the runner (e.g. whether to return its
    attention)."""

    sources: list[Any]
    lengths: list[int]
    options: Hashable
    extras: list[Any]
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)


class QueueFull(Exception):
    """The queue holds `max_queue` sentences already."""


class NotReady(Exception):
    """The model is still loading (or failed to load: the message says why)."""


@dataclass
class Stats:
    requests: int = 0
    sentences: int = 0
    batches: int = 0  # model calls: one per batch


class Turns:
    """At most `slots` batches at once, first ready first run: a fair semaphore (a bare
    Semaphore or Lock lets a waiter be passed over again and again). One slot per share of
    the cores, so that two models' batches run side by side where each would leave a core
    idle, and one at a time where each already uses them all."""

    def __init__(self, slots: int = 1) -> None:
        if slots < 1:
            raise ValueError(f"Turns needs at least one slot, got {slots}")
        self.slots = slots
        self._cond = threading.Condition()
        self._line: deque[object] = deque()  # the waiters, in the order they asked
        self._running = 0

    def __enter__(self) -> None:
        me = object()
        with self._cond:
            self._line.append(me)
            while self._line[0] is not me or self._running >= self.slots:
                self._cond.wait()
            self._line.popleft()
            self._running += 1
            self._cond.notify_all()  # the next in line may fit in another slot

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()


class Batcher:
    """A queue of jobs and the worker thread that runs them in batches.

    `load` runs first in the worker (loading a model takes seconds, and it should decode
    once, so that `ready` means "has translated") and returns the Runner; if it fails,
    `error` says why and `on_error` (when set) is called with that message.
    """

    def __init__(
        self,
        load: Callable[[], Runner],
        max_batch_tokens: int,
        max_wait_ms: float,
        max_queue: int,
        turns: Turns | None = None,
    ) -> None:
        self.load = load
        self.turns = turns or Turns()  # shared by the batchers of one service
        self.on_error: Callable[[str], None] | None = None
        self.max_batch_tokens, self.max_wait = max_batch_tokens, max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.stats = Stats()
        self.ready, self.error = False, None  # error: why loading failed
        self._queue: deque[Job] = deque()
        self._waiting = 0  # sentences in the queue
        self._cond = threading.Condition()
        self._stop = False
        self._free_since = 0.0  # when the worker finished its last batch
        self._thread = threading.Thread(target=self._work, name="aiayn-model", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the worker after its batch; jobs still queued fail with NotReady."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        with self._cond:
            while self._queue:
                job = self._queue.popleft()
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(NotReady("the server is shutting down"))
            self._waiting = 0

    def submit(self, job: Job) -> Future:
        """Queue `job`; its future gets the runner's results for its sentences, in order."""
        with self._cond:
            if self._stop:
                raise NotReady("the server is shutting down")
            if not self.ready:
                raise NotReady(self.error or "the model is still loading")
            if self._waiting + len(job.sources) > self.max_queue:
                raise QueueFull(
                    f"the queue is full ({self._waiting} sentences waiting, limit --max-queue "
                    f"{self.max_queue})"
                )
            self._queue.append(job)
            self._waiting += len(job.sources)
            self.stats.requests += 1
            self._cond.notify_all()
        return job.future

    def _work(self) -> None:
        try:
            runner = self.load()
        except Exception as err:  # a bad checkpoint: /ready says why; nothing is served
            self.error = f"the model could not be loaded: {err}"
            if self.on_error is not None:
                self.on_error(self.error)
            return
        with self._cond:
            self.ready = True
        try:
            while (batch := self._next_batch()) is not None:
                self._run(runner, batch)
        finally:
            runner.close()

    def _cost(self, jobs: list[Job]) -> int:
        """Padded source tokens of `jobs` decoded as one batch: longest x sentences."""
        lengths = [n for job in jobs for n in job.lengths]
        return max(lengths, default=0) * len(lengths)

    def _next_batch(self) -> list[Job] | None:
        """Wait for a job, then gather compatible ones until the budget or the wait is up."""
        with self._cond:
            while True:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return None
                first = self._queue[0]
                # Wait from when the worker is free: requests that came while it ran a batch
                # may still be in the event loop, which shares the interpreter with it.
                deadline = max(first.arrived, self._free_since) + self.max_wait
                while not self._stop:
                    batch = self._fitting(first)
                    full = self._cost(batch) >= self.max_batch_tokens or len(batch) < sum(
                        job.options == first.options for job in self._queue
                    )  # a compatible job that does not fit: nothing to wait for
                    left = deadline - time.monotonic()
                    if full or left <= 0:
                        break
                    self._cond.wait(left)
                batch = [job for job in self._fitting(first) if self._take(job)]
                if batch:
                    return batch

    def _fitting(self, first: Job) -> list[Job]:
        """`first` and the jobs behind it with its options, while the budget holds."""
        batch = [first]
        for job in list(self._queue)[1:]:
            if job.options == first.options and self._cost([*batch, job]) <= self.max_batch_tokens:
                batch.append(job)
        return batch

    def _take(self, job: Job) -> bool:
        """Remove `job` from the queue; False if its caller has given up on it."""
        self._queue.remove(job)
        self._waiting -= len(job.sources)
        return job.future.set_running_or_notify_cancel()

    def _run(self, runner: Runner, batch: list[Job]) -> None:
        sources = [x for job in batch for x in job.sources]
        extras = [e for job in batch for e in job.extras]
        try:
            with self.turns:
                results = runner.run(sources, batch[0].options, extras)
        except Exception as err:  # e.g. out of memory: the callers get it, the worker goes on
            for job in batch:
                job.future.set_exception(err)
            return
        self._free_since = time.monotonic()
        self.stats.batches += 1
        self.stats.sentences += len(sources)
        start = 0
        for job in batch:
            job.future.set_result(results[start : start + len(job.sources)])
            start += len(job.sources)
