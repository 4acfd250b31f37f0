"""The decoder step compiled ahead of time, and kept: `static_step.DecoderStep`,
`SourceKeys` (the encoder and the encoder-decoder keys, once a search) and
`static_beam.BeamStep` (beam search's bookkeeping) as native functions, built once per
model and machine and loaded from aiayn's cache afterwards.

    compiled = load_compiled(model)              # None where there is no artifact yet
    compiled = load_compiled(model, build=True)  # builds it if needed (a minute or more)
    search = StepSearch(model, compiled)

Why this compiler. Eagerly, a small model's step is mostly the interpreter and PyTorch's
dispatch walking some two hundred operations. `torch.export` captures the step as one graph
and AOTInductor (PyTorch's ahead-of-time Inductor) turns it into C++ in a shared library:
one call runs the whole step with no Python in it and no guards to check, and the library
is a file, so a later process loads it in milliseconds instead of compiling again.
`torch.compile` would do the same work in each new process, and check its guards at every
call. The rows, sentences, source length (2 to `max_len` tokens: a source holds a token and
its eos) and decoded positions are dynamic dimensions, so one library serves every batch a
search meets; so are the beam's width, the n-best and the output length in `BeamStep`. Inductor's own C++ matrix products are tried
against ATen's at build time (`max_autotune`) and the faster kept per shape; the weights
are folded in as constants (`freezing`), packed once for those products.

The artifact, a directory of the three packages, is keyed by everything that makes it valid:
the weights and config (a hash of them), the dtype, the machine (`linear.machine_digest`:
CPU model, kernel ISA, torch's version) and this module's `FORMAT`. It is written whole
(built aside, then renamed) by this user's aiayn into its own cache directory and loaded
only from there; one that fails to load is built again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from torch import Tensor

from aiayn.fast.linear import cache_dir, machine_digest
from aiayn.fast.static_beam import BeamStep
from aiayn.fast.static_search import Compiled
from aiayn.fast.static_step import DecoderStep, SourceKeys, supports

FORMAT = 3  # bumped when the functions' signatures or the build's settings change
BUILD_OPTIONS = {
    "freezing": True,  # weights as constants, packed once for the chosen products
    "max_autotune": True,  # time Inductor's C++ products against ATen's, per shape
    "max_autotune_gemm_backends": "CPP,ATEN",
    "max_autotune_report_choices_stats": False,  # the timings are not the user's business
    "autotune_num_choices_displayed": 0,
}


def load_compiled(model, build: bool = False, cache: Path | None = None) -> Compiled | None:
    """The compiled step and source keys of `model` (eval mode, float32 on the CPU): loaded from the cache,
    else built and stored when `build`, else None. None also where the step cannot be
    compiled here (`can_compile`), and, with a warning, where the build fails (e.g. no C++
    compiler): the search then runs without it."""
    if not can_compile(model):
        return None
    path = artifact_path(model, cache)
    if path.exists():
        try:
            return _load(path)
        except Exception:  # a foreign or damaged artifact: build it again
            if not build:
                return None
    if not build:
        return None
    try:
        _build(model, path)
        return _load(path)
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
    """Where `model`'s compiled functions are kept: the directory `cache_dir()/steps/<key>`,
    the key a hash of the weights, the config, the dtype, the machine and FORMAT."""
    digest = hashlib.sha256()
    config = dataclasses.asdict(model.config)
    digest.update(json.dumps([config, FORMAT, machine_digest()], sort_keys=True, default=str).encode())
    for name, tensor in model.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return (cache or cache_dir()) / "steps" / digest.hexdigest()[:24]


def _load(path: Path) -> Compiled:
    return Compiled(*(_Loaded(torch._inductor.aoti_load_package(str(path / f"{name}.pt2")))
                      for name in Compiled._fields))  # fmt: skip


class _Loaded:
    """A loaded library as a function: its inputs made contiguous, as they were traced.
    The functions take tensors only and return a tuple of them, so the library's flat
    inputs and outputs are the call's own: it is run directly, without the package's
    per-call parsing of its argument structure."""

    def __init__(self, package) -> None:
        self.run = package.loader.boxed_run  # list of tensors -> list of tensors

    def __call__(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        return tuple(self.run([x.contiguous() for x in inputs]))


def _build(model, path: Path) -> None:
    """Export `DecoderStep(model)`, `SourceKeys(model)` and `BeamStep` with dynamic
    dimensions, compile each with AOTInductor, and move the packages to the directory `path`
    (built aside and renamed: a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=path.parent, prefix=".build-")
    try:
        programs = {"step": _step_program, "source": _source_program, "beam": _beam_program}
        for name, program in ((name, programs[name](model)) for name in Compiled._fields):
            torch._inductor.aoti_compile_and_package(
                program, package_path=f"{tmp}/{name}.pt2", inductor_configs=dict(BUILD_OPTIONS)
            )
        if path.exists():  # a damaged artifact (it failed to load): this build replaces it
            shutil.rmtree(path)
        os.replace(tmp, path)
    except OSError:
        if not path.exists():  # else another process renamed its build there first: kept
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _source_program(model) -> torch.export.ExportedProgram:
    """`SourceKeys(model)` exported over (sentences, src_len) sources."""
    src = torch.full((2, 3), model.config.eos_id, dtype=torch.long)
    dims = torch.export.Dim
    dynamic = ({0: dims("sentences", min=1), 1: dims("src_len", min=2, max=model.config.max_len)},)
    with torch.no_grad():
        return torch.export.export(SourceKeys(model).eval(), (src,), dynamic_shapes=dynamic)


def _step_program(model) -> torch.export.ExportedProgram:
    """`DecoderStep(model)` exported with dynamic rows, sentences and lengths."""
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
    t, n = dims("earlier", min=0), dims("src_len", min=2, max=c.max_len)
    dynamic = ({0: r}, None, {0: t, 2: r}, {0: t, 2: r}, {1: s, 3: n}, {1: s, 3: n}, {0: s, 3: n})
    with torch.no_grad():
        return torch.export.export(step, example, dynamic_shapes=dynamic)


def _beam_program(model) -> torch.export.ExportedProgram:
    """`BeamStep` for `model`'s vocabulary and eos, exported with dynamic sentences, beam
    (2 to half the vocabulary: it takes each row's 2 * beam best), n-best and output length."""
    vocab, dims = model.config.vocab_size, torch.export.Dim
    batch, beam, nbest, width = 3, 2, 2, 5  # no dimension of size 0 or 1 (see `_step_program`)
    scores = torch.zeros(batch, beam)
    example = (
        torch.zeros(batch, beam, vocab), scores, torch.zeros(batch, beam, width, dtype=torch.long),
        torch.zeros(batch, nbest), torch.zeros(batch, nbest),
        torch.zeros(batch, nbest, dtype=torch.long), torch.zeros(batch, nbest, width, dtype=torch.long),
        torch.full((batch,), width, dtype=torch.long), torch.ones(batch),
        torch.tensor([1, 0, 1]), torch.ones(2),
    )  # fmt: skip
    b, k = dims("sentences", min=1), dims("beam", min=2, max=max(2, vocab // 2))
    m, w = dims("nbest", min=1), dims("width", min=1)
    dynamic = ({0: b, 1: k}, {0: b, 1: k}, {0: b, 1: k, 2: w}, {0: b, 1: m}, {0: b, 1: m},
               {0: b, 1: m}, {0: b, 1: m, 2: w}, {0: b}, {0: b}, None, None)  # fmt: skip
    with torch.no_grad():
        return torch.export.export(BeamStep(model.config.eos_id), example, dynamic_shapes=dynamic)
