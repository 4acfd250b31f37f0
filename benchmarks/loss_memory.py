"""Memory of a training step: the chunked projection + loss against full logits.

    .venv/bin/python benchmarks/loss_memory.py [--vocab 37000] [--tokens 8000] [--size base]

Two ways to get the label-smoothed loss of one batch and its gradients (forward and
backward, no optimizer step), each run in a fresh subprocess so that its peak resident
memory is its own:
  full:    the core's `RealTokenLoss` (`--reference`): logits = model.project(hidden)
           for all real target tokens, then `label_smoothed_loss(logits, ...)`;
  chunked: the fast path's `ChunkedRealTokenLoss`, which projects and takes the loss a
           chunk of tokens at a time (`projected_label_smoothed_loss`), as the trainer does.

The default vocabulary, 37,000, is the paper's WMT14 En-De one (sec. 5.1). Prints one
JSON object: for each variant the growth of peak RSS during the step (MiB) and the step's
seconds; the ratios full / chunked. CPU only: peak RSS is a host-memory figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from aiayn.config import ModelConfig
from aiayn.data.vocab import PAD_ID
from aiayn.model.transformer import Transformer
from aiayn.fast.loss import ChunkedRealTokenLoss
from aiayn.loss import RealTokenLoss
from aiayn.train.validate import real_positions
from results import add_arguments, emit
from train_speed import SIZES, make_batches

EPS_LS = 0.1


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one_step(variant: str, args) -> dict:
    """Forward + backward of one batch; the growth of this process's peak RSS."""
    torch.manual_seed(0)
    d_model, heads, d_ff, layers = SIZES[args.size]
    model = Transformer(ModelConfig(vocab_size=args.vocab, d_model=d_model, n_heads=heads,
                                    d_ff=d_ff, n_layers=layers))  # fmt: skip
    batch = make_batches(1, args.tokens, seed=1, vocab=args.vocab)[0]
    positions, target = real_positions(batch.tgt_out, PAD_ID, torch.device("cpu"))
    before = peak_mib()
    start = time.perf_counter()
    objective = (RealTokenLoss if variant == "full" else ChunkedRealTokenLoss)(model, EPS_LS)
    loss = objective(batch.src, batch.tgt_in, positions, target)[0]
    loss.backward()
    return {
        "peak_growth_mib": round(peak_mib() - before),
        "step_s": round(time.perf_counter() - start, 2),
        "target_tokens": batch.n_tgt_tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--tokens", type=int, default=8000, help="target tokens in the batch")
    parser.add_argument("--size", default="base", choices=sorted(SIZES))
    parser.add_argument("--variant", choices=("full", "chunked"), help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.variant:  # the child process
        print(json.dumps(one_step(args.variant, args)))
        return
    results = {}
    for variant in ("full", "chunked"):
        child = [sys.executable, __file__, "--variant", variant, "--vocab", str(args.vocab),
                 "--tokens", str(args.tokens), "--size", args.size]  # fmt: skip
        out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
        results[variant] = json.loads(out.strip().splitlines()[-1])
    full, chunked = results["full"], results["chunked"]
    emit(__file__, {
        "task": "forward + backward of one batch, label-smoothed loss (0.1)",
        "size": args.size, "vocab": args.vocab, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "results": results,
        "ratio_full_over_chunked_peak_growth": round(
            full["peak_growth_mib"] / max(chunked["peak_growth_mib"], 1), 2),
        "ratio_full_over_chunked_time": round(full["step_s"] / chunked["step_s"], 3),
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
