"""Restricted self-attention (sec. 4, Table 1): encoder time and memory against full attention.

    .venv/bin/python benchmarks/attention_window.py [--lengths 256,1024,4096] [--window 16]
        [--layers 2] [--repeats 3] [--note TEXT]

Table 1 gives self-attention O(n²·d) operations per layer and restricted self-attention
O(r·n·d): with r fixed, the second should grow linearly with the sequence length n. Here one
random sequence of n tokens (batch 1) goes through a base-width encoder (d_model 512, 8
heads, d_ff 2048, `--layers` layers, the core model in float32 on the CPU, no gradients),
once with full attention (`model.attention_window=0`, PyTorch's attention kernel) and once
with window r (`model.attention_window=r`, `model/window.py`).

Each (attention, n) runs in a fresh subprocess, so that its memory figure is its own:
- ms: the median over `--repeats` forward passes of `model.encode`, after one untimed pass;
- peak MiB: how much the process's peak resident memory (ru_maxrss, host RSS) grew during
  those passes, over what it held once the model and the input existed: the activations'
  peak as the OS sees it, allocator slack included (not torch's own allocation count).
Per attention, the growth factor of each figure for each 4x step in n (linear: 4, the
quadratic term: up to 16). The encoder's projections and feed-forward are linear in n either
way, so only the attention part of the time can grow faster. PyTorch's CPU attention kernel
takes the keys a block at a time and never holds the n x n matrix, so full attention's memory
may grow about linearly as well; its n² shows in the time.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

from aiayn.config import ModelConfig
from aiayn.model.transformer import Transformer
from results import add_arguments, emit

D_MODEL, HEADS, D_FF, VOCAB = 512, 8, 2048, 1000


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


@torch.inference_mode()
def measure(n: int, window: int, layers: int, repeats: int) -> dict:
    """One case, in this process: the encoder's median ms and peak RSS growth (MiB)."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=VOCAB, d_model=D_MODEL, n_heads=HEADS, d_ff=D_FF,
                         n_layers=layers, max_len=n, attention_window=window)  # fmt: skip
    model = Transformer(config).eval()
    src = torch.randint(4, VOCAB, (1, n))  # no padding: every position is a word
    before = peak_mib()
    model.encode(src)  # untimed: first-call costs
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.encode(src)
        times.append((time.perf_counter() - start) * 1000)
    return {"ms": round(statistics.median(times), 1),
            "peak_growth_mib": round(peak_mib() - before, 1)}  # fmt: skip


def growth(by_n: dict[str, dict]) -> dict[str, dict]:
    """For each n after the first, the factor by which each figure grew from the previous n."""
    ns = list(by_n)
    return {
        n: {key: round(by_n[n][key] / max(by_n[prev][key], 0.1), 2) for key in by_n[n]}
        for prev, n in zip(ns, ns[1:])
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", default="256,1024,4096", help="sequence lengths n")
    parser.add_argument("--window", type=int, default=16, help="r of the restricted runs")
    parser.add_argument("--layers", type=int, default=2, help="encoder layers")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per case")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # the child: "n,window"
    add_arguments(parser)
    args = parser.parse_args()
    if args.case:
        n, window = (int(x) for x in args.case.split(","))
        print(json.dumps(measure(n, window, args.layers, args.repeats)))
        return
    lengths = [int(n) for n in args.lengths.split(",")]
    results: dict[str, dict[str, dict]] = {"full": {}, f"window_{args.window}": {}}
    for name, window in zip(results, (0, args.window)):
        for n in lengths:
            child = [sys.executable, __file__, "--case", f"{n},{window}", "--layers",
                     str(args.layers), "--repeats", str(args.repeats)]  # fmt: skip
            out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
            results[name][str(n)] = json.loads(out.strip().splitlines()[-1])
            print(name, n, results[name][str(n)], file=sys.stderr, flush=True)
    full, restricted = results.values()
    top = str(lengths[-1])
    emit(__file__, {
        "task": "encoder forward of one sequence (batch 1, float32, no gradients)",
        "d_model": D_MODEL, "heads": HEADS, "d_ff": D_FF, "layers": args.layers,
        "window": args.window, "lengths": lengths, "repeats": args.repeats,
        "threads": torch.get_num_threads(), "results": results,
        "growth_per_step": {name: growth(by_n) for name, by_n in results.items()},
        "ratio_full_over_window_time_at_longest": round(
            full[top]["ms"] / restricted[top]["ms"], 2),
        "ratio_full_over_window_peak_growth_at_longest": round(
            full[top]["peak_growth_mib"] / max(restricted[top]["peak_growth_mib"], 0.1), 2),
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
