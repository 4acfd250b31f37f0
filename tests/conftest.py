"""Shared test helpers: tiny model configs, the location of the shared Multi30k data, the
fast path's oneDNN products forced on wherever the CPU runs them, and a record of the
products handed to oneDNN."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest
import torch

from aiayn.config import ModelConfig

# ../shared beside the checkout; tests that need it skip cleanly when it is absent.
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def tiny_model_config(**overrides) -> ModelConfig:
    """d_model 16, 2+2 layers, 4 heads, vocab 23: fast, yet every part is exercised."""
    values = dict(vocab_size=23, d_model=16, n_heads=4, d_ff=32, n_layers=2, p_drop=0.0)
    values.update(overrides)
    return ModelConfig(**values)


def own_histories(store: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Each hypothesis's own history in a one-head, one-dimensional self-attention store
    (sentences, 1, length * group, 1) with this step's single-position `mask`
    (sentences, 1, group, length * group), as `fast/kv_cache.py` lays them out: (rows, length)."""
    values = store[:, 0, :, 0]  # (sentences, length * group)
    if mask is None:  # one row per sentence: every entry is its own
        return values
    group = mask.size(2)
    return values[:, None, :].expand(-1, group, -1)[mask[:, 0]].view(values.size(0) * group, -1)


@pytest.fixture(autouse=True, scope="session")
def _own_cache(tmp_path_factory) -> None:
    """The product choices (`fast.linear.choice_table`) of this run, its servers' model
    processes included, in a directory of its own: not the user's, nor an earlier run's."""
    os.environ["AIAYN_CACHE_DIR"] = str(tmp_path_factory.mktemp("aiayn-cache"))


@pytest.fixture(autouse=True, scope="session")
def _inductor_cache_per_kernel_set() -> None:
    """Under `ATEN_CPU_CAPABILITY` (e.g. AVX2's kernels on an AVX-512 machine), torch.compile's
    kernels in a cache directory of that capability's own. torch 2.13 reuses cached
    compiled training graphs built with the default kernels, and the compiled
    `torchrun` test's ranks then crashed (SIGSEGV in backward); with a fresh cache it passed."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    capability = os.environ.get("ATEN_CPU_CAPABILITY")
    # importing Inductor writes its default into the variable: only a user's own is kept
    if capability and os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{default_cache_dir()}-{capability}"


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)


@pytest.fixture
def onednn_shapes(monkeypatch) -> list[tuple]:
    """(input shape, weight shape, has bias) of every product `fast.linear` hands to oneDNN
    from now on, in order: the shapes oneDNN builds a kernel for."""
    import aiayn.fast.linear as linear_module

    shapes: list[tuple] = []
    product = linear_module._onednn_linear

    def spy(x, weight, bias, attr="none"):
        shapes.append((tuple(x.shape), tuple(weight.shape), bias is not None))
        return product(x, weight, bias, attr)

    monkeypatch.setattr(linear_module, "_onednn_linear", spy)
    return shapes


@pytest.fixture(params=[False, True], ids=["fresh memory", "kept buffers"])
def store_buffers(request):
    """For a test's one shared decoding cache (`fast/kv_cache.py`): None (fresh memory), or
    `StoreBuffers` claimed for it (`fast/buffers.py`)."""
    if not request.param:
        yield None
        return
    from aiayn.fast.buffers import StoreBuffers

    kept = StoreBuffers()
    with kept.claim():
        yield kept


def onednn_runs_here() -> bool:
    """Whether this CPU runs `fast.linear`'s oneDNN products: an x86 CPU, of any vendor, and
    PyTorch built with oneDNN (`onednn_faster_here` says whether they are also the faster)."""
    return (
        platform.machine().lower() in ("x86_64", "amd64")
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )  # fmt: skip


@pytest.fixture
def onednn(monkeypatch) -> bool:
    """`fast.linear`'s products through oneDNN wherever this CPU runs them, whether or not
    they are the faster here (they are chosen on x86 CPUs not made by Intel): so that a
    fast-vs-core test compares oneDNN's products with the core's on every x86 CPU, never
    `F.linear` with itself. -> whether they are on (False: PyTorch's own products, the only
    ones this CPU runs)."""
    import aiayn.fast.linear as linear_module

    here = onednn_runs_here()
    monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: here)
    return here


def as_committed(record: dict) -> dict:
    """A result record as `benchmarks/results.py` writes it for a run of committed code
    (nothing changed at its start or end), whatever the tree it ran in: for tests of how
    `report.py` renders results, which it publishes only of committed code."""
    clean = {"commit": "abc1234" + "0" * 33, "dirty": False, "diff": None, "changed": []}
    provenance = {"start": clean, "end": dict(clean), "exercised": {}, "changed_during_run": False}
    return {**record, "meta": {**record["meta"], "provenance": provenance}}
