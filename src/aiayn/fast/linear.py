"""The model's linear maps, x W^T + b, on the faster of the CPU's two float32 products.

PyTorch multiplies float32 matrices on the CPU with Intel's MKL, which takes its fastest
(AVX-512) kernels only on Intel processors and runs slower code on other x86 processors.
oneDNN, also inside PyTorch, picks its kernels by instruction set alone. So on x86 CPUs not
made by Intel, the products x W^T + b (forward) and g W (the input's gradient) go through
oneDNN's linear; the weight's gradient g^T x stays with MKL, since oneDNN would first copy
both transposed operands. `benchmarks/step_breakdown.py` measures the products in a step.

At inference the rows are few (a decoder step multiplies beam x sentences rows), and there
neither library wins everywhere: oneDNN's fixed cost per call loses to MKL on small shapes,
and wins on large weights. So inference asks a `ProductChoice` (the process's, set on each
model by `fast.for_inference`), which times both products once per shape and keeps the faster,
in a table on disk that every process of this machine and these libraries reads
(`choice_table`): a server's model process, `aiayn translate` and a test then pick alike.

Both are float32 products, accumulated in float32 in different orders: they differ in the
last bits, as two block sizes of one library do. Float64, autocast, other devices and code
that `torch.compile` traces take PyTorch's own product.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn



class ProductChoice:
    """Per inference shape (bucketed rows, weight shape, bias, torch's threads), whether
    oneDNN's product is the faster: measured at the shape's first product, the best of
    `repeats` timed calls of each library on zeros of that shape, and kept. `shared_choice()`
    is the one every model of a process uses, so that two translators of one checkpoint
    compute the same bits. With a `table` file, what any process measured is read before
    measuring and written after, one process at a time, so that processes pick alike too
    (where the two libraries are close, two measurements could pick differently, and with
    them the last bits of the products: see above)."""

    def __init__(
        self, repeats: int = 5, clock: Callable[[], float] = time.perf_counter,
        table: Path | None = None,
    ) -> None:  # fmt: skip
        self.repeats, self.clock, self.table = repeats, clock, table
        self.onednn: dict[tuple, bool] = {}  # shape -> oneDNN is the faster
        self._lock = threading.Lock()  # one measurement at a time (a server's model threads)

    def __deepcopy__(self, memo: dict) -> ProductChoice:
        """A copied model reads the same measurements: they are the machine's, not the
        model's (and the lock cannot be copied)."""
        return self

    def use_onednn(self, rows: int, weight: Tensor, bias: Tensor | None) -> bool:
        key = (bucket_rows(rows), tuple(weight.shape), bias is not None, torch.get_num_threads())
        if key not in self.onednn:
            with self._lock, _file_lock(self.table):
                for known, onednn in read_table(self.table).items():  # other processes'
                    self.onednn.setdefault(known, onednn)  # never a choice already in use
                if key not in self.onednn:
                    x = weight.new_zeros(key[0], weight.size(1))  # (rows, in)
                    onednn = self._best(lambda: _onednn_linear(x, weight, bias))
                    mkl = self._best(lambda: F.linear(x, weight, bias))  # PyTorch's: MKL's on x86
                    self.onednn[key] = onednn < mkl
                    write_table(self.table, self.onednn)
        return self.onednn[key]

    def _best(self, product: Callable[[], Tensor]) -> float:
        product()  # the first call builds the kernel: not timed
        times = []
        for _ in range(self.repeats):
            start = self.clock()
            product()
            times.append(self.clock() - start)
        return min(times)


@functools.cache
def shared_choice() -> ProductChoice:
    """The process's `ProductChoice`: what was measured on this machine holds for every
    model the process loads (a property of the CPU and the libraries, not of a model), and
    for every process that reads its `choice_table()`."""
    return ProductChoice(table=choice_table())


def choice_table(cache: Path | None = None) -> Path:
    """Where the measured choices of this machine and these libraries are kept: a JSON file
    in `cache_dir()` named by `machine_digest()`, so that a change of CPU, kernels or torch
    measures anew. Deleting the file also does."""
    return (cache or cache_dir()) / f"products-{machine_digest()}.json"


def cache_dir() -> Path:
    """aiayn's cache directory: `$AIAYN_CACHE_DIR`, else `$XDG_CACHE_HOME/aiayn`, else
    `~/.cache/aiayn` (what it holds is measured or built here, and rebuilt when missing)."""
    if os.environ.get("AIAYN_CACHE_DIR"):
        return Path(os.environ["AIAYN_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aiayn"


def machine_digest() -> str:
    """A hash of what makes a measurement or a compiled kernel this machine's: the CPU's
    model, the kernels torch and oneDNN may use (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA)
    and torch's version."""
    machine = [cpu_field("model name"), torch.backends.cpu.get_cpu_capability(),
               os.environ.get("ONEDNN_MAX_CPU_ISA", ""), torch.__version__]  # fmt: skip
    return hashlib.sha256("|".join(machine).encode()).hexdigest()[:16]


def _table_key(key: tuple) -> str:
    rows, (out, inp), bias, threads = key
    return f"{rows} {out} {inp} {int(bias)} {threads}"


def read_table(table: Path | None) -> dict[tuple, bool]:
    """The choices in `table` ({} where there is none, or it cannot be read: measured anew)."""
    if table is None:
        return {}
    try:
        data = json.loads(table.read_text(encoding="utf-8"))
        out = {}
        for text, onednn in data["onednn"].items():
            rows, o, i, bias, threads = (int(v) for v in text.split())
            if not isinstance(onednn, bool):
                raise TypeError(f"{text}: {onednn!r} is not a choice")
            out[(rows, (o, i), bool(bias), threads)] = onednn
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def write_table(table: Path | None, choices: dict[tuple, bool]) -> None:
    """`choices` into `table`, whole (the caller read it first), replaced at once; where
    the cache cannot be written the choices stay this process's only."""
    if table is None:
        return
    data = {"onednn": {_table_key(k): v for k, v in sorted(choices.items())}}
    part = table.with_name(f"{table.name}.{os.getpid()}.part")
    try:
        table.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps(data, indent=0), encoding="utf-8")
        os.replace(part, table)
    except OSError:  # a half-written part is not left behind
        with suppress(OSError):
            part.unlink()


LOCK_WAIT_S = 30.0  # how long a process waits for another's measurement before its own


@contextmanager
def _file_lock(table: Path | None, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """One process at a time reads, measures and writes `table`: two processes then never
    measure one shape twice, nor pick it differently. Where there is no lock to be had (no
    `fcntl`, a cache that cannot be written, a file system without locks, or a holder
    stopped for more than `wait_s`), the process goes on alone: the choice stays right for
    it, and only the agreement between processes is lost."""
    if table is None:
        yield
        return
    try:
        import fcntl

        table.parent.mkdir(parents=True, exist_ok=True)
        handle = open(table.with_name(table.name + ".lock"), "a")
    except (ImportError, OSError):  # no fcntl (Windows), or no writable cache
        yield
        return
    with handle:
        end, locked = time.monotonic() + wait_s, False
        while not locked:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:  # another process is measuring
                if time.monotonic() > end:
                    break
                time.sleep(0.02)
            except OSError:  # no locks on this file system
                break
        try:
            yield
        finally:
            if locked:
                fcntl.flock(handle, fcntl.LOCK_UN)


class _SwappedLinear(nn.Linear):
    """An `nn.Linear` with another product, swapped in for a core one (`from_core`)."""

    @classmethod
    def from_core(cls, core: nn.Linear):
        """A module over `core`'s own parameters (not copies: optimizers and ties hold)."""
        fast = cls(core.in_features, core.out_features, bias=False, device="meta")
        fast.weight, fast.bias = core.weight, core.bias
        return fast


class OneDnnLinear(_SwappedLinear):
    """`nn.Linear` whose product is `linear` below; the same parameters and state dict.
    `max_rows`: see `linear` (None, the default, until `warm_up` sets it); `choice`: the
    process's `ProductChoice` at inference (None: oneDNN wherever `onednn_products`)."""

    max_rows: int | None = None
    choice: ProductChoice | None = None

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.max_rows, self.choice)


class BucketedLinear(_SwappedLinear):
    """`nn.Linear` over its rows padded to `bucket_rows` (the padding's output rows cut off),
    the same parameters: for a compiled library whose products are oneDNN's packed ones,
    so that the library meets a bounded set of row counts (see `bucket_rows`)."""

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.size(-1))  # (tokens, in)
        out = F.linear(padded_to_bucket(rows), self.weight, self.bias)  # (padded, out)
        return out[: rows.size(0)].view(*x.shape[:-1], -1)  # (..., out)


def linear(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, max_rows: int | None = None,
    choice: ProductChoice | None = None,
) -> Tensor:  # fmt: skip
    """x W^T + b: (..., in), weight (out, in), bias (out,) or None -> (..., out).
    `max_rows`: at inference, the most rows one product takes, larger inputs split (None:
    one product, which is faster; `warm_up` sets it for a long-lived process). `choice`:
    at inference, oneDNN only for the shapes where it measured faster."""
    if not onednn_products(x, weight):
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _OneDnnLinear.apply(x, weight, bias)
    rows = x.reshape(-1, x.size(-1))  # (tokens, in)
    product_rows = min(rows.size(0), max_rows or rows.size(0))  # one product's, split or not
    if choice is not None and not choice.use_onednn(product_rows, weight, bias):
        return F.linear(x, weight, bias)
    if max_rows is None or rows.size(0) <= max_rows:
        out = _bucketed(rows, weight, bias)
    else:  # (tokens, out), max_rows rows a product
        out = torch.cat([_bucketed(part, weight, bias) for part in rows.split(max_rows)])
    return out.view(*x.shape[:-1], weight.size(0))


MAX_ROWS = 512  # the rows of one inference product once `warm_up` has bounded them


def _bucketed(rows: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x W^T + b on (n, in) rows, padded to `bucket_rows(n)` rows: (n, out)."""
    n = rows.size(0)
    if bucket_rows(n) != n:  # zero rows, whose output rows are cut off below
        rows = padded_to_bucket(rows)  # (padded, in)
    return _onednn_linear(rows, weight, bias)[:n]


def padded_to_bucket(rows: Tensor) -> Tensor:
    """rows (n, in) and zero rows after them up to `bucket_rows(n)`: (padded, in). Written
    into zeros rather than with `F.pad`, so that a traced graph, whose n is a symbol, pads
    as eager code does (`int8.Int8Linear.graph_form`)."""
    padded = rows.new_zeros(bucket_rows(rows.size(0)), rows.size(1))  # (padded, in)
    padded[: rows.size(0)] = rows
    return padded


def bucket_rows(rows):
    """`rows` rounded up to one of a bounded set of sizes: a multiple of 8 up to 127, then one
    of 8 sizes per doubling (at most 12.5% more rows).

    oneDNN builds a kernel for each shape it multiplies and keeps it for the life of the
    process, about half a megabyte each, in its primitive cache and beside it. A server's
    batches come in every size, and a process that kept meeting new shapes kept growing
    (measured by `benchmarks/serve_load.py`). Inference therefore pads rows to these sizes;
    a long-lived process also splits inputs of more than MAX_ROWS rows (`warm_up`), so that
    each weight meets at most `len(inference_rows())` shapes, all built before the first
    request, and memory stays flat from then on. A one-off translation keeps whole products
    (a split costs a few per cent of beam search). Training keeps its exact shapes: its
    batches are built to a token budget, and padding would cost compute.

    Written in integer arithmetic without a branch on `rows`, so that a traced graph, whose
    row count is a symbol, pads as eager code does (`padded_to_bucket`): the step
    starts at 8 and doubles at 128 rows and at each doubling after (up to 2**23 rows).
    """
    step = 8
    for k in range(16):  # from 128 << k rows on, the step grows by 8 << k
        if isinstance(rows, int):  # a plain count: no branch to avoid
            if rows < 128 << k:
                break
            step += 8 << k
        else:  # 1 from 128 << k rows on, else 0
            step = step + (8 << k) * torch.sym_min(1, rows // (128 << k))
    return rows + -rows % step  # the next multiple of step (a sum, which a tracer sees is >= rows)


def inference_rows() -> list[int]:
    """Every row count an inference product gives oneDNN after `warm_up`: the buckets up to
    MAX_ROWS."""
    return sorted({bucket_rows(n) for n in range(1, MAX_ROWS + 1)})


def warm_up(model: nn.Module) -> int:
    """Bound `model`'s oneDNN products to MAX_ROWS rows each (its `OneDnnLinear` modules'
    `max_rows`, the pre-softmax projection's included), then run each once at every row count of
    `inference_rows()`, so that oneDNN has built every kernel inference will ask of it (see
    `bucket_rows`); for a process that serves for long, as `aiayn serve` does. Products of
    one shape share their kernels. -> the number of shapes visited (0 where oneDNN is not
    used)."""
    weights, choice = [], None  # (weight, bias) of each product; the modules' ProductChoice
    for module in model.modules():
        if isinstance(module, OneDnnLinear):
            weights.append((module.weight, module.bias))
            module.max_rows, choice = MAX_ROWS, module.choice
    shapes = {(tuple(w.shape), w.dtype, b is not None): (w, b) for w, b in weights}
    if not any(onednn_products(w.new_empty(0, w.size(1)), w) for w, _ in shapes.values()):
        return 0
    with torch.inference_mode():
        for weight, bias in shapes.values():
            for n in inference_rows():  # with a choice, each shape is also measured now
                linear(weight.new_zeros(n, weight.size(1)), weight, bias, MAX_ROWS, choice)
    return len(shapes) * len(inference_rows())


def affine(x: Tensor, weight: Tensor, bias: Tensor | None, relu: bool = False) -> Tensor:
    """x W^T + b, then max(0, .) with `relu`, outside autograd (for hand-written backward
    passes); (..., in) -> (..., out), a tensor of its own."""
    if onednn_products(x, weight):
        return _onednn_linear(x, weight, bias, "relu" if relu else "none")
    out = F.linear(x, weight, bias)
    return out.relu_() if relu else out


def input_grad(grad: Tensor, weight: Tensor) -> Tensor:
    """The gradient of x W^T + b with respect to x: grad W; (..., out) -> (..., in)."""
    if onednn_products(grad, weight):
        return _onednn_linear(grad, weight.t(), None)  # grad (W^T)^T, W^T a view
    return grad @ weight


def onednn_products(x: Tensor, weight: Tensor) -> bool:
    """Whether x's product with `weight` goes through oneDNN (see the module docstring)."""
    return (
        x.dtype == torch.float32 and weight.dtype == torch.float32
        and x.device.type == "cpu" and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling() and onednn_faster_here()
    )  # fmt: skip


@functools.cache
def onednn_faster_here() -> bool:
    """Whether this machine's float32 products run faster in oneDNN than in MKL: an x86 CPU
    of a vendor other than Intel, with PyTorch built with both libraries."""
    return (
        torch.backends.mkl.is_available() and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and cpu_vendor() not in ("GenuineIntel", "")
    )  # fmt: skip


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The x86 vendor string ("GenuineIntel", "AuthenticAMD", ...), or "" where the system
    does not say (no /proc/cpuinfo, or a CPU that is not x86)."""
    return cpu_field("vendor_id", cpuinfo)


def cpu_field(name: str, cpuinfo: str = "/proc/cpuinfo") -> str:
    """The first processor's `name` field in /proc/cpuinfo ("" where there is none)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return ""


def _onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None, attr: str = "none") -> Tensor:
    # oneDNN's inner product; takes any leading dims, like F.linear. attr: a fused
    # element-wise op on the output ("none" or "relu").
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], "")


class _OneDnnLinear(torch.autograd.Function):
    """x W^T + b with oneDNN's products forward and for the input's gradient, MKL's for the
    weight's (see the module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias):  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn_linear(x, weight, bias)  # (..., out)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = input_grad(grad, weight)  # (..., in)
        rows = grad.reshape(-1, grad.size(-1))  # (tokens, out)
        if ctx.needs_input_grad[1]:
            grad_weight = rows.t() @ x.reshape(-1, x.size(-1))  # (out, in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = rows.sum(0)  # (out,)
        return grad_x, grad_weight, grad_bias
