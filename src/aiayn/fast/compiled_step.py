"""The decoder step compiled ahead of time, and kept: `static_step.DecoderStep` as one native
function, built once per model and machine and loaded from aiayn's cache afterwards.

    step = load_compiled(model)              # None where there is no artifact yet
    step = load_compiled(model, build=True)  # builds it if needed (tens of seconds a model)
    search = StepSearch(model, step)

Why this compiler. Eagerly, a small model's step is mostly the interpreter and PyTorch's
dispatch walking some two hundred operations. `torch.export` captures the step as one graph
and AOTInductor (PyTorch's ahead-of-time Inductor) turns it into C++ in a shared library:
one call runs the whole step with no Python in it and no guards to check, and the library
is a file, so a later process loads it in milliseconds instead of compiling again.
`torch.compile` would do the same work in each new process, and check its guards at every
call. The rows, sentences, source length and decoded positions are dynamic dimensions, so
one library serves every batch a search meets. Inductor's own C++ matrix products are tried
against ATen's at build time (`max_autotune`) and the faster kept per shape; the weights
are folded in as constants (`freezing`), packed once for those products.

The artifact is keyed by everything that makes it valid: the weights and config (a hash of
them), the dtype, the machine (`linear.machine_digest`: CPU model, kernel ISA, torch's
version) and this module's `FORMAT`. It is written by this user's aiayn into its own cache
directory and loaded only from there; a file that fails to load is built again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path

import torch
from torch import Tensor

from aiayn.fast.linear import cache_dir, machine_digest
from aiayn.fast.static_search import Step
from aiayn.fast.static_step import DecoderStep, supports

FORMAT = 1  # bumped when the step's signature or the build's settings change
BUILD_OPTIONS = {
    "freezing": True,  # weights as constants, packed once for the chosen products
    "max_autotune": True,  # time Inductor's C++ products against ATen's, per shape
    "max_autotune_gemm_backends": "CPP,ATEN",
    "max_autotune_report_choices_stats": False,  # the timings are not the user's business
    "autotune_num_choices_displayed": 0,
}


def load_compiled(model, build: bool = False, cache: Path | None = None) -> Step | None:
    """The compiled step of `model` (eval mode, float32 on the CPU): loaded from the cache,
    else built and stored when `build`, else None. None also where the step cannot be
    compiled here (`can_compile`), and, with a warning, where the build fails (e.g. no C++
    compiler): the search then runs without it."""
    if not can_compile(model):
        return None
    path = artifact_path(model, cache)
    if path.exists():
        try:
            return _Loaded(torch._inductor.aoti_load_package(str(path)))
        except Exception:  # a file from an interrupted or foreign build: build it again
            if not build:
                return None
    if not build:
        return None
    try:
        _build(model, path)
        return _Loaded(torch._inductor.aoti_load_package(str(path)))
    except Exception as err:  # the compiler's own errors are of many kinds
        warnings.warn(f"the decoder step could not be compiled ({type(err).__name__}: "
                      f"{str(err).splitlines()[0] if str(err) else ''}); decoding without it",
                      stacklevel=2)  # fmt: skip
        return None


def can_compile(model) -> bool:
    """Whether this step compiles here: a model `DecoderStep` supports, float32 on the CPU
    (AOTInductor's C++ backend), in eval mode."""
    if not supports(model):
        return False
    weight = model.output_weight
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and not model.training


def artifact_path(model, cache: Path | None = None) -> Path:
    """Where `model`'s compiled step is kept: `cache_dir()/steps/<key>.pt2`, the key a hash
    of the weights, the config, the dtype, the machine and FORMAT."""
    digest = hashlib.sha256()
    config = dataclasses.asdict(model.config)
    digest.update(json.dumps([config, FORMAT, machine_digest()], sort_keys=True, default=str).encode())
    for name, tensor in model.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return (cache or cache_dir()) / "steps" / f"step-{digest.hexdigest()[:24]}.pt2"


class _Loaded:
    """A loaded library as a `Step`: its inputs made contiguous, as it was traced."""

    def __init__(self, runner) -> None:
        self.runner = runner

    def __call__(self, *inputs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return tuple(self.runner(*(x.contiguous() for x in inputs)))


def _build(model, path: Path) -> None:
    """Export `DecoderStep(model)` with dynamic rows, sentences and lengths, compile it with
    AOTInductor and move the package to `path` (atomically: a reader never sees half)."""
    step = DecoderStep.from_model(model)
    c, dims = model.config, torch.export.Dim
    layers, heads, d_k, d_v = len(model.decoder), step.heads, step.d_k, step.d_v
    # An example of 2 sentences x 2 rows, lengths 3 and 5: no dimension of size 0 or 1,
    # which the exporter would take for a constant.
    rows, sentences, earlier, src_len = 4, 2, 3, 5
    like = dict(dtype=model.output_weight.dtype)
    example = (
        torch.full((rows,), c.eos_id, dtype=torch.long), torch.zeros(c.d_model, **like),
        torch.zeros(earlier, layers, rows, heads, d_k, **like),
        torch.zeros(earlier, layers, rows, heads, d_v, **like),
        torch.zeros(layers, sentences, heads, src_len, d_k, **like),
        torch.zeros(layers, sentences, heads, src_len, d_v, **like),
        torch.ones(sentences, 1, 1, src_len, dtype=torch.bool),
    )
    r, s = dims("rows", min=1), dims("sentences", min=1)
    t, n = dims("earlier", min=0), dims("src_len", min=1)
    dynamic = ({0: r}, None, {0: t, 2: r}, {0: t, 2: r}, {1: s, 3: n}, {1: s, 3: n}, {0: s, 3: n})
    with torch.no_grad():
        program = torch.export.export(step, example, dynamic_shapes=dynamic)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(suffix=".pt2", dir=path.parent)
    os.close(handle)
    try:
        torch._inductor.aoti_compile_and_package(
            program, package_path=tmp, inductor_configs=dict(BUILD_OPTIONS)
        )
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
