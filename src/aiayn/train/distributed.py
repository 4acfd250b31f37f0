"""One process, or one of many under `torchrun` (DistributedDataParallel).

    torchrun --nproc_per_node 8 -m aiayn train configs/wmt14_en_de_base.yaml
    torchrun --nnodes 2 --node_rank R --master_addr HOST --nproc_per_node 8 -m aiayn train ...

`torchrun` sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; the process
group starts from them (`env://`), with nccl on GPUs and gloo on CPUs. Without them (or
with WORLD_SIZE=1) the trainer runs as a single process and nothing here communicates.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn

from aiayn.device import parse_device


_CPU_GROUP: list[Any] = []  # set by `setup` when the default group is nccl


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands: its rank among `world_size` and the device it uses."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes checkpoints, logs and the progress bar."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup(device: str = "auto") -> DistEnv:
    """Read torchrun's environment, pick the device and start the process group if needed."""
    world_size = launched_world_size()
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = parse_device(device, "train.device")
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", local_rank if world_size > 1 else 0)
        torch.cuda.set_device(dev)
    env = DistEnv(rank, world_size, local_rank, dev)
    if env.distributed and not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        kwargs = {"device_id": dev} if dev.type == "cuda" else {}
        dist.init_process_group(backend, init_method="env://", **kwargs)
        if backend == "nccl":  # Python objects (RNG states) travel on a gloo group beside it
            _CPU_GROUP.append(dist.new_group(backend="gloo"))
    return env


def launched_world_size() -> int:
    """The number of ranks torchrun started (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def teardown(env: DistEnv, synchronize: bool = True) -> None:
    """Leave the process group. After a run that ended alike on every rank (`synchronize`),
    the ranks first meet at a barrier, so no rank closes its connections while another is
    still finishing its last collective. After an error the other ranks may never arrive,
    so there is no barrier then. (The abort at exit this barrier was first added for, once
    in CI, was not the peers' sockets but the interpreter's finalization: see
    `end_rank_process`.)"""
    _CPU_GROUP.clear()
    if env.distributed and dist.is_initialized():
        if synchronize:
            dist.barrier()
        dist.destroy_process_group()


@contextmanager
def process_group(device: str = "auto") -> Iterator[DistEnv]:
    """`setup` on entering, `teardown` on leaving (synchronized after a run that ended, and
    not after an error, which the other ranks may never reach). Under a process group that
    someone else started (a test, a caller), this process's part only: it is left alone."""
    started_here = not (dist.is_available() and dist.is_initialized())
    env = setup(device)
    finished = False  # alike on every rank; after an error the others may never arrive
    try:
        yield env
        finished = True
    finally:
        if started_here:
            teardown(env, synchronize=finished)


def end_rank_process(code: int) -> NoReturn:
    """End one of torchrun's rank processes with exit status `code`, after its run and
    `teardown`, without the interpreter's finalization.

    gloo's worker threads outlive `destroy_process_group` and may still be releasing the
    last collective (the barrier above holds the gather of RNG states before it), whose
    tensors have Python objects: releasing them takes the GIL, and a thread that asks for
    the GIL while the interpreter is finalizing is ended by it, which kills the process
    (std::terminate: "terminate called without an active exception", SIGABRT, exit code
    -6 after a run that had finished and saved). Seen in CI, and reproduced with 4 ranks on
    2 loaded cores (1 run in 50; the core's stack: ProcessGroupGloo::runLoop,
    ~AsyncBarrierWork, ~AsyncGatherWork, decref_pyobject, take_gil, pthread_exit). The run
    has closed its files by then; only the standard streams need flushing."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to lose
            pass
    os._exit(code)


def all_reduce_sum(values: list[float], env: DistEnv) -> list[float]:
    """Element-wise sums over the ranks of a few float64 scalars (one collective)."""
    if not env.distributed:
        return list(values)
    # float64: token counts stay exact and loss sums keep their precision.
    tensor = torch.tensor(values, dtype=torch.float64, device=env.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def gather_to_main(obj: Any, env: DistEnv) -> list[Any] | None:
    """Every rank's `obj` (JSON-like values and tensors) on rank 0, None elsewhere.

    Used for the per-rank RNG states a checkpoint records. Tensors travel on the CPU.
    """
    if not env.distributed:
        return [obj]
    gathered: list[Any] | None = [None] * env.world_size if env.is_main else None
    dist.gather_object(obj, gathered, dst=0, group=_cpu_group())
    return gathered


def broadcast_from_main(obj: Any, env: DistEnv) -> Any:
    """Rank 0's `obj` on every rank."""
    if not env.distributed:
        return obj
    box = [obj if env.is_main else None]
    dist.broadcast_object_list(box, src=0, group=_cpu_group())
    return box[0]


def _cpu_group() -> Any:
    """The gloo group for Python objects (None: the default group, already gloo)."""
    return _CPU_GROUP[0] if _CPU_GROUP else None


def wrap_ddp(module: nn.Module, env: DistEnv) -> nn.Module:
    """DistributedDataParallel without per-forward buffer broadcasts (the only buffer, the
    sinusoid table, is the same everywhere)."""
    ddp = nn.parallel.DistributedDataParallel
    no_sync = {"broadcast_buffers": False}
    if "forward_sync_buffers" in inspect.signature(ddp).parameters:  # torch >= 2.13's name
        no_sync = {"forward_sync_buffers": False}
    ids = [env.device.index] if env.device.type == "cuda" else None
    return ddp(module, device_ids=ids, **no_sync)


def weights_digest(model: nn.Module) -> str:
    """sha256 of the weights' bytes: equal on every rank, or DDP went wrong."""
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
