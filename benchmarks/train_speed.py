"""Training speed: aiayn against `torch.nn.Transformer` and HuggingFace MarianMT, same batches.

    .venv/bin/python benchmarks/train_speed.py [--sizes small,base] [--device cpu|cuda]
        [--dtype float32|bfloat16] [--tokens 4000] [--vocab 8000] [--steps 4] [--turns 3]
        [--isolation process|shared] [--compile [MODE]] [--systems aiayn,hf_marian,...]
        [--note TEXT]

One training step = forward, label-smoothed (0.1) cross-entropy over the real target tokens,
backward, Adam (0.9, 0.98, 1e-9; PyTorch's fused Adam for every system, as aiayn's trainer
uses), on identical batches: synthetic pairs of 10-44 tokens (mean ~27) grouped by length
into batches of at most `--tokens` target tokens counting padding, as every toolkit batches
for training. Weights are random.

Identical in every system (the peers are configured to match aiayn's paper defaults):
- the network: post-LN encoder-decoder, `--sizes` dimensions, ReLU feed-forward with biases,
  embeddings x sqrt(d_model) tied to the output projection, LayerNorm eps 1e-6, and no
  final LayerNorm after the stacks (`nn.Transformer` adds one; it is removed here);
- dropout: 0.1 on the embeddings and on each sub-layer's output (sec. 5.4); attention and
  ReLU (activation) dropout off everywhere, as in the paper (aiayn's `p_drop_attn` and
  `p_drop_ffn` are 0; `nn.Transformer`'s are switched off; MarianMT's set to 0);
- the loss: 1 - eps on the target and eps / (V - 1) on every other class, summed over the
  real target tokens (the peers get it from PyTorch's `cross_entropy`, see `peer_loss`).

Not identical:
- attention biases: the peers have biases on the attention projections, aiayn does not
  (sec. 3.2.2 writes none). The row `aiayn_attention_bias` (`ModelConfig.attention_bias`)
  is aiayn with them: compare it, not `aiayn`, for the same parameter set;
- positions: aiayn and `nn.Transformer` add the interleaved sinusoids, MarianMT its
  concatenated sin | cos table (same cost); MarianMT adds a zero `final_logits_bias`;
- how each computes the same loss: aiayn projects only the real (non-padding) target
  positions, a chunk at a time (`loss.py`); the peers project every position and
  skip padding in the loss. That is part of what is measured.

`aiayn_bf16` is aiayn under bfloat16 autocast (`train.precision: bf16`: float32 master weights
and Adam state) whatever `--dtype` says, so that its ratio to float32 `aiayn` comes from one run.

Each system trains alone in a fresh process (as it would in use), after one untimed pass
over the batches, for `--steps` timed steps; the systems take `--turns` turns, so the
machine's noise hits all of them alike. Why not all in one process: see `isolated`.
`--isolation shared` runs them in this process instead, interleaved one step each, where
one system's step starts from the heap the previous system's step left.

Prints one JSON object (and writes it to benchmarks/results/, see `results.py`): per system
the median target tokens/s over the timed steps; the ratios aiayn / peer; and aiayn's model
FLOPs utilisation: matrix-multiply FLOPs per token (counted by torch's FlopCounterMode on
aiayn's own steps) x tokens/s, against the matmul peak measured in the same run (and, on
an H100 or H200, against their 989 TFLOP/s bf16 datasheet peak).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

from aiayn.config import ModelConfig, TrainConfig
from aiayn.data.batching import collate, token_batches
from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID
from aiayn import fast
from aiayn.fast.attention import kernel_preference
from aiayn.fast.linear import linear
from aiayn.model.layers import sinusoid_table
from aiayn.model.transformer import Transformer
from aiayn.loss import RealTokenLoss
from aiayn.train.validate import real_positions
from results import add_arguments, emit

VOCAB, EPS_LS, P_DROP = 8000, 0.1, 0.1  # VOCAB: the default; --vocab changes it
LN_EPS = ModelConfig.ln_eps  # every system's LayerNorm epsilon
SIZES = {  # d_model, heads, d_ff, layers (each stack)
    "base": (512, 8, 2048, 6),
    "small": (256, 4, 1024, 3),
}
HOPPER_BF16_PEAK = 989.4e12  # dense bf16 datasheet figure of the H100 and H200 (SXM)


def make_batches(n_batches: int, max_tokens: int, seed: int, vocab: int = VOCAB) -> list:
    """`n_batches` length-grouped batches drawn from 20k synthetic pairs of 10-44 tokens."""
    rng = np.random.default_rng(seed)
    src_len = rng.integers(10, 45, 20000)
    tgt_len = np.clip(src_len + rng.integers(-3, 4, src_len.size), 5, None)
    order = np.lexsort((src_len, tgt_len))  # by target length, then source length
    chunks = token_batches(order, [src_len + 1, tgt_len + 1], max_tokens)
    picked = rng.choice(len(chunks), n_batches, replace=False)
    return [
        collate([(rng.integers(4, vocab, src_len[i]), rng.integers(4, vocab, tgt_len[i]))
                 for i in chunks[k]])
        for k in picked
    ]  # fmt: skip


class TorchPeer(nn.Module):
    """`torch.nn.Transformer` (post-LN) as aiayn's network: the paper's embeddings, positions
    and tying; attention and activation dropout off, no final LayerNorm (see the docstring)."""

    def __init__(self, d_model: int, heads: int, d_ff: int, layers: int, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD_ID)
        self.core = nn.Transformer(
            d_model, heads, layers, layers, d_ff, P_DROP, batch_first=True, layer_norm_eps=LN_EPS
        )
        self.core.encoder.norm = self.core.decoder.norm = None  # the paper's post-LN has none
        for layer in [*self.core.encoder.layers, *self.core.decoder.layers]:
            layer.dropout = nn.Identity()  # on the ReLU's output: off, as in aiayn
            for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = 0.0  # on the attention weights: off, as in aiayn
        self.register_buffer("pe", sinusoid_table(1024, d_model).float(), persistent=False)
        self.drop, self.scale = nn.Dropout(P_DROP), math.sqrt(d_model)

    def forward(self, src, tgt_in):  # -> (batch, tgt_len, vocab)
        embed = lambda x: self.drop(self.embed(x) * self.scale + self.pe[: x.size(1)])  # noqa
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), src.device)
        hidden = self.core(
            embed(src), embed(tgt_in), tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=src.eq(PAD_ID), memory_key_padding_mask=src.eq(PAD_ID),
            tgt_key_padding_mask=tgt_in.eq(PAD_ID),
        )  # fmt: skip
        return hidden @ self.embed.weight.t()


def marian_peer(d_model: int, heads: int, d_ff: int, layers: int, vocab: int) -> nn.Module:
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=vocab, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff, activation_function="relu", max_position_embeddings=256,
        scale_embedding=True, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID, dropout=P_DROP, attention_dropout=0.0,
        activation_dropout=0.0,
    )  # fmt: skip
    model = MarianMTModel(config)
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.eps = LN_EPS  # Marian's default is 1e-5
    return model


def peer_loss(logits, batch) -> torch.Tensor:
    """aiayn's label-smoothed cross-entropy, summed over real target tokens, by PyTorch's own
    `cross_entropy`. PyTorch gives s / V to every class and 1 - s more to the target; with
    s = eps V / (V - 1) that is aiayn's (tensor2tensor's) eps / (V - 1) and 1 - eps."""
    vocab = logits.size(-1)
    return F.cross_entropy(
        logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=PAD_ID,
        label_smoothing=EPS_LS * vocab / (vocab - 1), reduction="sum",
    )  # fmt: skip


def aiayn_objective(config: ModelConfig, reference: bool = False, compiled: bool = False):
    """What the trainer trains: the model inside its loss module, with the fast path
    applied (`aiayn.fast`), or the core alone (`reference`, as `--reference` runs it)."""
    loss = RealTokenLoss(Transformer(config), EPS_LS)
    return loss if reference else fast.for_training(loss, compiled=compiled)


def aiayn_loss(objective, b, kernel: str = TrainConfig.attention_kernel) -> torch.Tensor:
    """The trainer's loss of a batch, with its default attention kernel on a GPU
    (`kernel_preference`, part of the fast path)."""
    with kernel_preference(kernel, b.src.device):
        return objective(b.src, b.tgt_in, b.positions, b.target)[0]


def eager_aiayn_loss(objective, b) -> torch.Tensor:
    """`aiayn_loss` of the same model through the eager fast path (for counting FLOPs)."""
    return aiayn_loss(fast.for_training(RealTokenLoss(objective.model, EPS_LS)), b)


def steppers(
    size: str, device: str, compile_mode: str | None, vocab: int = VOCAB,
    names: tuple[str, ...] | None = None,
) -> dict:  # fmt: skip
    """name -> (model, optimizer, loss of a batch), for `names` (None: every system)."""
    d_model, heads, d_ff, layers = SIZES[size]
    config = ModelConfig(vocab_size=vocab, d_model=d_model, n_heads=heads, d_ff=d_ff,
                         n_layers=layers, p_drop=P_DROP, p_drop_attn=0.0, p_drop_ffn=0.0,
                         ln_eps=LN_EPS)  # fmt: skip
    compiled = bool(compile_mode)  # aiayn's own option, what `train.compile` runs
    builders = {
        "aiayn": lambda: aiayn_objective(config, compiled=compiled),
        "aiayn_reference": lambda: aiayn_objective(config, reference=True),
        "aiayn_bf16": lambda: aiayn_objective(config, compiled=compiled),
        "aiayn_attention_bias": lambda: aiayn_objective(
            dataclasses.replace(config, attention_bias=True), compiled=compiled
        ),
        "torch_nn_transformer": lambda: TorchPeer(d_model, heads, d_ff, layers, vocab),
        "hf_marian": lambda: marian_peer(d_model, heads, d_ff, layers, vocab),
    }
    forwards = {
        "aiayn": aiayn_loss,
        "aiayn_reference": lambda m, b: m(b.src, b.tgt_in, b.positions, b.target)[0],
        "aiayn_bf16": aiayn_loss,
        "aiayn_attention_bias": aiayn_loss,
        "torch_nn_transformer": lambda m, b: peer_loss(m(b.src, b.tgt_in), b),
        "hf_marian": lambda m, b: peer_loss(m(
            input_ids=b.src, attention_mask=b.src.ne(PAD_ID), decoder_input_ids=b.tgt_in,
            decoder_attention_mask=b.tgt_in.ne(PAD_ID)).logits, b),
    }  # fmt: skip
    out = {}
    for name, build in builders.items():
        if names is not None and name not in names:
            continue
        model = build()
        model.to(device).train()
        # Every system gets the same Adam: PyTorch's fused one, which aiayn's trainer uses.
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                                     fused=True)  # fmt: skip
        forward = forwards[name]
        if compile_mode and not name.startswith("aiayn"):
            forward = torch.compile(forward, mode=compile_mode)
        out[name] = (model, optimizer, forward)
    return out


def train_step(model, optimizer, forward, batch, dtype) -> torch.Tensor:
    """One update; -> its summed loss (not synchronised: `.item()` it only when needed)."""
    with torch.autocast(batch.src.device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = forward(model, batch)
    (loss / batch.n_tgt_tokens).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def step_rates(model, optimizer, forward, batches, steps: int, dtype) -> list[float]:
    """Target tokens/s of each of `steps` updates, cycling over `batches`, each timed alone."""
    rates = []
    for i in range(steps):
        b = batches[i % len(batches)]
        sync(b.src.device.type)
        start = time.perf_counter()
        train_step(model, optimizer, forward, b, dtype)
        sync(b.src.device.type)
        rates.append(b.n_tgt_tokens / (time.perf_counter() - start))
    return rates


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak(device: str, dtype: torch.dtype) -> float:
    """Measured FLOP/s of a large square matrix product (2048 on CPU, 8192 on GPU): the
    faster of PyTorch's own product (MKL on an x86 CPU) and aiayn's (`aiayn.fast.linear`:
    oneDNN's on x86 CPUs not made by Intel, where it is the faster), so that aiayn's share
    of the peak is against the best product this machine offers."""
    n = 8192 if device.startswith("cuda") else 2048
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))

    def rate(product) -> float:
        for _ in range(2):
            product()
        sync(device)
        reps, start = 10, time.perf_counter()
        for _ in range(reps):
            product()
        sync(device)
        return 2 * n**3 * reps / (time.perf_counter() - start)

    return max(rate(lambda: a @ b), rate(lambda: linear(a, b)))


if hasattr(torch.ops.mkldnn, "_linear_pointwise"):

    @register_flop_formula(torch.ops.mkldnn._linear_pointwise)
    def _onednn_linear_flops(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
        """aiayn's oneDNN products (`aiayn.fast.linear`), X (..., K) W^T with W (N, K): 2 M K
        N, as for `mm`. FlopCounterMode knows aten's products only. (The op's `binary`
        overload, which aiayn does not use, would be miscounted.)"""
        return 2 * math.prod(x_shape[:-1]) * x_shape[-1] * w_shape[0]


SYSTEMS = ("aiayn", "aiayn_reference", "aiayn_attention_bias", "aiayn_bf16", "torch_nn_transformer",
           "hf_marian")  # fmt: skip


def system_dtype(name: str, dtype: torch.dtype) -> torch.dtype:
    """The autocast dtype a system trains in: `--dtype`, but bfloat16 for `aiayn_bf16` (aiayn's
    `train.precision: bf16`, float32 master weights and Adam state), so that the bfloat16 and
    float32 rates come from one run."""
    return torch.bfloat16 if name == "aiayn_bf16" else dtype


def prepared_batches(args) -> list:
    batches = make_batches(args.batches, args.tokens, seed=1, vocab=args.vocab)
    for b in batches:
        b.positions, b.target = real_positions(b.tgt_out, PAD_ID, torch.device(args.device))
        b.src, b.tgt_in, b.tgt_out = (t.to(args.device) for t in (b.src, b.tgt_in, b.tgt_out))
    return batches


def measure(systems: dict, batches: list, args, dtype: torch.dtype) -> tuple[dict, int, int]:
    """Warm-up passes, then `args.steps` timed steps per system, interleaved one step each.

    -> (name -> tokens/s of each timed step, aiayn's matmul FLOPs of one step, its tokens).
    """
    flops, flop_tokens = 0, 0
    # Untimed passes over every batch: a shape's first step pays for kernel plans (cuDNN
    # attention, oneDNN) that a long run pays once. aiayn's FLOPs counted on its last one.
    # The FLOPs are counted on the eager step: under the counter's dispatch mode compiled
    # code recompiles, and afterwards fell back to eager (seen with torch 2.11 on an H100).
    warmup = args.warmup * len(batches)
    for i in range(warmup):
        b = batches[i % len(batches)]
        for name, (model, optimizer, forward) in systems.items():
            if name == "aiayn" and i == warmup - 1:
                with FlopCounterMode(display=False) as counter:
                    train_step(model, optimizer, eager_aiayn_loss, b, dtype)
                flops, flop_tokens = counter.get_total_flops(), b.n_tgt_tokens
            else:
                train_step(model, optimizer, forward, b, system_dtype(name, dtype))
    rates: dict[str, list[float]] = {name: [] for name in systems}
    for i in range(args.steps):
        b = batches[i % len(batches)]
        for name, (model, optimizer, forward) in systems.items():
            sync(args.device)
            start = time.perf_counter()
            train_step(model, optimizer, forward, b, system_dtype(name, dtype))
            sync(args.device)
            rates[name].append(b.n_tgt_tokens / (time.perf_counter() - start))
    return rates, flops, flop_tokens


def isolated(size: str, args) -> tuple[dict, int, int]:
    """`measure` with each system alone in a fresh process, the systems taking turns.

    Systems that share a process share its heap: one system's step leaves memory that the
    next one's allocations reuse, already mapped, or the allocator has just returned to the
    kernel, and then the next step pays for mapping and zeroing it again (page faults).
    On a 2-core Xeon this moved MarianMT's base figure between 624 and 813 tokens/s (up to
    30%) depending on which peers ran beside it. A toolkit trains alone in its process, so
    each is measured so; taking turns, `args.turns` times, still spreads the machine's noise
    over all of them.
    """
    rates: dict[str, list[float]] = {name: [] for name in args.systems}
    flops, flop_tokens = 0, 0
    for _ in range(args.turns):
        for name in args.systems:
            command = [
                sys.executable, __file__, "--worker", name, "--sizes", size,
                "--device", args.device, "--dtype", args.dtype, "--tokens", str(args.tokens),
                "--vocab", str(args.vocab), "--batches", str(args.batches),
                "--warmup", str(args.warmup), "--steps", str(args.steps),
            ]  # fmt: skip
            if args.compile:
                command += ["--compile", args.compile]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"worker {name} ({size}) failed:\n{done.stderr}")
            out = json.loads(done.stdout)
            rates[name] += out["rates"]
            if name == "aiayn":
                flops, flop_tokens = out["flops"], out["flop_tokens"]
    return rates, flops, flop_tokens


def worker(args) -> None:
    """One system, one size, alone: prints its rates (and aiayn's FLOPs) as JSON."""
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    batches = prepared_batches(args)
    systems = steppers(args.sizes, args.device, args.compile, args.vocab, names=(args.worker,))
    rates, flops, flop_tokens = measure(systems, batches, args, dtype)
    print(json.dumps({"rates": rates[args.worker], "flops": flops, "flop_tokens": flop_tokens}))


def ratios(median: dict[str, float]) -> dict[str, float]:
    """The ratios of the systems that ran: aiayn over each peer, and aiayn with attention
    biases over each peer (both have them)."""
    pairs = [("aiayn", "hf_marian"), ("aiayn", "torch_nn_transformer"),
             ("aiayn_attention_bias", "hf_marian"),
             ("aiayn_attention_bias", "torch_nn_transformer"), ("aiayn_reference", "aiayn"),
             ("aiayn_bf16", "aiayn")]  # fmt: skip
    short = {"torch_nn_transformer": "torch"}
    return {
        f"ratio_{a}_over_{short.get(b, b)}": round(median[a] / median[b], 3)
        for a, b in pairs if a in median and b in median
    }


def bench_size(size: str, args, dtype: torch.dtype) -> dict:
    if args.isolation == "process":
        rates, flops, flop_tokens = isolated(size, args)
        batches = make_batches(args.batches, args.tokens, seed=1, vocab=args.vocab)
    else:
        torch.manual_seed(0)
        batches = prepared_batches(args)
        systems = steppers(size, args.device, args.compile, args.vocab, args.systems)
        rates, flops, flop_tokens = measure(systems, batches, args, dtype)
    median = {name: round(statistics.median(r), 1) for name, r in rates.items()}
    real = sum(b.n_tgt_tokens for b in batches)
    padded = sum(b.tgt_out.numel() for b in batches)
    return {
        "dims": dict(zip(("d_model", "heads", "d_ff", "layers"), SIZES[size])),
        "tokens_per_s_median": median,
        **ratios(median),
        "aiayn_flops_per_token": round(flops / flop_tokens),
        "aiayn_flops_per_s": median["aiayn"] * flops / flop_tokens,
        "target_tokens_per_batch_mean": round(real / len(batches)),
        "target_padding_fraction": round(1 - real / padded, 3),
        "all_rates": {name: [round(x) for x in r] for name, r in rates.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="small,base")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--tokens", type=int, default=4000, help="target tokens per batch")
    parser.add_argument("--vocab", type=int, default=VOCAB, help="joint vocabulary size")
    parser.add_argument("--batches", type=int, default=8, help="distinct batches, cycled")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes over the batches")
    parser.add_argument("--steps", type=int, default=4,
                        help="timed steps per system (per turn with --isolation process)")
    parser.add_argument("--isolation", default="process", choices=("process", "shared"),
                        help="each system in its own process, taking turns (default), or all "
                        "in this one, interleaved step by step")  # fmt: skip
    parser.add_argument("--turns", type=int, default=3,
                        help="turns of the systems with --isolation process")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="which systems to run (comma-separated; aiayn always)")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)  # internal
    parser.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                        help="torch.compile every system: aiayn as `train.compile` does it, "
                        "the peers' whole forward and loss (in MODE: default, "
                        "reduce-overhead, ...)")  # fmt: skip
    add_arguments(parser)
    args = parser.parse_args()
    args.systems = tuple(args.systems.split(","))  # parsed once, here
    if "aiayn" not in args.systems or set(args.systems) - set(SYSTEMS):
        parser.error(f"--systems: aiayn and any of {', '.join(SYSTEMS[1:])}, got "
                     f"{','.join(args.systems)}")  # fmt: skip
    if args.worker:
        return worker(args)
    dtype = getattr(torch, args.dtype)
    peak = matmul_peak(args.device, dtype)
    results = {size: bench_size(size, args, dtype) for size in args.sizes.split(",")}
    for r in results.values():
        r["aiayn_fraction_of_measured_matmul_peak"] = round(r.pop("aiayn_flops_per_s") / peak, 3)
        name = torch.cuda.get_device_name() if args.device.startswith("cuda") else ""
        if "H100" in name or "H200" in name:
            fpt = r["aiayn_flops_per_token"]
            r["aiayn_mfu_vs_989_tflops"] = round(
                r["tokens_per_s_median"]["aiayn"] * fpt / HOPPER_BF16_PEAK, 3
            )
    import transformers

    emit(__file__, {
        "task": "training step (fwd + label-smoothed loss + bwd + Adam), identical batches",
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "dtype": args.dtype, "compile": args.compile, "threads": torch.get_num_threads(),
        "isolation": args.isolation, "turns": args.turns if args.isolation == "process" else 1,
        "steps_per_turn": args.steps,
        "measured_matmul_peak_tflops": round(peak / 1e12, 3), "vocab": args.vocab,
        "results": results, "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__, "transformers": transformers.__version__,
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
