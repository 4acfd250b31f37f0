"""The decoder step compiled ahead of time, and kept: `static_step.DecoderStep` (a step for
any search), `SourceKeys` (the encoder and the encoder-decoder keys, once a search) and
`search_step.SearchStep` (a whole step of beam search: the decoder step and the beam's
bookkeeping) as native functions, built once per model and machine and
loaded from aiayn's cache afterwards.

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
search meets; so are the beam's width, the n-best and the output length in `SearchStep`.

The right product for each width. Each function is built twice: a *narrow* library, in
which Inductor times its candidate kernels (`max_autotune`) at the export example's few
rows and keeps the faster, and whose decoder holds each weight as (in, out)
(`DecoderStep`'s `transposed`: MKL multiplies a few rows by it without repacking the
weight), and a *wide* one with its default choices and the model's (out, in) weights,
each exported at the sizes of the calls it serves (`Sizes`: Inductor's hints, by which
it runs a loop in parallel or not).
A choice timed at a few rows is kept for every row count, and what wins one sentence at a
time can lose wide batches; so both libraries are timed on inputs of growing width (`crossover`), each
function on calls of its own (the step, the search step, the source), and a call
takes the wide one from the measured row count on (`ByRows`). The timing is done where the
artifact is first loaded with a thread count (the crossover moves with it) and kept beside
the libraries (`rows_file`: the counts and the timings); a library that no row count then
takes is let go, with its copy of the weights (`ByRows.keep_used`), or, where the crossovers
were stored, never read. Inductor's own C++ matrix products
are candidates only for weights folded in as constants (`freezing`), which narrow float32
builds go without (`_compile`). A float32 wide library is frozen where `wide_products`
timed oneDNN's packed products faster than ATen's (MKL's) on the model's own shapes at
this machine (kept in the artifact: `PRODUCTS_FILE`), its products' rows then padded to
a bounded set of counts (`bucketed`), else its products are ATen's. Products timed alone
need not rank whole libraries alike, so where they chose oneDNN the function's wide
library is also built unfrozen, and the one that makes the search faster beside the
narrow library is kept (`_keep_faster_wide`). An
int8 model's wide libraries are frozen: their products are oneDNN's int8 ones, weights
packed once. Each of those calls
has a setup cost that outweighs a few rows' arithmetic, so its narrow decoder computes the
same int8 arithmetic in float32 (`DecoderStep._linear`), and the crossover decides where
oneDNN's calls take over. Its encoder is built wide only: it multiplies every source token
at once, rows enough for oneDNN's calls (a narrow one, timed, lost from one sentence on).

The artifact, a directory of the six packages (five for an int8 model; a float32 model's
product choice; and the crossovers timed with each thread count), is keyed by everything that makes it valid: the weights and config (a hash of
them), the dtype, the machine (`linear.machine_digest`: CPU model, kernel ISA, torch's
version) and this module's `FORMAT`. It is written whole
(built aside, then renamed) by this user's aiayn into its own cache directory and loaded
only from there; one that fails to load is built again.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from copy import deepcopy
from pathlib import Path

import torch
from torch import Tensor, nn
from torch._decomp import get_decompositions

from aiayn.data.vocab import cpu_threads
from aiayn.fast import wide_products
from aiayn.fast.int8 import Int8Linear
from aiayn.fast.linear import BucketedLinear, cache_dir, machine_digest
from aiayn.fast.static_beam import widest_beam
from aiayn.fast.search_step import SearchStep
from aiayn.fast.static_search import Compiled
from aiayn.fast.static_step import DecoderStep, SourceKeys, supports

FORMAT = 26  # bumped when the functions' signatures or the build's settings change
# Never frozen (`_compile`), so never over an int8 model's oneDNN products: Inductor's
# autotuning of those crashed the compiling process (a corrupted heap).
NARROW_OPTIONS = {
    "freezing": True,  # weights as constants, packed once, where `_compile` freezes
    "max_autotune": True,  # time Inductor's candidate kernels, per shape
    "max_autotune_gemm_backends": "CPP,ATEN",
    "max_autotune_report_choices_stats": False,  # the timings are not the user's business
    "autotune_num_choices_displayed": 0,
}
WIDE_OPTIONS = {"freezing": True}  # Inductor's default choices
PRODUCTS_FILE = "products.json"  # a float32 artifact's `wide_products.measure`
TWIN = "-wide-unfrozen.pt2"  # a frozen float32 wide library's unfrozen twin, while building
# The widths at which the two libraries are timed: decoder rows (sentences x beam), and the
# source's tokens (sentences x `SOURCE_LEN`). The rows reach a batch of 128 sentences of beam
# 4 (`translate`'s 4096-token batches of 32-token sentences): a choice timed on narrower
# calls only was kept for the wide batches too, and there it could be the slower one.
STEP_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SEARCH_STEP_ROWS = tuple(r for r in STEP_ROWS if r >= 4)  # sentences of beam 4 (a beam is 2 or more)
SOURCE_SENTENCES = (1, 2, 4, 8, 16, 32)
SOURCE_LEN = EARLIER = 16  # a typical sentence's tokens, and decoded positions
ROUNDS = 5  # timing rounds per width


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The example a function is exported with. Its sizes are also Inductor's hints for the
    dynamic dimensions: a loop is run in parallel only where its hinted trip count gives
    every thread enough work (`cpp.min_chunk_size`), else serially, whatever the call. So a
    narrow library is exported at a few rows, where serial loops are right, and a wide one
    at a typical wide call: exported at 6 rows, a small model's wide search step ran its
    attention and log-softmax loops on one thread at 400 rows. No size is 0 or 1, which the
    exporter would take for a constant."""

    sentences: int
    beam: int  # the decoder step's rows are sentences x beam
    earlier: int  # decoded positions
    src_len: int
    nbest: int
    width: int  # the longest output


NARROW = Sizes(sentences=2, beam=3, earlier=4, src_len=5, nbest=2, width=7)
# 64 sentences of beam 4 (256 rows, the middle of the wide libraries' usual calls)
WIDE = Sizes(sentences=64, beam=4, earlier=EARLIER, src_len=SOURCE_LEN, nbest=2, width=31)


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
            return _load(path, model)
        except Exception:  # a foreign or damaged artifact: build it again
            if not build:
                return None
    if not build:
        return None
    try:
        _build(model, path)
        return _load(path, model)
    except Exception as err:  # the compiler's own errors are of many kinds
        warnings.warn(f"the decoder step could not be compiled ({type(err).__name__}: "
                      f"{str(err).splitlines()[0] if str(err) else ''}); decoding without it",
                      stacklevel=2)  # fmt: skip
        return None


def can_compile(model) -> bool:
    """Whether this step compiles here: a model `DecoderStep` supports, float32 on the CPU
    (AOTInductor's C++ backend), its products in float32 or int8, in eval mode.

    Int8 models compile where oneDNN adds their products exactly
    (`Int8Linear.sums_exact_in_onednn`): 7-bit inputs on every CPU, 8-bit ones where its
    sums are 32-bit. Then the compiled step's whole-number sums are the eager products'
    (fbgemm's or oneDNN's), and it finds their hypotheses. Not so for 8-bit inputs where
    oneDNN is capped below VNNI but fbgemm, which ignores that cap, is not: the eager
    search keeps those."""
    int8 = [m for m in model.modules() if isinstance(m, Int8Linear)]
    if not supports(model) or not all(m.sums_exact_in_onednn for m in int8):
        return False
    weight = model.tgt_embed.weight  # float in every model, int8 ones too
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and not model.training


def is_int8(model) -> bool:
    """Whether `model`'s products are int8 (`int8.quantize_int8`)."""
    return any(isinstance(m, Int8Linear) for m in model.modules())


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


def _load(path: Path, model) -> Compiled:
    def library(name: str) -> _Loaded:
        return _Loaded(path / f"{name}.pt2")

    step, search_step = (ByRows(library(name), library(f"{name}-wide"), None, rows)
                         for name, rows in (("step", _step_rows), ("search_step", _search_step_rows)))  # fmt: skip
    source = library("source-wide")  # an int8 model's only source library
    if not is_int8(model):
        source = ByRows(library("source"), source, None, _source_rows)
    found = _crossovers(path, model, step, search_step, source)
    step.wide_from = found["step"]["wide_from"]
    search_step.wide_from = found["search_step"]["wide_from"]
    if isinstance(source, ByRows):
        source.wide_from = found["source"]["wide_from"]
        source.keep_used()
    step.keep_used()
    search_step.keep_used()
    for function in (step, search_step, source):  # read now: a library let go never is
        function.load()
    return Compiled(step=step, source=source, search_step=search_step)


def rows_file(path: Path) -> Path:
    """The crossovers measured with this process's thread count (which moves them)."""
    return path / f"rows-{torch.get_num_threads()}-threads.json"


def _crossovers(path: Path, model, step: ByRows, search_step: ByRows, source: Callable) -> dict:
    """The narrow and wide libraries' crossovers (`crossover`) at this thread count, the
    step's, the search step's and (where it has two libraries) the source's: read from
    `rows_file`, else measured now (seconds, once) and stored there. The search step is
    timed on its own calls, not given the step's crossover: the two hold the same products,
    but each library's kernels are Inductor's choices for that function alone, and a narrow
    search step can lose to its wide one at rows where the narrow step wins."""
    file = rows_file(path)
    try:
        found = json.loads(file.read_text())
        if "search_step" in found:  # else measured before the search step was timed apart
            return found
    except (OSError, ValueError):  # not measured at this thread count yet, or damaged
        pass
    with torch.no_grad():
        found = {"step": crossover(step.narrow, step.wide, _step_examples(model)),
                 "search_step": crossover(search_step.narrow, search_step.wide,
                                          _search_step_examples(model))}  # fmt: skip
        if isinstance(source, ByRows):
            found["source"] = crossover(source.narrow, source.wide, _source_examples(model))
    tmp = file.with_name(f".{file.name}.{os.getpid()}")
    try:  # written aside and renamed: a reader never sees half
        tmp.write_text(json.dumps(found, indent=1) + "\n")
        os.replace(tmp, file)
    except OSError:  # a cache we may not write: measured again next time
        tmp.unlink(missing_ok=True)
    return found


class _Loaded:
    """A library file as a function: its inputs made contiguous, as they were traced.
    The functions take tensors only and return a tuple of them, so the library's flat
    inputs and outputs are the call's own: it is run directly, without the package's
    per-call parsing of its argument structure. The file is read at the first call or
    `load`, so that a library the stored crossovers leave unused (`ByRows.keep_used`)
    never takes memory."""

    def __init__(self, file: Path) -> None:
        self.file, self.run = file, None  # run: list of tensors -> list of tensors

    def load(self) -> None:
        if self.run is None:
            self.run = torch._inductor.aoti_load_package(str(self.file)).loader.boxed_run

    def __call__(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        if self.run is None:
            self.load()
        return tuple(self.run([x.contiguous() for x in inputs]))


class ByRows:
    """One function built twice: `narrow` for calls of fewer than `wide_from` rows, `wide`
    from there on (never where `wide_from` is None); `rows` counts a call's rows."""

    def __init__(self, narrow: Callable, wide: Callable, wide_from: int | None,
                 rows: Callable[..., int]) -> None:  # fmt: skip
        self.narrow, self.wide, self.wide_from, self.rows = narrow, wide, wide_from, rows

    def __call__(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        wide = self.wide_from is not None and self.rows(*inputs) >= self.wide_from
        return (self.wide if wide else self.narrow)(*inputs)

    def load(self) -> None:
        """Read the libraries it keeps (`_Loaded.load`)."""
        self.narrow.load()
        self.wide.load()

    def keep_used(self) -> None:
        """Let go of a library that no call takes (each holds its own copy of the weights):
        the narrow one where the wide one serves from one row on, the wide one where it
        never serves."""
        if self.wide_from is None:
            self.wide = self.narrow
        elif self.wide_from <= 1:
            self.narrow = self.wide


def _step_rows(tokens: Tensor, *rest: Tensor) -> int:
    return tokens.size(0)  # sentences x beam


def _search_step_rows(tokens: Tensor, *rest: Tensor) -> int:
    return tokens.numel()  # sentences x beam


def _source_rows(src: Tensor) -> int:
    return src.numel()  # sentences x source length: the encoder's rows


def wide_from(timings: dict[int, tuple[float, float]]) -> int | None:
    """From {rows: (narrow time, wide time)}: the row count from which the wide library
    serves (None: never), the one crossover that loses least over the widths timed. Each
    width counts by how much slower the library it gives is there than the faster one, as
    a fraction, so that a wide call's milliseconds weigh no more than a narrow call's. A
    timing at odds with its neighbours then costs what it measured: a wide library that
    won clearly at every width but the widest, and lost narrowly there, serves from where
    it starts to win, where a rule asking it to win every wider timing dropped it at every
    width (`tests/fast/test_static_step.py` holds such a case). On a tie the later
    crossover is taken."""
    return min([None, *sorted(timings, reverse=True)], key=lambda start: _served_loss(timings, start))


def _served_loss(timings: dict[int, Sequence[float]], start: int | None, wide: int = 1) -> float:
    """From {rows: [narrow time, ...]}: how much slower than the fastest library timed the
    search runs at each width, as a fraction, summed over the widths, where the narrow
    library (`[0]`) serves below `start` rows and the library `[wide]` from there (None:
    never)."""
    return sum(times[wide if start is not None and rows >= start else 0] / max(min(times), 1e-12) - 1
               for rows, times in timings.items())  # fmt: skip


def crossover(narrow: Callable, wide: Callable, examples: Iterable[tuple[int, tuple]]) -> dict:
    """Both libraries timed on `examples` (rows, inputs): {"wide_from": `wide_from`,
    "ms": {rows: [narrow, wide]}}, per call (`in_turns`)."""
    ms = in_turns((narrow, wide), examples)
    return {"wide_from": wide_from(ms), "ms": ms}


def in_turns(functions: Sequence[Callable], examples: Iterable[tuple[int, tuple]]) -> dict[int, list[float]]:
    """Each of `functions` timed on `examples` (rows, inputs), made one at a time: {rows:
    [milliseconds a call, one a function]}, the best of `ROUNDS` rounds taken in turns (so
    that another process's load falls on all alike)."""
    timings = {}
    for rows, inputs in examples:
        for function in functions:  # the first calls' one-off costs
            function(*inputs)
        rounds = [[_seconds(function, inputs) for function in functions] for _ in range(ROUNDS)]
        timings[rows] = [round(min(times) * 1e3, 4) for times in zip(*rounds)]
    return timings


def _seconds(function: Callable, inputs: tuple, budget: float = 0.01) -> float:
    """Seconds per call of `function(*inputs)` over at least `budget` seconds."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < budget or calls == 0:
        function(*inputs)
        calls += 1
    return elapsed / calls


def _build(model, path: Path) -> list[int]:
    """Export `DecoderStep(model)`, `SourceKeys(model)` and `SearchStep(model)` with dynamic
    dimensions, compile each with AOTInductor (narrow and wide, `compile_all`),
    and move the packages to the directory `path` (built aside and renamed: a reader never
    sees half); -> the ids of the processes that compiled them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=path.parent, prefix=".build-")
    try:
        workers = compile_all(_jobs(model, Path(tmp)))
        for leftover in Path(tmp).glob("*-program.pt2"):
            os.remove(leftover)
        _keep_faster_wide(Path(tmp), model)
        if path.exists():  # a damaged artifact (it failed to load): this build replaces it
            shutil.rmtree(path)
        os.replace(tmp, path)
        return workers
    except OSError:
        if not path.exists():  # else another process renamed its build there first: kept
            raise
        return []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _jobs(model, tmp: Path) -> list[tuple[str, str, dict, bool]]:
    """`compile_all`'s jobs for `model`'s libraries, their programs exported into `tmp`:
    each function wide (frozen where its products are oneDNN's; a float32 one then also
    unfrozen, its `TWIN`) and narrow (never frozen; an int8 model's source has none)."""
    programs = {"step": _step_program, "source": _source_program,
                "search_step": _search_step_program}  # fmt: skip
    int8 = is_int8(model)
    frozen = {"step": True, "source": True}  # an int8 model's: oneDNN's int8 products
    if not int8:  # float32: MKL's or oneDNN's products, whichever is faster here
        frozen = {f: chosen["frozen"] for f, chosen in _products_file(tmp, model).items()}
    padded = bucketed(model) if not int8 and any(frozen.values()) else None
    jobs = []
    for name in reversed(Compiled._fields):  # the search step first: the longest build
        wide_frozen = frozen["source" if name == "source" else "step"]
        # float32 products of oneDNN's over rows padded to a bounded set of counts
        wide = padded if wide_frozen and not int8 else model
        program = f"{tmp}/{name}-program.pt2"
        torch.export.save(programs[name](wide, sizes=WIDE), program)
        jobs.append((program, f"{tmp}/{name}-wide.pt2", WIDE_OPTIONS, wide_frozen))
        if wide is padded:  # and its twin on MKL's products, kept if faster (`_keep_faster_wide`)
            program = f"{tmp}/{name}-unfrozen-program.pt2"
            torch.export.save(programs[name](model, sizes=WIDE), program)
            jobs.append((program, f"{tmp}/{name}{TWIN}", WIDE_OPTIONS, False))
        if name == "source" and int8:  # oneDNN's int8 encoder won at every width timed
            continue
        # exported at a few rows; the narrow decoder reads its weights as (in, out)
        program = f"{tmp}/{name}-narrow-program.pt2"
        turned = {} if name == "source" else {"transposed": True}
        torch.export.save(programs[name](model, sizes=NARROW, **turned), program)
        jobs.append((program, f"{tmp}/{name}.pt2", NARROW_OPTIONS, False))
    return jobs


def _keep_faster_wide(directory: Path, model, timed: Callable | None = None,
                      load: Callable | None = None) -> None:
    """Where a function's wide libraries were built both ways (frozen, on oneDNN's products,
    and its unfrozen twin on MKL's: `_jobs`), keep the faster and drop the other. The narrow
    library and the two wide ones are timed in turns (`in_turns`, or `timed`) at every
    example width, and each wide library is charged what the search would run with it: the
    narrow library below its crossover with that one (`wide_from`), the wide one from there,
    each width by how much slower that is than the fastest of the three, as a fraction. The
    frozen one stays where its charge is the smaller. A wide library serves only the widths
    its crossover gives it, so a loss where the narrow one serves costs nothing: on an
    AVX-512 CPU that runs MKL's AVX2 kernels, a small model's frozen library was the slower
    at 16 rows, which its narrow library served, and the faster at every width the wide one
    served. And the products timed alone need not rank the libraries alike: with AVX2
    kernels, oneDNN's products of a base-sized step were the faster timed alone at every
    width, but its frozen library was the slower from 64 rows on. The decoder step's choice
    is the search step's too (the same products). The timings go to `PRODUCTS_FILE`, under
    "libraries": {rows: [narrow, unfrozen, frozen]} milliseconds a call."""
    families = {"step": (("step", "search_step"), _step_examples),
                "source": (("source",), _source_examples)}  # fmt: skip
    twice = [f for f in families if (directory / f"{f}{TWIN}").exists()]
    if not twice:  # nothing built both ways (an int8 build has no products file either)
        return
    timed, load = timed or in_turns, load or _Loaded
    file = directory / PRODUCTS_FILE
    products = json.loads(file.read_text())
    for function in twice:
        names, examples = families[function]
        libraries = [load(directory / f"{function}{kind}") for kind in (".pt2", TWIN, "-wide.pt2")]
        with torch.no_grad():
            ms = timed(libraries, examples(model))  # {rows: [narrow, unfrozen, frozen]}
        loss_unfrozen, loss_frozen = (  # each served from its crossover with the narrow one
            _served_loss(ms, wide_from({rows: (t[0], t[wide]) for rows, t in ms.items()}), wide)
            for wide in (1, 2))  # fmt: skip
        frozen = loss_frozen < loss_unfrozen
        for name in names:
            twin = directory / f"{name}{TWIN}"
            if frozen:
                os.remove(twin)
            else:
                os.replace(twin, directory / f"{name}-wide.pt2")
        products[function].update(frozen=frozen, libraries=ms)
    file.write_text(json.dumps(products, indent=1) + "\n")


def bucketed(model):
    """A copy of float32 `model` over the same parameters, each linear map a `BucketedLinear`:
    exported for a frozen wide library, whose oneDNN products build and keep a kernel for
    each row count they meet (as the eager ones do: `linear.bucket_rows`), so that a
    long-lived server's memory stays flat."""
    copy = deepcopy(model, memo={id(t): t for t in (*model.parameters(), *model.buffers())})
    for module in list(copy.modules()):
        for name, child in module.named_children():
            if isinstance(child, nn.Linear):
                setattr(module, name, BucketedLinear.from_core(child))
    return copy


def _products_file(directory: Path, model) -> dict:
    """Which products each float32 wide library takes (`wide_products.measure`, timed
    now), written to the artifact's `PRODUCTS_FILE` and returned."""
    with torch.no_grad():
        products = wide_products.measure(model, lambda product: _seconds(product, ()))
    (directory / PRODUCTS_FILE).write_text(json.dumps(products, indent=1) + "\n")
    return products


def compile_all(jobs: list[tuple[str, str, dict, bool]]) -> list[int]:
    """Each job (a saved exported program, its package's path, Inductor's options, whether
    frozen: `_compile`) compiled, each in a process of its own (`compile_apart`), as many at
    once as this process may use CPUs; -> the ids of those processes, in the jobs' order.

    Most of a build is the C++ compiler and Inductor's code generation, one core each, so
    on several cores the six packages build side by side.
    """
    threads = torch.get_num_threads()
    workers = min(len(jobs), cpu_threads())
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:  # threads that wait on them
        return list(pool.map(lambda job: compile_apart(*job, threads), jobs))


def compile_apart(program: str, package: str, options: dict, frozen: bool, threads: int) -> int:
    """Compile the exported program saved at `program` into `package` in a fresh interpreter,
    `python -m aiayn.fast.compiled_step`, with `threads` threads (Inductor sizes its C++
    products by them); -> its process id. A fresh interpreter runs nothing of the caller's
    script (multiprocessing's spawn would import it again), and keeps the compiler's
    memory and PyTorch's notices about its own internals out of this process."""
    root = str(Path(__file__).resolve().parents[2])  # the directory that holds `aiayn`
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "aiayn.fast.compiled_step", program, package,
               json.dumps(options), str(int(frozen)), str(threads)]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": path},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _, errors = process.communicate()
    if process.returncode != 0:
        last = errors.strip().splitlines()[-1] if errors.strip() else "no message"
        raise RuntimeError(f"compiling {Path(package).name} failed (exit {process.returncode}): {last}")
    return process.pid


def _compile_saved(program: str, package: str, options: str, frozen: str, threads: str) -> None:
    """`compile_apart`'s process: its arguments as the command line gives them."""
    # the ops of `Int8Linear`'s traced form, which a fresh process has not registered yet
    from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa: F401

    torch.set_num_threads(int(threads))
    _compile(torch.export.load(program), package, json.loads(options), frozen == "1")


def _compile(program: torch.export.ExportedProgram, package: str, options: dict,
             frozen: bool = False) -> None:  # fmt: skip
    """AOTInductor's package of `program`. Inductor runs its `freezing` passes only where
    grad mode is off as it compiles (`frozen`). An int8 model's wide libraries need them:
    they turn `Int8Linear`'s traced form into oneDNN's int8 products, weights packed once.
    A float32 wide library is frozen where oneDNN's packed float32 products beat ATen's
    (MKL's) on this machine (`wide_products`); unfrozen, its products are ATen's."""
    with torch.set_grad_enabled(not frozen), warnings.catch_warnings():
        # Inductor's int8 pass copies a tensor with `torch.tensor`, which warns: its own affair
        warnings.filterwarnings("ignore", message="To copy construct from a tensor", category=UserWarning)
        torch._inductor.aoti_compile_and_package(program, package_path=package,
                                                 inductor_configs=dict(options))  # fmt: skip


def _step_examples(model) -> Iterator[tuple[int, tuple]]:
    """The step's inputs at each of `STEP_ROWS` (4 hypotheses a sentence, as beam 4 has),
    made one width at a time: the widest hold a base-sized model's keys and values for
    hundreds of rows, and need not all be alive at once."""
    src_len = min(SOURCE_LEN, model.config.max_len)
    for rows in STEP_ROWS:
        yield rows, _step_inputs(model, rows, max(1, rows // 4), EARLIER, src_len)


def _search_step_examples(model) -> Iterator[tuple[int, tuple]]:
    """The search step's inputs at each of `SEARCH_STEP_ROWS`, made one width at a time."""
    for rows in SEARCH_STEP_ROWS:
        sizes = Sizes(sentences=rows // 4, beam=4, earlier=EARLIER, src_len=SOURCE_LEN, nbest=1,
                      width=2 * EARLIER - 1)  # fmt: skip
        yield rows, _search_step_inputs(model, sizes)


def _source_examples(model) -> Iterator[tuple[int, tuple]]:
    """The source keys' inputs at each of `SOURCE_SENTENCES` sentences of `SOURCE_LEN` tokens,
    made one width at a time."""
    src_len = min(SOURCE_LEN, model.config.max_len)
    eos = model.config.eos_id
    for n in SOURCE_SENTENCES:
        yield n * src_len, (torch.full((n, src_len), eos, dtype=torch.long),)


def _step_inputs(model, rows: int, sentences: int, earlier: int, src_len: int) -> tuple:
    """`DecoderStep`'s inputs for `rows` hypotheses of `sentences` sentences after `earlier`
    positions, over sources of `src_len` tokens."""
    c, step = model.config, DecoderStep.from_model(model)
    layers, heads, d_k, d_v = len(model.decoder), step.heads, step.d_k, step.d_v
    like = dict(dtype=model.tgt_embed.weight.dtype)
    return (
        torch.full((rows,), c.eos_id, dtype=torch.long), torch.zeros(c.d_model, **like),
        torch.zeros(earlier, layers, rows, heads, d_k, **like),
        torch.zeros(earlier, layers, rows, heads, d_v, **like),
        torch.zeros(layers, sentences, heads, src_len, d_k, **like),
        torch.zeros(layers, sentences, heads, src_len, d_v, **like),
        torch.ones(sentences, 1, 1, src_len, dtype=torch.bool),
    )  # fmt: skip


def _search_step_inputs(model, sizes: Sizes) -> tuple:
    """`SearchStep`'s inputs at `sizes`: the step's (its hypotheses by sentence and beam),
    the forbidden tokens, the origins, this position's stores and `StepBeam.advance`'s state."""
    c = model.config
    sentences, beam, earlier, nbest, width = (sizes.sentences, sizes.beam, sizes.earlier,
                                              sizes.nbest, sizes.width)  # fmt: skip
    src_len = min(sizes.src_len, c.max_len)
    step = _step_inputs(model, sentences * beam, sentences, earlier, src_len)
    self_k, self_v = (x.view(earlier, x.size(1), sentences, beam, *x.shape[3:]) for x in step[2:4])
    return (
        step[0].view(sentences, beam), step[1], self_k, self_v, *step[4:],
        torch.tensor([c.pad_id, c.bos_id]), torch.zeros(earlier, sentences, beam, dtype=torch.long),
        torch.zeros_like(self_k[0]), torch.zeros_like(self_v[0]),
        torch.zeros(sentences, beam),
        torch.zeros(sentences, beam, width, dtype=torch.long), torch.zeros(sentences, nbest),
        torch.zeros(sentences, nbest), torch.zeros(sentences, nbest, dtype=torch.long),
        torch.zeros(sentences, nbest, width, dtype=torch.long),
        torch.full((sentences,), width, dtype=torch.long), torch.ones(sentences),
        torch.tensor([earlier + 1, 0]), torch.ones(2),
    )  # fmt: skip


def _source_program(model, sizes: Sizes = NARROW) -> torch.export.ExportedProgram:
    """`SourceKeys(model)` exported over (sentences, src_len) sources, at `sizes`."""
    src_len = min(sizes.src_len, model.config.max_len)
    src = torch.full((sizes.sentences, src_len), model.config.eos_id, dtype=torch.long)
    dims = torch.export.Dim
    dynamic = ({0: dims("sentences", min=1), 1: dims("src_len", min=2, max=model.config.max_len)},)
    with torch.no_grad():
        return torch.export.export(SourceKeys(model).eval(), (src,), dynamic_shapes=dynamic)


def _step_program(model, transposed: bool = False, sizes: Sizes = NARROW) -> torch.export.ExportedProgram:
    """`DecoderStep(model, transposed)` exported with dynamic rows, sentences and lengths,
    at `sizes`."""
    step, c, dims = DecoderStep(model, transposed).eval(), model.config, torch.export.Dim
    example = _step_inputs(model, sizes.sentences * sizes.beam, sizes.sentences, sizes.earlier,
                           min(sizes.src_len, c.max_len))  # fmt: skip
    r, s = dims("rows", min=1), dims("sentences", min=1)
    t, n = dims("earlier", min=0), dims("src_len", min=2, max=c.max_len)
    dynamic = ({0: r}, None, {0: t, 2: r}, {0: t, 2: r}, {1: s, 3: n}, {1: s, 3: n}, {0: s, 3: n})
    with torch.no_grad():
        return written_out_attention(torch.export.export(step, example, dynamic_shapes=dynamic))


def _search_step_program(model, transposed: bool = False, sizes: Sizes = NARROW) -> torch.export.ExportedProgram:
    """`SearchStep(model, transposed)` exported with dynamic sentences, beam (2 to `widest_beam`),
    decoded positions, source length, n-best and output length, at `sizes`."""
    c, dims = model.config, torch.export.Dim
    example = _search_step_inputs(model, sizes)
    b, k = dims("sentences", min=1), dims("beam", min=2, max=max(2, widest_beam(c.vocab_size)))
    t, n = dims("earlier", min=0), dims("src_len", min=2, max=c.max_len)
    m, w = dims("nbest", min=1), dims("width", min=1)
    state = ({0: b, 1: k}, {0: b, 1: k, 2: w}, {0: b, 1: m}, {0: b, 1: m}, {0: b, 1: m},
             {0: b, 1: m, 2: w}, {0: b}, {0: b}, None, None)  # `StepBeam.advance`'s
    slot = {1: b, 2: k}
    dynamic = ({0: b, 1: k}, None, {0: t, 2: b, 3: k}, {0: t, 2: b, 3: k}, {1: b, 3: n},
               {1: b, 3: n}, {0: b, 3: n}, None, {0: t, 1: b, 2: k}, slot, slot, state)  # fmt: skip
    with torch.no_grad():
        return written_out_attention(torch.export.export(SearchStep(model, transposed).eval(), example,
                                                         dynamic_shapes=dynamic))  # fmt: skip


def written_out_attention(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """`program` in core ATen ops, its scaled dot-product attention written out as eq. 1's
    two products and softmax rather than left to the CPU's flash-attention kernel. In a
    decoder step each row asks for one query over a short source, where that kernel's
    blocking costs several times the arithmetic; written out, the products and the softmax
    are plain kernels that Inductor fuses with their neighbours (the int8 ones' quantization
    among them). The source keys keep the kernel: there every position is a query."""
    aten = torch.ops.aten
    flash = get_decompositions([aten._scaled_dot_product_flash_attention_for_cpu])
    return program.run_decompositions({**torch.export.default_decompositions(), **flash})


if __name__ == "__main__":  # `compile_apart`'s child
    _compile_saved(*sys.argv[1:])
