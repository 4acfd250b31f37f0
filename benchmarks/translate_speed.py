"""Beam-search speed: aiayn against HuggingFace `transformers`' MarianMT `generate`.

    .venv/bin/python benchmarks/translate_speed.py [--sentences 500] [--out-len 30]
        [--device cpu|cuda] [--dtype float32|bfloat16]

Both models are base-size Transformers (sec. 3, Table 3 "base": d_model 512, 6 + 6 layers,
8 heads, d_ff 2048, ReLU, post-LN, sinusoidal positions, tied embeddings) over an 8000-token
vocabulary, with random weights (no download). The sources are the same 500 random
sentences of 10-40 tokens + eos, in the same length-sorted batches of at most
`--max-tokens` source tokens, decoded with beam 4 and the KV cache by both.

Comparable work: random weights rarely choose eos, and the two libraries stop and count
differently, so every hypothesis of both is forced to exactly `--out-len` decoder steps:
aiayn with min_len = out_len - 1 and max_len = out_len (eos forced at the last step),
transformers with min_new_tokens = max_new_tokens = out_len. Neither can stop early or
drop a finished sentence from its batch, so the figure measures the per-step cost only
(aiayn's early exits help real, trained models further). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from aiayn.config import ModelConfig
from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID
from aiayn.decode.search import run_search
from aiayn.decode.strategy import BeamStrategy
from aiayn.model.transformer import Transformer
from aiayn.translate import token_batches

VOCAB, BEAM = 8000, 4


def sources(n: int, seed: int) -> list[list[int]]:
    """`n` random sentences of 10-40 ordinary tokens, each + eos."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(10, 41, (n,), generator=gen).tolist()
    return [torch.randint(4, VOCAB, (k,), generator=gen).tolist() + [EOS_ID] for k in lengths]


def batches(sents: list[list[int]], max_tokens: int, device: str) -> list[torch.Tensor]:
    out = []
    for batch in token_batches([len(s) for s in sents], max_tokens):
        src = torch.full((len(batch), len(sents[batch[0]])), PAD_ID, dtype=torch.long)
        for row, i in enumerate(batch):
            src[row, : len(sents[i])] = torch.tensor(sents[i])
        out.append(src.to(device))  # (batch, src_len)
    return out


@torch.no_grad()
def run_aiayn(model: Transformer, srcs: list[torch.Tensor], out_len: int) -> int:
    steps = 0
    for src in srcs:
        max_len = torch.full((src.size(0),), out_len, device=src.device)
        strategy = BeamStrategy(max_len, BEAM, 1, 0.6, out_len - 1, EOS_ID, PAD_ID)
        hyps = run_search(model, src, strategy, BOS_ID)
        steps += sum(len(h[0].tokens) + 1 for h in hyps)
    return steps


def marian(device: str, dtype: torch.dtype):
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=VOCAB, d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
        decoder_ffn_dim=2048, activation_function="relu", max_position_embeddings=256,
        scale_embedding=True, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
        decoder_start_token_id=PAD_ID, forced_eos_token_id=None, dropout=0.1,
    )  # fmt: skip
    torch.manual_seed(0)
    return MarianMTModel(config).to(device=device, dtype=dtype).eval()


@torch.no_grad()
def run_hf(model, srcs: list[torch.Tensor], out_len: int) -> int:
    steps = 0
    for src in srcs:
        out = model.generate(
            input_ids=src, attention_mask=src.ne(PAD_ID), num_beams=BEAM, do_sample=False,
            min_new_tokens=out_len, max_new_tokens=out_len, length_penalty=0.6,
            early_stopping=False, use_cache=True, num_return_sequences=1,
        )  # fmt: skip
        steps += (out.size(1) - 1) * out.size(0)  # minus the decoder start token
    return steps


def timed(fn, *args) -> tuple[float, int]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    steps = fn(*args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--out-len", type=int, default=30, help="decoder steps per hypothesis")
    parser.add_argument("--max-tokens", type=int, default=4096, help="source tokens per batch")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    sents = sources(args.sentences, args.seed)
    srcs = batches(sents, args.max_tokens, args.device)
    torch.manual_seed(0)
    ours = Transformer(ModelConfig(vocab_size=VOCAB)).to(device=args.device, dtype=dtype).eval()
    theirs = marian(args.device, dtype)
    warm = batches(sents[:8], args.max_tokens, args.device)
    run_aiayn(ours, warm, 4), run_hf(theirs, warm, 4)  # first-call overheads, untimed
    aiayn_s, aiayn_steps = timed(run_aiayn, ours, srcs, args.out_len)
    hf_s, hf_steps = timed(run_hf, theirs, srcs, args.out_len)
    import transformers

    n = len(sents)
    print(json.dumps({
        "task": "beam search, base-size Transformer, random weights",
        "sentences": n, "src_tokens": "10-40 + eos", "batches": len(srcs),
        "max_tokens": args.max_tokens, "beam": BEAM, "vocab": VOCAB,
        "output_length": f"forced: every hypothesis exactly {args.out_len} decoder steps "
        f"(aiayn min_len={args.out_len - 1}, max_len={args.out_len}; transformers "
        f"min_new_tokens=max_new_tokens={args.out_len})",
        "aiayn": {"seconds": round(aiayn_s, 2), "sentences_per_s": round(n / aiayn_s, 2),
                  "output_tokens": aiayn_steps},
        "transformers_marian": {"seconds": round(hf_s, 2), "sentences_per_s": round(n / hf_s, 2),
                                "output_tokens": hf_steps},
        "speed_ratio_aiayn_over_transformers": round(hf_s / aiayn_s, 3),
        "device": args.device, "dtype": args.dtype, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__, "transformers": transformers.__version__,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
