"""The base model's bf16 training step on a GPU, lever by lever: MFU, where the time goes, and
the loss over 200 updates of the compiled step against the eager one.

    python3 benchmarks/gpu_levers.py [--tokens 25000] [--more-tokens 50000,100000]
        [--vocab 37000] [--steps 10] [--curve-updates 200] [--json-out FILE]

The network, batches and step are `train_speed.py`'s (base: d_model 512, 8 heads, d_ff 2048,
6 + 6 layers; synthetic length-grouped batches of `--tokens` target tokens; forward,
label-smoothed loss, backward, fused Adam; bf16 autocast, float32 master weights), in one
process. Rows, each with tokens/s, ms per step and MFU (model FLOPs per target token counted
by FlopCounterMode on the eager step, times tokens/s, over the 989 TFLOP/s bf16 datasheet
peak of the H100 and H200):

- `reference_eager`: the core alone (`--reference`: every position's logits, stock modules);
- `fast_eager`: the fast path (the loss of real tokens only, chunked; the trainer's
  attention kernel preference);
- `fast_compiled`: the fast path under `train.compile`, with its compile time;
- `fast_compiled_<N>`: the same on batches of N target tokens (larger batches per GPU);
- `profile`: the compiled step's GPU time by kernel kind (matrix products, attention, the
  fused element-wise kernels, the optimizer, the rest), and the MFU the step would reach if
  only its matrix products ran, at the speed they ran;
- `loss_curve`: `--curve-updates` updates from one initialisation, on the same batches,
  eager and compiled, and eager again with other dropout masks (the noise floor): the
  largest and the mean |difference| of the per-update losses, eager-compiled against
  eager-eager.

`projected_base_run_hours`: the paper's base run, 100k updates of 25k target tokens, at each
row's rate. Prints one JSON line per part as it goes (also written to `--json-out`), so a
run cut short keeps what it measured; then `results.emit`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

import train_speed
from results import add_arguments, emit, publisher

KINDS = (  # kernel kind -> substrings of CUDA kernel names (lower case), first match wins
    ("attention", ("fmha", "flash", "attention", "cudnn")),
    ("matrix_products", ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "wgmma")),
    ("optimizer", ("adam", "multi_tensor")),
    ("compiled_elementwise", ("triton",)),
)


def kind_of(kernel: str) -> str:
    name = kernel.lower()
    return next((kind for kind, keys in KINDS if any(k in name for k in keys)), "other")


def batches_of(tokens: int, args) -> list:
    """`args.batches` batches of `tokens` target tokens, fewer where the benchmark's 20k
    synthetic pairs (~560k target tokens) make fewer."""
    n = max(1, min(args.batches, 400_000 // tokens))
    ns = argparse.Namespace(batches=n, tokens=tokens, vocab=args.vocab, device=args.device)
    return train_speed.prepared_batches(ns)


def rates(model, optimizer, forward, batches, steps: int) -> list[float]:
    """`train_speed.step_rates` in bf16 autocast, as every row here trains."""
    return train_speed.step_rates(model, optimizer, forward, batches, steps, torch.bfloat16)


def losses(model, optimizer, forward, batches, updates: int) -> list[float]:
    """Per-update loss per target token over `updates` training updates."""
    out = []
    for i in range(updates):
        b = batches[i % len(batches)]
        loss = train_speed.train_step(model, optimizer, forward, b, torch.bfloat16)
        out.append(loss.item() / b.n_tgt_tokens)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="base", choices=tuple(train_speed.SIZES))
    parser.add_argument("--tokens", type=int, default=25000)
    parser.add_argument("--more-tokens", default="50000,100000")
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--curve-updates", type=int, default=200)
    parser.add_argument("--device", default="cuda", help="cuda (cpu: a quick check of the script)")
    parser.add_argument("--json-out", default=None)
    add_arguments(parser)
    args = parser.parse_args()
    device_name = args.device if args.device == "cpu" else torch.cuda.get_device_name()
    report: dict = {"device": device_name, "torch": torch.__version__, "size": args.size,
                    "vocab": args.vocab, "tokens": args.tokens, "rows": {}}  # fmt: skip
    publish = publisher(report, args.json_out)

    torch.manual_seed(0)
    batches = batches_of(args.tokens, args)
    systems = train_speed.steppers(args.size, args.device, None, args.vocab,
                                   names=("aiayn", "aiayn_reference"))  # fmt: skip
    model, optimizer, forward = systems["aiayn"]
    with FlopCounterMode(display=False) as counter:
        train_speed.train_step(model, optimizer, forward, batches[0], torch.bfloat16)
    per_token = counter.get_total_flops() / batches[0].n_tgt_tokens
    publish("flops_per_target_token", round(per_token))

    def row(name: str, tokens_per_s: list[float], **extra) -> None:
        tps = statistics.median(tokens_per_s)
        report["rows"][name] = {
            "tokens_per_s": round(tps), "mfu_vs_989": round(tps * per_token / train_speed.HOPPER_BF16_PEAK, 3),
            "projected_base_run_hours": round(100_000 * 25_000 / tps / 3600, 1), **extra,
        }  # fmt: skip
        publish("rows", report["rows"])

    ref_model, ref_optimizer, ref_forward = systems.pop("aiayn_reference")
    rates(ref_model, ref_optimizer, ref_forward, batches, len(batches))  # warm-up
    row("reference_eager", rates(ref_model, ref_optimizer, ref_forward, batches, args.steps))
    del ref_model, ref_optimizer
    rates(model, optimizer, forward, batches, len(batches))
    row("fast_eager", rates(model, optimizer, forward, batches, args.steps))

    compiled = train_speed.fast.for_training(
        train_speed.RealTokenLoss(model.model, train_speed.EPS_LS), compiled=True
    )
    compiled_forward = lambda m, b: train_speed.aiayn_loss(compiled, b)  # noqa: E731
    start = time.perf_counter()
    rates(model, optimizer, compiled_forward, batches, len(batches))
    first_pass = round(time.perf_counter() - start, 1)
    row("fast_compiled", rates(model, optimizer, compiled_forward, batches, args.steps),
        first_pass_s=first_pass)  # fmt: skip

    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CPU if args.device == "cpu" else ProfilerActivity.CUDA
    with profile(activities=[activity]) as prof:
        rates(model, optimizer, compiled_forward, batches, len(batches))
    by_kind: dict[str, float] = {}
    for event in prof.key_averages():
        us = event.self_device_time_total if args.device != "cpu" else event.self_cpu_time_total
        by_kind[kind_of(event.key)] = by_kind.get(kind_of(event.key), 0.0) + us
    total = sum(by_kind.values())
    gemm_share = by_kind.get("matrix_products", 0.0) / total if total else 0.0
    compiled_mfu = report["rows"]["fast_compiled"]["mfu_vs_989"]
    publish("profile", {
        "gpu_ms_by_kind_per_step": {k: round(v / 1e3 / len(batches), 2) for k, v in sorted(by_kind.items())},
        "share_by_kind": {k: round(v / total, 3) for k, v in sorted(by_kind.items())},
        "mfu_if_only_matrix_products": round(compiled_mfu / gemm_share, 3) if gemm_share else None,
        "top_kernels": [(e.key[:90], round(e.self_device_time_total / 1e3 / len(batches), 3))
                        for e in sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:25]]
        if args.device != "cpu" else [],
    })  # fmt: skip

    for tokens in (int(t) for t in args.more_tokens.split(",") if t):
        try:
            bigger = batches_of(tokens, args)
            start = time.perf_counter()
            rates(model, optimizer, compiled_forward, bigger, len(bigger))
            first_pass = round(time.perf_counter() - start, 1)
            row(f"fast_compiled_{tokens}", rates(model, optimizer, compiled_forward, bigger,
                                                 args.steps), first_pass_s=first_pass)  # fmt: skip
        except torch.OutOfMemoryError:
            report["rows"][f"fast_compiled_{tokens}"] = "out of memory"
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def curve(forward_of, seed: int) -> list[float]:
        model.load_state_dict(state)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
        torch.manual_seed(seed)
        return losses(model, opt, forward_of, batches, args.curve_updates)

    eager_a, compiled_a, eager_b = curve(forward, 1), curve(compiled_forward, 1), curve(forward, 2)

    def gap(x: list[float], y: list[float]) -> dict:
        d = [abs(a - b) for a, b in zip(x, y)]
        return {"max": round(max(d), 4), "mean": round(statistics.mean(d), 4),
                "last_10_mean": round(statistics.mean(d[-10:]), 4)}  # fmt: skip

    publish("loss_curve", {
        "updates": args.curve_updates, "eager_first_last": [round(eager_a[0], 4), round(eager_a[-1], 4)],
        "compiled_first_last": [round(compiled_a[0], 4), round(compiled_a[-1], 4)],
        "eager_vs_compiled": gap(eager_a, compiled_a), "eager_vs_eager_other_dropout": gap(eager_a, eager_b),
    })  # fmt: skip
    emit(__file__, report, args)


if __name__ == "__main__":
    main()
