"""The model's linear maps (`aiayn.fast.linear`): oneDNN's products where they are the
faster, PyTorch's own elsewhere, with the same values and gradients either way."""

from __future__ import annotations

import copy
import time
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import aiayn.fast.linear as linear_module
from aiayn import fast
from aiayn.config import ModelConfig
from aiayn.fast.linear import OneDnnLinear, affine, cpu_vendor, input_grad, linear
from aiayn.loss import RealTokenLoss
from aiayn.model.transformer import Transformer
from conftest import onednn_runs_here

needs_onednn = pytest.mark.skipif(
    not onednn_runs_here(), reason="not an x86 CPU, or PyTorch built without oneDNN"
)


class _OpNames(TorchDispatchMode):
    """The names of the ops that ran, below autograd (and their second arguments' shapes)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self.shapes: dict[str, list[tuple]] = {}  # op -> the shape of its second argument

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func._schema.name)
        if len(args) > 1 and isinstance(args[1], torch.Tensor):
            self.shapes.setdefault(func._schema.name, []).append(tuple(args[1].shape))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def mkl(monkeypatch):
    monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: False)


def _inputs(shape, bias: bool, gen: torch.Generator):
    x = torch.randn(*shape, 24, generator=gen, requires_grad=True)  # (..., in)
    w = torch.randn(40, 24, generator=gen, requires_grad=True)  # (out, in)
    b = torch.randn(40, generator=gen, requires_grad=True) if bias else None
    return x, w, b


@needs_onednn
@pytest.mark.parametrize("shape", [(7,), (3, 5)])
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_linear_gives_f_linears_value_and_gradients(onednn, shape, bias):
    gen = torch.Generator().manual_seed(0)
    x, w, b = _inputs(shape, bias, gen)
    with _OpNames() as ops:
        out = linear(x, w, b)
    assert "mkldnn::_linear_pointwise" in ops.names and "aten::addmm" not in ops.names
    expected = F.linear(x, w, b)
    torch.testing.assert_close(out, expected)
    upstream = torch.randn(out.shape, generator=gen)
    leaves = [t for t in (x, w, b) if t is not None]
    with _OpNames() as ops:
        got = torch.autograd.grad(out, leaves, upstream)
    assert ops.names.count("mkldnn::_linear_pointwise") == 1  # the input's gradient
    for g, e in zip(got, torch.autograd.grad(expected, leaves, upstream)):
        torch.testing.assert_close(g, e)


@needs_onednn
def test_only_the_gradients_asked_for_are_computed(onednn):
    gen = torch.Generator().manual_seed(1)
    x, w, b = _inputs((4,), True, gen)
    frozen = x.detach()  # the input needs no gradient: no g W product
    with _OpNames() as ops:
        grad_w, grad_b = torch.autograd.grad(linear(frozen, w, b).sum(), [w, b])
    assert ops.names.count("mkldnn::_linear_pointwise") == 1  # the forward only
    torch.testing.assert_close(grad_w, torch.ones(4, 40).t() @ frozen)
    torch.testing.assert_close(grad_b, torch.full((40,), 4.0))


@needs_onednn
def test_affine_and_input_grad_are_the_products_they_name(onednn):
    gen = torch.Generator().manual_seed(2)
    x, w, b = (t.detach() for t in _inputs((6,), True, gen))
    torch.testing.assert_close(affine(x, w, b), x @ w.t() + b)
    torch.testing.assert_close(affine(x, w, b, relu=True), (x @ w.t() + b).clamp_min(0))
    g = torch.randn(6, 40, generator=gen)
    torch.testing.assert_close(input_grad(g, w), g @ w)
    with _OpNames() as ops:
        affine(x, w, None), input_grad(g, w)
    products = [n for n in ops.names if n != "aten::t"]  # W^T is a view, not a product
    assert products == ["mkldnn::_linear_pointwise"] * 2


@needs_onednn
def test_float64_autocast_and_mkl_take_pytorchs_own_product(onednn, monkeypatch):
    gen = torch.Generator().manual_seed(3)
    x, w, b = _inputs((5,), True, gen)

    def ops_of(fn):
        with _OpNames() as ops:
            fn()
        return ops.names

    assert "mkldnn::_linear_pointwise" not in ops_of(lambda: linear(x.double(), w.double()))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "mkldnn::_linear_pointwise" not in ops_of(lambda: linear(x, w, b))
    monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: False)
    assert "mkldnn::_linear_pointwise" not in ops_of(lambda: linear(x, w, b))
    assert torch.equal(linear(x, w, b), F.linear(x, w, b))


def test_linear_module_is_an_nn_linear_with_the_same_state(mkl):
    torch.manual_seed(0)
    theirs = nn.Linear(8, 3)
    ours = OneDnnLinear.from_core(theirs)
    assert ours.weight is theirs.weight and ours.bias is theirs.bias  # the same parameters
    assert isinstance(ours, nn.Linear) and ours.state_dict().keys() == theirs.state_dict().keys()
    x = torch.randn(2, 8)
    assert torch.equal(ours(x), theirs(x))


@needs_onednn
def test_a_training_step_with_onednn_matches_one_without(monkeypatch):
    """The whole model: loss and every gradient agree between the two products (float32
    rounding apart), dropout off."""
    config = ModelConfig(vocab_size=40, d_model=32, n_heads=4, d_ff=64, n_layers=2, p_drop=0.0)
    torch.manual_seed(0)
    model = fast.apply(Transformer(config).train())
    src, tgt = torch.randint(4, 40, (3, 9)), torch.randint(4, 40, (3, 7))

    def loss_and_grads(faster: bool):
        monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: faster)
        with _OpNames() as ops:
            loss = model(src, tgt).log_softmax(-1).mean()
            grads = torch.autograd.grad(loss, list(model.parameters()))
        assert ("mkldnn::_linear_pointwise" in ops.names) == faster
        return loss, grads

    loss_a, grads_a = loss_and_grads(True)
    loss_b, grads_b = loss_and_grads(False)
    torch.testing.assert_close(loss_a, loss_b)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "text, vendor",
    [
        ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n", "AuthenticAMD"),
        ("processor\t: 0\nvendor_id\t: GenuineIntel\n", "GenuineIntel"),
        ("processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n", ""),  # an Arm CPU
    ],
)
def test_cpu_vendor_reads_proc_cpuinfo(tmp_path, text, vendor):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert cpu_vendor(str(path)) == vendor


def test_cpu_vendor_is_empty_without_cpuinfo(tmp_path):
    assert cpu_vendor(str(tmp_path / "missing")) == ""


@pytest.mark.parametrize(
    "vendor, expected", [("AuthenticAMD", True), ("GenuineIntel", False), ("", False)]
)
def test_onednn_is_chosen_on_x86_cpus_not_made_by_intel(monkeypatch, vendor, expected):
    monkeypatch.setattr(linear_module, "cpu_vendor", lambda: vendor)
    linear_module.onednn_faster_here.cache_clear()
    try:
        available = torch.backends.mkl.is_available() and torch.backends.mkldnn.is_available()
        assert linear_module.onednn_faster_here() == (expected and available)
    finally:
        linear_module.onednn_faster_here.cache_clear()


@needs_onednn
def test_the_chunked_loss_on_onednn_matches_it_on_mkl(monkeypatch):
    """The loss's own products (logits per chunk, the hidden states' gradient) on oneDNN:
    the same sums and gradients as with PyTorch's product, float32 rounding apart."""
    from aiayn.fast.loss import projected_label_smoothed_loss

    gen = torch.Generator().manual_seed(4)
    hidden = torch.randn(10, 16, generator=gen, requires_grad=True)  # (rows, d_model)
    weight = torch.randn(30, 16, generator=gen, requires_grad=True)  # (V, d_model)
    target = torch.randint(0, 30, (10,), generator=gen)
    results = []
    for faster in (True, False):
        monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: faster)
        with _OpNames() as ops:
            smoothed, nll = projected_label_smoothed_loss(hidden, weight, target, 0.1, chunk_rows=4)
            grads = torch.autograd.grad(smoothed, [hidden, weight])
        # 3 chunks of at most 4 rows, each with its logits and its g W on oneDNN
        assert ops.names.count("mkldnn::_linear_pointwise") == (6 if faster else 0)
        results.append((smoothed, nll, *grads))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)


def test_a_bucketed_linear_multiplies_bucket_rows_and_gives_the_cores_rows():
    from aiayn.fast.linear import BucketedLinear, bucket_rows

    core = nn.Linear(6, 5).double()
    bucketed = BucketedLinear.from_core(core)
    assert bucketed.weight is core.weight and bucketed.bias is core.bias
    for shape in ((3, 6), (2, 7, 6), (1, 6), (130, 6)):
        x = torch.randn(shape, dtype=torch.float64)
        with _OpNames() as ops:
            out = bucketed(x)
        torch.testing.assert_close(out, core(x), rtol=0, atol=1e-12)
        rows = x.numel() // 6  # the product's input: zeros after them up to a bucket's size
        assert ops.shapes["aten::addmm"] == [(bucket_rows(rows), 6)] and bucket_rows(rows) > 1


def test_bucket_rows_rounds_up_by_at_most_an_eighth():
    from aiayn.fast.linear import bucket_rows

    sizes = [bucket_rows(n) for n in range(1, 5000)]
    assert all(n <= b <= max(n * 9 // 8 + 1, -(-n // 8) * 8) for n, b in zip(range(1, 5000), sizes))
    assert bucket_rows(0) == 0 and bucket_rows(64) == 64 and bucket_rows(65) == 72
    assert len(set(sizes)) <= 70  # 8 sizes up to 64, then 8 per doubling


@needs_onednn
def test_inference_meets_a_bounded_set_of_shapes_and_the_same_values(onednn, onednn_shapes):
    """A server's batches come in every size; oneDNN keeps a kernel per shape, so inference
    pads rows to `bucket_rows` sizes and, with max_rows, splits inputs past it: the shapes
    are those of `inference_rows()`, however many rows come. Neither changes a value; without
    max_rows an input is one product."""
    weight, bias = torch.randn(24, 16), torch.randn(24)
    with torch.no_grad():
        for rows in [*range(1, 300), 517, 1000]:
            x = torch.randn(rows, 2, 16)  # (rows, 2, in): leading dims are kept
            out = linear(x, weight, bias, max_rows=linear_module.MAX_ROWS)
            assert out.shape == (rows, 2, 24)
            torch.testing.assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
    rows = linear_module.inference_rows()
    assert {x[0] for x, _, _ in onednn_shapes} == set(rows) and max(rows) == linear_module.MAX_ROWS
    assert len(rows) == 32  # 8 sizes to 64, 8 per doubling to 512
    onednn_shapes.clear()
    with torch.no_grad():
        linear(torch.randn(1000, 2, 16), weight, bias)  # no max_rows: one product
    assert [x for x, _, _ in onednn_shapes] == [(linear_module.bucket_rows(2000), 16)]


@needs_onednn
def test_warm_up_builds_every_shape_that_inference_asks_for(onednn, onednn_shapes):
    """oneDNN keeps each shape's kernel for the life of the process (about half a megabyte),
    so a server kept meeting new ones, and growing, over a run. After `warm_up(model)`, encoding and
    decoding batches of any size ask for no product shape it has not built."""
    shapes = onednn_shapes
    model = fast.apply(Transformer(ModelConfig(
        vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_layers=2, p_drop=0.0
    )).eval())  # fmt: skip
    visited = linear_module.warm_up(model)
    warm = set(shapes)
    assert visited == len(warm) > 0
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for sentences, length in [(1, 3), (5, 17), (37, 9), (300, 2), (70, 11)]:
            src = torch.randint(4, 40, (sentences, length), generator=gen)
            tgt = torch.randint(4, 40, (sentences, 1 + length % 4), generator=gen)
            model(src, tgt)  # every product of encoding and decoding, the output layer's too
    assert len(shapes) > len(warm) and set(shapes) <= warm


class _Clock:
    """A clock where each oneDNN product takes `onednn` seconds and each MKL one `mkl`."""

    def __init__(self, onednn: float, mkl: float, monkeypatch) -> None:
        self.now, self.cost = 0.0, 0.0
        self.calls = {"onednn": 0, "mkl": 0}
        real_onednn, real_mkl = linear_module._onednn_linear, F.linear

        def timed(name, real, seconds):
            def product(*args, **kwargs):
                self.calls[name] += 1
                self.cost = seconds
                return real(*args, **kwargs)
            return product

        monkeypatch.setattr(linear_module, "_onednn_linear", timed("onednn", real_onednn, onednn))
        monkeypatch.setattr(linear_module.F, "linear", timed("mkl", real_mkl, mkl))

    def __call__(self) -> float:
        self.now += self.cost  # the product that ran since the last reading
        self.cost = 0.0
        return self.now


@needs_onednn
@pytest.mark.parametrize("onednn_seconds, uses_onednn", [(1.0, False), (0.001, True)])
def test_inference_takes_the_product_measured_faster_for_its_shape(
    onednn, monkeypatch, onednn_seconds, uses_onednn
):  # fmt: skip
    """Per shape, `ProductChoice` times each library once and keeps the faster; later
    products of that shape go to it unmeasured, and the value is x W^T + b either way."""
    clock = _Clock(onednn_seconds, 0.01, monkeypatch)
    choice = linear_module.ProductChoice(repeats=3, clock=clock)
    weight, bias = torch.randn(24, 16), torch.randn(24)
    with torch.no_grad():
        for rows in (5, 6, 7, 5):  # one bucket of 8 rows: measured once
            x = torch.randn(rows, 16)
            out = linear(x, weight, bias, choice=choice)
            torch.testing.assert_close(out, x @ weight.T + bias, rtol=1e-5, atol=1e-5)
    assert choice.onednn == {(8, (24, 16), True, torch.get_num_threads()): uses_onednn}
    measured = 1 + 3  # one untimed call (the kernel's first) and `repeats` timed ones
    assert clock.calls == {"onednn": measured + 4 * uses_onednn,
                           "mkl": measured + 4 * (not uses_onednn)}  # fmt: skip


@needs_onednn
def test_models_for_inference_share_one_choice_and_warm_up_measures_every_shape(
    onednn, monkeypatch
):  # fmt: skip
    """Every model of a process reads one `ProductChoice` (two translators of a checkpoint
    then compute the same bits), and `warm_up` measures each shape a server will meet."""
    monkeypatch.setattr(linear_module, "shared_choice", lambda: fresh)
    monkeypatch.setattr(fast, "shared_choice", lambda: fresh)
    fresh = linear_module.ProductChoice(repeats=1)
    config = ModelConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_layers=2, p_drop=0.0)
    model, _ = fast.for_inference(Transformer(config))
    other, _ = fast.for_inference(Transformer(config))
    linears = [m for m in model.modules() if isinstance(m, OneDnnLinear)]
    linears += [m for m in other.modules() if isinstance(m, OneDnnLinear)]
    assert all(m.choice is fresh for m in linears)
    assert copy.deepcopy(fresh) is fresh  # a copied model reads the same measurements
    linear_module.warm_up(model)
    shapes = {(tuple(m.weight.shape), m.bias is not None) for m in linears}
    rows = linear_module.inference_rows()
    threads = torch.get_num_threads()
    assert set(linears[0].choice.onednn) == {(n, *shape, threads) for n in rows for shape in shapes}
    core = Transformer(ModelConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_layers=1))
    training = fast.for_training(RealTokenLoss(core, 0.1))
    assert all(m.choice is None for m in training.modules() if isinstance(m, OneDnnLinear))


@needs_onednn
def test_processes_read_one_table_of_choices(onednn, monkeypatch, tmp_path):
    """What one process measured, another reads from the table instead of measuring (so
    that a server's model process and a test pick alike); a table that cannot be read is
    measured anew and written again."""
    table = tmp_path / "cache" / "products.json"
    weight, bias = torch.randn(24, 16), torch.randn(24)
    first_clock = _Clock(0.001, 0.01, monkeypatch)
    first = linear_module.ProductChoice(repeats=2, clock=first_clock, table=table)
    with torch.no_grad():
        linear(torch.randn(5, 16), weight, bias, choice=first)
        linear(torch.randn(20, 16), weight, None, choice=first)
    assert len(first.onednn) == 2 and table.is_file()
    second_clock = _Clock(1.0, 0.01, monkeypatch)  # would pick MKL if it measured
    second = linear_module.ProductChoice(repeats=2, clock=second_clock, table=table)
    with torch.no_grad():
        linear(torch.randn(7, 16), weight, bias, choice=second)
    assert second.onednn == first.onednn and all(first.onednn.values())
    assert second_clock.calls["mkl"] == 0  # read, not measured
    table.write_text("{not json", encoding="utf-8")
    third = linear_module.ProductChoice(repeats=2, clock=_Clock(1.0, 0.01, monkeypatch),
                                        table=table)  # fmt: skip
    with torch.no_grad():
        linear(torch.randn(7, 16), weight, bias, choice=third)
    assert list(third.onednn.values()) == [False]  # measured again: MKL is faster now
    assert linear_module.read_table(table) == third.onednn


def test_the_table_is_named_by_the_machine_and_the_kernels_it_may_use(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path / "own"))
    assert linear_module.choice_table().parent == tmp_path / "own"
    monkeypatch.delenv("AIAYN_CACHE_DIR")
    default = linear_module.choice_table()
    assert default.parent == tmp_path / "aiayn" and default.suffix == ".json"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert linear_module.choice_table() != default
    assert linear_module.choice_table().parent == default.parent


def test_an_unwritable_cache_keeps_the_choices_in_the_process(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory", encoding="utf-8")
    table = blocked / "products.json"  # its directory cannot be made
    choice = linear_module.ProductChoice(repeats=1, table=table)
    weight = torch.randn(24, 16)
    first = choice.use_onednn(3, weight, None)
    assert choice.use_onednn(3, weight, None) == first and not table.exists()


def test_a_table_never_changes_a_choice_already_in_use(tmp_path):
    """Read while a process runs, the table adds shapes it has not met; a shape it already
    picked keeps its pick (its products keep their bits), whatever the file says now."""
    table = tmp_path / "products.json"
    choice = linear_module.ProductChoice(repeats=1, table=table)
    weight = torch.randn(24, 16)
    first = choice.use_onednn(3, weight, None)
    threads = torch.get_num_threads()
    other = {(8, (24, 16), False, threads): not first, (16, (24, 16), False, threads): True}
    linear_module.write_table(table, other)  # another process's different measurement
    choice.use_onednn(9, weight, None)  # a new shape: the table is read again
    assert choice.onednn[(8, (24, 16), False, threads)] == first
    assert choice.onednn[(16, (24, 16), False, threads)] is True  # read, not measured


def test_no_lock_to_be_had_leaves_the_choice_to_the_process(tmp_path, monkeypatch):
    """A file system without locks, or a holder stopped for longer than the wait: the
    process measures and picks by itself instead of failing or waiting for ever."""
    import fcntl

    table = tmp_path / "products.json"
    weight = torch.randn(24, 16)
    monkeypatch.setattr(fcntl, "flock", lambda *a: (_ for _ in ()).throw(OSError(37, "no locks")))
    alone = linear_module.ProductChoice(repeats=1, table=table)
    assert isinstance(alone.use_onednn(3, weight, None), bool) and table.is_file()
    monkeypatch.setattr(fcntl, "flock", lambda *a: (_ for _ in ()).throw(BlockingIOError()))
    start = time.monotonic()
    with linear_module._file_lock(table, wait_s=0.1):
        pass
    assert time.monotonic() - start < 5
