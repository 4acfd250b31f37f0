"""Freed memory kept for reuse by a decoding process (`aiayn.fast.memory`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aiayn.fast import memory

# Run in a fresh interpreter (malloc's settings are the process's): write a 48 MiB buffer
# and free it, eight times, and print the most page faults of the last three; then the same
# for twenty buffers of 2 MiB held together. glibc's own mmap threshold stops rising at
# 32 MiB, so there the 48 MiB block is mapped afresh each time and every page faults again.
# With the thresholds raised the heap grows for the first two or three buffers (the small
# blocks allocated between two rounds split the freed one) and then reuses them. One thread
# (no OpenMP worker allocating beside the main thread) keeps the rounds' order of
# allocations the same from run to run: with two, which round still faulted varied with
# the machine's load.
SCRIPT = """
import resource, sys, torch
torch.set_num_threads(1)
mode = sys.argv[1]
if mode == "call":
    from aiayn.fast.memory import keep_freed_memory
    assert keep_freed_memory()
elif mode == "for_inference":
    from aiayn import fast
    from aiayn.config import ModelConfig
    from aiayn.model.transformer import Transformer
    fast.for_inference(Transformer(ModelConfig(vocab_size=32, d_model=16, n_heads=2, d_ff=32,
                                               n_layers=1)), compile="never")
for sizes in ([12 * 1024 * 1024], [512 * 1024] * 20):  # float32 elements
    faults = []
    for _ in range(8):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        buffers = [torch.empty(n).fill_(1.0) for n in sizes]
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        del buffers
    print(max(faults[-3:]))
"""

needs_glibc = pytest.mark.skipif(memory._glibc() is None, reason="the C library is not glibc")


def faults_of_reused_buffers(mode: str) -> list[int]:
    """[one large block's, many blocks'] page faults once warm (`SCRIPT`)."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return [int(n) for n in out.stdout.split()]


@needs_glibc
def test_freed_buffers_are_reused_without_page_faults():
    large, _ = faults_of_reused_buffers("none")
    assert large > 10000  # 12288 pages of 4 KiB, faulted in at every allocation
    assert max(faults_of_reused_buffers("call")) < 200


@needs_glibc
def test_for_inference_keeps_freed_memory():
    assert max(faults_of_reused_buffers("for_inference")) < 200


def test_without_glibc_nothing_is_set(monkeypatch):
    monkeypatch.setattr(memory, "_glibc", lambda: None)
    assert memory.keep_freed_memory() is False
