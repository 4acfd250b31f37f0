"""A model in its own process: the batcher's runner, decoding outside the server's interpreter.

A decoder step is hundreds of small torch calls, and the Python between them holds the
interpreter lock. In one process, two models (or one model and the HTTP layer) take turns
on that lock, and a second core stays half idle however the batches are scheduled. So by
default (`aiayn serve --worker process`) each model runs in a child process of its own:

    runner = ProcessRunner(Load(path, "cpu", int8=False, threads=1, max_tokens=4096))
    runner.start()                                  # loads, decodes once; errors raise here
    results = runner.run(sources, options, wants)   # as TranslatorRunner.run, in the child
    runner.close()

The child is `python -m aiayn.serve.worker`: it reads length-prefixed JSON frames on its
stdin and answers on its stdout (its own prints go to stderr), so nothing but plain data
crosses, never a pickle. The server keeps only the vocabularies, to encode requests. A
child that dies (killed for memory, say) fails the batch it was running with an error
saying so, and is started again for the next one; a reply that is not a whole frame of
JSON is treated the same way. The child ignores Ctrl-C and SIGTERM sent to the server's
process group: it ends when the server closes its input, after answering the queue.
`--worker thread` decodes in the server's process, as one thread per model.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import IO, Any

from aiayn.serve.runner import Load, Options, Result, Wants, load_runner

HEADER = struct.Struct("<Q")  # each frame: its length in bytes, then that much UTF-8 JSON


class WorkerError(RuntimeError):
    """The child could not load its model (the message is the reason), or failed a batch."""


class WorkerExited(WorkerError):
    """The child exited, or broke the protocol, and was stopped: the server answers 503
    (the next batch starts another)."""


def write_frame(stream: IO[bytes], data: Any) -> None:
    body = json.dumps(data).encode()
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any | None:
    """The next frame's data; None at the end of the stream (the other side has gone)."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        return None
    return json.loads(body)


def result_from(data: dict) -> Result:
    """A `Result` from its JSON form (tuples travel as lists)."""
    alignment = data["alignment"]
    return Result(
        nbest=[(text, score) for text, score in data["nbest"]], attention=data["attention"],
        alignment=None if alignment is None else [(s, t) for s, t in alignment],
        tokens=data["tokens"], log_probs=data["log_probs"],
    )  # fmt: skip


class ProcessRunner:
    """`runner.TranslatorRunner` in a child process (see the module doc); only the batcher's
    worker thread calls it."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.process: subprocess.Popen | None = None
        self.search_kind: str | None = None  # set once the child has loaded

    def start(self) -> None:
        """Start the child and wait until it has loaded the model and decoded once."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "aiayn.serve.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )  # fmt: skip
        self._send(asdict(self.load))
        reply = self._reply("while loading its model")
        if "error" in reply:
            self.close()
            raise WorkerError(reply["error"])
        self.search_kind = reply["search_kind"]  # /info: what runs the child's search

    def run(self, sources: Sequence[list[int]], options: Options, extras: Sequence[Wants]
            ) -> list[Result]:  # fmt: skip
        if self.process is None or self.process.poll() is not None:
            self.start()  # the first batch after a child died
        self._send({"sources": list(sources), "options": asdict(options),
                    "wants": [asdict(wants) for wants in extras]})  # fmt: skip
        reply = self._reply("during a batch; it is started again for the next one")
        if "error" in reply:
            raise WorkerError(reply["error"])
        return [result_from(data) for data in reply["results"]]

    def _send(self, data: dict) -> None:
        try:
            write_frame(self.process.stdin, data)
        except OSError:
            pass  # the child has gone (a broken pipe): `_reply` says how

    def _reply(self, when: str) -> dict:
        """The child's next frame; where there is none, or it is not JSON, the child is
        stopped and `WorkerExited` says so, and `when`."""
        try:
            reply = read_frame(self.process.stdout)
        except ValueError:  # not JSON: the stream is out of step, nothing after it is sure
            reply = None
        if not isinstance(reply, dict):
            process = self.process
            self.close(wait=False)
            raise WorkerExited(f"the model's worker process exited (code {process.returncode}) "
                               f"{when}; its errors are in the server's log")  # fmt: skip
        return reply

    def close(self, wait: bool = True) -> None:
        """End the child: it exits when its input closes (at once, without `wait`)."""
        if self.process is None:
            return
        process, self.process = self.process, None
        try:
            process.stdin.close()
        except OSError:
            pass  # a broken pipe: the child has gone
        try:
            process.wait(30 if wait else 0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def serve_frames(inp: IO[bytes], out: IO[bytes]) -> None:
    """The child's loop: a `Load` frame, then one job frame after another until `inp` ends.
    An error loading is answered and ends the loop; an error in a job is answered and the
    loop goes on (as the thread worker does)."""
    load = read_frame(inp)
    if load is None:
        return
    try:
        runner = load_runner(Load(**load))
    except Exception as err:
        write_frame(out, {"error": str(err)})  # the batcher says it could not be loaded
        return
    write_frame(out, {"ready": True, "search_kind": runner.search_kind})
    while (job := read_frame(inp)) is not None:
        try:
            options = Options(**job["options"])
            wants = [Wants(**w) for w in job["wants"]]
            results = runner.run(job["sources"], options, wants)
        except Exception as err:  # e.g. out of memory: this batch fails, the child goes on
            write_frame(out, {"error": f"{type(err).__name__}: {err}"})
            continue
        write_frame(out, {"results": [asdict(r) for r in results]})


def main() -> None:
    """The child's entry: frames on the process's own stdout, which is then pointed at
    stderr, so that a print or a library's message cannot corrupt a frame. Signals meant
    for the server are ignored: the child ends when its input does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve_frames(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
