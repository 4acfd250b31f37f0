"""Where a training step's time goes, aiayn against HuggingFace MarianMT, op by op.

    .venv/bin/python benchmarks/step_breakdown.py [--size base|small] [--steps 4]
        [--systems aiayn,hf_marian] [--tokens 4000] [--vocab 8000] [--top 12]

The systems and batches are `train_speed.py`'s (same network, same length-grouped batches,
one step = forward, label-smoothed loss, backward, fused Adam), each system alone in a
fresh process. After an untimed pass over the batches, a process times `--steps` plain
steps, then the same steps again under a `TorchDispatchMode` that times every ATen op
(the wall clock around each kernel call, below autograd; the mode's own cost shows as
the step's time under it against the plain one). Ops are grouped: the matrix products
(mm, addmm, bmm, baddbmm, with their out= forms; oneDNN's linear), the attention kernels
(`_scaled_dot_product_*`), the rest by op name. Finally each distinct matrix product of
the process's last step is replayed alone (same shapes and memory layouts, into a
preallocated output), which gives the products' FLOP rate alone against inside the step.

Why: speed-ups to aiayn's step are measured by A/B (`train_speed.py`), but which part of
the step is left to speed up, and how far a system is from the time its matrix products
take, needs the breakdown. `tokens_per_s_if_only_products` is the bound that removing
every other op would reach.

Prints one JSON object: per system the plain step time and tokens/s, the grouped times,
the top `--top` other ops, the products' GFLOP/s in the step and alone; and the ratios
aiayn / MarianMT of the groups' times.
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import subprocess
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import train_speed
from results import add_arguments, emit

# aten op names (overload dropped), and oneDNN's x W^T (+ b) that aiayn's linear maps run
# on x86 CPUs not made by Intel (`aiayn.fast.linear`)
PRODUCTS = {"mm", "addmm", "bmm", "baddbmm", "_linear_pointwise"}


def op_name(func) -> str:
    """aten.addmm.out -> "addmm"."""
    return func._schema.name.split("::")[-1]


def product_dims(name: str, args: tuple) -> tuple[int, int, int, int]:
    """(batch, M, K, N) of a matrix product's call arguments."""
    if name == "_linear_pointwise":  # X (..., K), W (N, K)
        x, w = args[:2]
        return 1, x.numel() // x.size(-1), x.size(-1), w.size(0)
    a, b = args[-2:] if name in ("addmm", "baddbmm") else args[:2]
    if a.dim() == 2:
        return 1, a.size(0), a.size(1), b.size(1)
    return a.size(0), a.size(1), a.size(2), b.size(2)


class OpTimer(TorchDispatchMode):
    """Wall time of every ATen call by op name; with `keep`, the matrix products' calls.

    A kept call holds meta tensors (shape, strides, dtype; no memory) in place of its
    tensors. Holding the tensors themselves kept the step's memory from being freed, so
    that every allocation after them, in the step being measured, took fresh memory and its
    page faults: at base, the feed-forward's (tokens, 2,048) gradient product then took
    77 ms a call instead of 24.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.products: list[tuple] = []  # (name, func, args, kwargs, seconds), meta tensors
        self.keep = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        start = time.perf_counter()
        out = func(*args, **kwargs)
        elapsed = time.perf_counter() - start
        name = op_name(func)
        self.seconds[name] += elapsed
        if self.keep and name in PRODUCTS:
            args = tuple(meta(a) for a in args)
            kwargs = {k: meta(v) for k, v in kwargs.items()}
            self.products.append((name, func, args, kwargs, elapsed))
        return out


def meta(x):
    """A tensor's shape, strides and dtype as a meta tensor; anything else as it is."""
    if not isinstance(x, torch.Tensor):
        return x
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")


def like(t: torch.Tensor) -> torch.Tensor:
    """A random CPU tensor with `t`'s shape, strides and dtype (a transposed view stays one)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu").normal_()


def replay(products: list[tuple], reps: int = 3) -> float:
    """Seconds the given product calls take alone (each distinct call: best of `reps`)."""
    seen: dict[tuple, tuple[int, tuple]] = {}
    for _, func, args, kwargs, _ in products:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        key = (str(func), *((tuple(t.shape), t.stride()) for t in tensors))
        count, _ = seen.get(key, (0, None))
        seen[key] = (count + 1, (func, args, kwargs))
    total = 0.0
    for count, (func, args, kwargs) in seen.values():
        args = [like(a) if isinstance(a, torch.Tensor) else a for a in args]
        if "out" in kwargs:
            kwargs = {**kwargs, "out": like(kwargs["out"])}
        best = float("inf")
        for _ in range(reps + 1):  # the first call warms the layout up, as in the step
            start = time.perf_counter()
            func(*args, **kwargs)
            best = min(best, time.perf_counter() - start)
        total += best * count
    return total


def worker(args) -> None:
    """One system alone: its plain step times, the op breakdown, the products replayed."""
    torch.manual_seed(0)
    run_args = argparse.Namespace(batches=4, tokens=args.tokens, vocab=args.vocab, device="cpu")
    batches = train_speed.prepared_batches(run_args)
    steppers = train_speed.steppers(args.size, "cpu", None, args.vocab, names=(args.worker,))
    model, optimizer, forward = steppers[args.worker]

    def step(i: int) -> int:
        b = batches[i % len(batches)]
        train_speed.train_step(model, optimizer, forward, b, torch.float32)
        return b.n_tgt_tokens

    for i in range(len(batches)):  # untimed: first-shape costs, the optimizer's state
        step(i)
    start, tokens = time.perf_counter(), sum(step(i) for i in range(args.steps))
    plain = time.perf_counter() - start
    timer = OpTimer()
    start = time.perf_counter()
    with timer:
        for i in range(args.steps):
            timer.keep = i == args.steps - 1  # the last step's products are replayed
            step(i)
    timed = time.perf_counter() - start
    last_in_step = sum(p[-1] for p in timer.products)
    flops = sum(2 * b * m * k * n for b, m, k, n in
                (product_dims(p[0], p[2]) for p in timer.products))  # fmt: skip
    print(json.dumps({
        "plain_s": plain, "timed_s": timed, "tokens": tokens, "seconds": timer.seconds,
        "last": {"flops": flops, "in_step_s": last_in_step,
                 "alone_s": replay(timer.products)},
    }))  # fmt: skip


def summarise(out: dict, steps: int, top: int) -> dict:
    per_step = {name: s / steps * 1e3 for name, s in out["seconds"].items()}  # ms
    products = sum(ms for name, ms in per_step.items() if name in PRODUCTS)
    attention = sum(ms for name, ms in per_step.items() if "scaled_dot_product" in name)
    rest = {n: ms for n, ms in per_step.items() if n not in PRODUCTS and "scaled_dot" not in n}
    step_ms = out["plain_s"] / steps * 1e3
    last = out["last"]
    return {
        "step_ms": round(step_ms, 1),
        "tokens_per_s": round(out["tokens"] / out["plain_s"], 1),
        "step_ms_under_op_timer": round(out["timed_s"] / steps * 1e3, 1),
        "ms_per_step": {"matrix products": round(products, 1),
                        "attention kernels": round(attention, 1),
                        "other ops": round(sum(rest.values()), 1)},  # fmt: skip
        "top_other_ops_ms": {
            n: round(ms, 1) for n, ms in sorted(rest.items(), key=lambda kv: -kv[1])[:top]
        },
        "products_gflops_in_step": round(last["flops"] / last["in_step_s"] / 1e9, 1),
        "products_gflops_alone": round(last["flops"] / last["alone_s"] / 1e9, 1),
        "tokens_per_s_if_only_products": round(out["tokens"] / (products * steps / 1e3), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="base", choices=sorted(train_speed.SIZES))
    parser.add_argument("--systems", default="aiayn,hf_marian")
    parser.add_argument("--steps", type=int, default=4, help="steps timed, each way")
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--vocab", type=int, default=train_speed.VOCAB)
    parser.add_argument("--top", type=int, default=12, help="other ops listed per system")
    parser.add_argument("--worker", choices=train_speed.SYSTEMS, help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    results = {}
    for name in args.systems.split(","):
        command = [sys.executable, __file__, "--worker", name, "--size", args.size,
                   "--steps", str(args.steps), "--tokens", str(args.tokens),
                   "--vocab", str(args.vocab)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"worker {name} failed:\n{done.stderr}")
        results[name] = summarise(json.loads(done.stdout), args.steps, args.top)
    ratios = {}
    if {"aiayn", "hf_marian"} <= results.keys():
        a, m = results["aiayn"], results["hf_marian"]
        ratios = {f"{group} ms, aiayn / hf_marian": round(ms / m["ms_per_step"][group], 3)
                  for group, ms in a["ms_per_step"].items()}  # fmt: skip
        ratios["tokens/s, aiayn / hf_marian"] = round(a["tokens_per_s"] / m["tokens_per_s"], 3)
    emit(__file__, {
        "task": "training step time by op, each system alone in its process",
        "size": args.size, "dims": dict(zip(("d_model", "heads", "d_ff", "layers"),
                                            train_speed.SIZES[args.size])),
        "steps": args.steps, "vocab": args.vocab, "threads": torch.get_num_threads(),
        "systems": results, "ratios": ratios,
        "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
