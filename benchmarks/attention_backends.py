"""Which attention kernel trains aiayn fastest on this GPU, for translation-length sentences.

    python3 benchmarks/attention_backends.py [--tokens 25000] [--vocab 37000] [--size base]
        [--steps 10] [--compile-variants default,best] [--budget-s 250] [--json-out FILE]

PyTorch's `scaled_dot_product_attention` picks one of several kernels (cuDNN's, FlashAttention,
the memory-efficient one, or the plain "math" composition of products and softmax). Their
tiles are sized for long sequences; sentences of 10-45 tokens fill a fraction of each. This
measures, in one process, on the benchmark's batches (`train_speed.make_batches`, bf16
autocast):

1. `attention_ms_fwd_bwd`: forward + backward of the three attention calls of a layer (encoder
   self-attention with a padding mask, decoder self-attention with `is_causal`, and
   encoder-decoder attention with a padding mask) on one typical batch, per backend, and with
   the math backend under `torch.compile` (the composition inductor then fuses);
2. `eager_step`: aiayn's whole training step (`train_speed.train_step`) with each backend
   forced by `torch.nn.attention.sdpa_kernel`, tokens/s and MFU;
3. `compiled_step`: the same under `train.compile` (`ChunkedRealTokenLoss(compiled=True)`)
   for each of `--compile-variants`, each compiled afresh in its context, with its compile
   time, while `--budget-s` seconds of the run remain for it; then a profile of the last one.

Prints one JSON object (also written to `--json-out` after each part, so that a run cut
short keeps what it measured). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import train_speed
from train_speed import step_rates
from results import add_arguments, emit, publisher

BACKENDS = {  # name -> the backends sdpa may choose from (None: PyTorch's own choice)
    "default": None,
    "cudnn": [SDPBackend.CUDNN_ATTENTION],
    "flash_else_efficient": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION],
    "efficient": [SDPBackend.EFFICIENT_ATTENTION],
    "math": [SDPBackend.MATH],
}


def backend_context(name: str):
    allowed = BACKENDS[name]
    return nullcontext() if allowed is None else sdpa_kernel(allowed)


def median_ms(fn, device: str, reps: int = 20) -> float:
    """Median milliseconds of `fn()` over `reps` calls, after 3 untimed ones."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        train_speed.sync(device)
        start = time.perf_counter()
        fn()
        train_speed.sync(device)
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def attention_calls(batch, d_model: int, heads: int, device: str) -> dict:
    """The three attention calls of one layer on `batch`'s shapes: name -> (q, k, v, kwargs),
    heads split from a fused projection as `MultiHeadAttention` does (strided views)."""
    n, s, t = batch.src.size(0), batch.src.size(1), batch.tgt_in.size(1)
    d_k = d_model // heads

    def heads_of(rows: int, length: int, parts: int) -> list[torch.Tensor]:
        x = torch.randn(rows, length, parts * d_model, device=device, dtype=torch.bfloat16)
        x.requires_grad_(True)
        return [y.unflatten(-1, (heads, d_k)).transpose(1, 2) for y in x.split(d_model, -1)]

    mask = ~batch.src.eq(train_speed.PAD_ID)[:, None, None, :]  # (batch, 1, 1, src_len)
    q_e, k_e, v_e = heads_of(n, s, 3)
    q_d, k_d, v_d = heads_of(n, t, 3)
    (q_x,), (k_x, v_x) = heads_of(n, t, 1), heads_of(n, s, 2)
    return {
        "encoder_self_masked": (q_e, k_e, v_e, {"attn_mask": mask}),
        "decoder_self_causal": (q_d, k_d, v_d, {"is_causal": True}),
        "cross_masked": (q_x, k_x, v_x, {"attn_mask": mask}),
    }


def attention_table(batch, d_model: int, heads: int, device: str) -> dict:
    """ms of forward + backward per call and backend ("unsupported" where it cannot run)."""
    calls = attention_calls(batch, d_model, heads, device)
    table: dict = {}
    for call, (q, k, v, kwargs) in calls.items():
        grad = torch.randn(*q.shape[:3], v.shape[3], device=device, dtype=torch.bfloat16)
        row = {}
        for name in BACKENDS:
            def step() -> None:
                with backend_context(name):
                    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
                out.backward(grad)

            try:
                row[name] = round(median_ms(step, device), 3)
            except RuntimeError as error:  # no kernel of that backend takes these inputs
                row[name] = f"unsupported: {str(error).splitlines()[0][:120]}"
        with sdpa_kernel([SDPBackend.MATH]):
            compiled = torch.compile(
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs), dynamic=False
            )
            row["math_compiled"] = round(
                median_ms(lambda: compiled(q, k, v).backward(grad), device), 3
            )
        table[call] = row
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="base", choices=tuple(train_speed.SIZES))
    parser.add_argument("--tokens", type=int, default=25000)
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--batches", type=int, default=10, help="drawn, before the filter below")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile-variants", default="default,best",
                        help="backends to compile with; best: the fastest eager one but default")
    parser.add_argument("--budget-s", type=float, default=250.0,
                        help="no new compiled variant starts after this many seconds")
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--device", default="cuda", help="cuda (cpu: a quick check of the script)")
    add_arguments(parser)
    args = parser.parse_args()
    began = time.perf_counter()
    dtype = torch.bfloat16
    device = args.device
    device_name = device if device == "cpu" else torch.cuda.get_device_name()
    report: dict = {"device": device_name, "torch": torch.__version__,
                    "size": args.size, "tokens": args.tokens, "vocab": args.vocab}  # fmt: skip
    publish = publisher(report, args.json_out)

    torch.manual_seed(0)
    peak = train_speed.matmul_peak(device, dtype)
    publish("measured_matmul_peak_tflops", round(peak / 1e12, 1))
    args.warmup = 1
    # Batches whose source length is not a multiple of 8: with such lengths only, the
    # compiled step compiles once (torch 2.11 compiled again for multiples of 8, a cost the
    # trainer pays once per run, which this benchmark leaves out of `first_pass_s`).
    batches = [b for b in train_speed.prepared_batches(args) if b.src.size(1) % 8]
    sizes = sorted(batches, key=lambda b: b.src.numel())
    typical = sizes[len(sizes) // 2]
    d_model, heads = train_speed.SIZES[args.size][:2]
    publish("typical_batch", {"sentences": typical.src.size(0), "src_len": typical.src.size(1),
                              "tgt_len": typical.tgt_in.size(1)})  # fmt: skip
    publish("attention_ms_fwd_bwd", attention_table(typical, d_model, heads, device))

    model, optimizer, _ = train_speed.steppers(
        args.size, device, None, args.vocab, names=("aiayn",)
    )["aiayn"]
    # The trainer's loss with no kernel preference of its own: each variant's context rules.
    forward = lambda m, b: train_speed.aiayn_loss(m, b, kernel="auto")  # noqa: E731
    with FlopCounterMode(display=False) as counter:
        train_speed.train_step(model, optimizer, forward, batches[0], dtype)
    flops_per_token = counter.get_total_flops() / batches[0].n_tgt_tokens
    publish("flops_per_target_token", round(flops_per_token))

    def summary(rates: list[float], **extra) -> dict:
        median = statistics.median(rates)
        return {"tokens_per_s": round(median), **extra,
                "mfu_vs_989": round(median * flops_per_token / train_speed.HOPPER_BF16_PEAK, 3),
                "share_of_measured_peak": round(median * flops_per_token / peak, 3)}  # fmt: skip

    eager = {}
    for name in BACKENDS:
        with backend_context(name):
            try:
                step_rates(model, optimizer, forward, batches, len(batches), dtype)  # warm-up
                eager[name] = summary(step_rates(model, optimizer, forward, batches, args.steps,
                                                 dtype))  # fmt: skip
            except RuntimeError as error:
                eager[name] = f"failed: {str(error).splitlines()[0][:160]}"
        publish("eager_step", eager)

    # the same model through the loss that `train.compile` runs
    compiled_objective = train_speed.fast.for_training(
        train_speed.RealTokenLoss(model.model, train_speed.EPS_LS), compiled=True
    )
    compiled_forward = lambda m, b: train_speed.aiayn_loss(compiled_objective, b, "auto")  # noqa: E731
    # "best": the fastest eager variant other than PyTorch's own choice
    faster = {n: r["tokens_per_s"] for n, r in eager.items() if isinstance(r, dict)}
    faster.pop("default", None)
    best = max(faster, key=faster.__getitem__) if faster else "default"
    variants = [best if v == "best" else v for v in args.compile_variants.split(",")]
    compiled, last = {}, None
    for name in dict.fromkeys(variants):
        if time.perf_counter() - began > args.budget_s:
            compiled[name] = "skipped: out of time"
            continue
        torch._dynamo.reset()  # each variant compiles afresh, inside its context
        try:
            with backend_context(name):
                start = time.perf_counter()
                step_rates(model, optimizer, compiled_forward, batches, len(batches), dtype)
                compile_s = time.perf_counter() - start
                rates = step_rates(model, optimizer, compiled_forward, batches, args.steps, dtype)
            compiled[name], last = summary(rates, first_pass_s=round(compile_s, 1)), name
        except RuntimeError as error:
            compiled[name] = f"failed: {str(error).splitlines()[0][:160]}"
        publish("compiled_step", compiled)
    if last is not None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU if device == "cpu" else ProfilerActivity.CUDA]
        with backend_context(last), profile(activities=activities) as prof:
            step_rates(model, optimizer, compiled_forward, batches, 4, dtype)
        sort = "cpu_time_total" if device == "cpu" else "cuda_time_total"
        table = prof.key_averages().table(sort_by=sort, row_limit=45)
        publish("profile_variant", last)
        if args.json_out:
            with open(args.json_out.replace(".json", "_profile.txt"), "w") as f:
                f.write(table)
    emit(__file__, report, args)


if __name__ == "__main__":
    main()
