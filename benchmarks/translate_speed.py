"""Beam-search speed of one network in aiayn, CTranslate2 and HuggingFace MarianMT `generate`.

    .venv/bin/python benchmarks/translate_speed.py [--sentences 500] [--batch-size N]
        [--out-len 30] [--max-tokens 4096] [--device cpu|cuda] [--dtype float32|bfloat16]
        [--repeats 3] [--small] [--latency] [--compile always|never]

The network: aiayn's `Transformer(ModelConfig(vocab_size=8000))` with its random
initialisation (seed 0): base size (sec. 3, Table 3 "base": d_model 512, 6 + 6 layers,
8 heads, d_ff 2048, ReLU, post-LN, interleaved sinusoidal positions, embeddings x
sqrt(d_model) tied to the output projection, LayerNorm eps 1e-6), saved as a checkpoint
with an 8000-piece sentencepiece vocabulary (`benchmark_vocab`: pieces of made-up words;
only their ids and names matter) and exported with `aiayn export` to CTranslate2 (float32,
and int8 weights) and to a `MarianMTModel`, so every system computes the same function.
aiayn runs in float32 and with int8 weights (`aiayn.fast.int8`). Both its systems on a
CPU search as a `Translator` does by default once the model's compiled decoder step is
built (`aiayn.fast.compiled_step`, `--compile always`, the default): the benchmark builds
them first ("compile_seconds", "compile_seconds_int8": not counted in the timings; about 0
where the cache held them) and checks them like the rest; `--compile never` times the eager
fast path (`FastSearch`). "aiayn_search" and "aiayn_int8_search" name the search each ran.
The row counts from which the float32 step's wide libraries serve, as their build
measured, are in "compiled_wide_from_rows".

What is the same in every system: the weights, the sources and their batches, beam 4 with
alpha 0.6, the forced output length, the threads. What is not: each library's own kernels
and search code; MarianMT's LayerNorm epsilon (1e-5, where the others use the model's 1e-6:
it cannot be set), and the int8 schemes. aiayn's int8 is torch's dynamic quantization (int8
weights with a scale per output row, inputs quantized per call). The int8 CTranslate2 model
runs with each CPU `compute_type` of its int8 family that
`ctranslate2.get_supported_compute_types("cpu")` lists: `int8` (int8 products, the other layers
in the device's default float type, float32 on a CPU), `int8_float32` and, where the CPU has bfloat16, `int8_bfloat16`
(the non-quantized layers in bfloat16); aiayn int8 is compared against the fastest of them
("speed_ratio_aiayn_over_ctranslate2_int8_best", which names it).

Before timing, the teacher-forced log-probabilities of every peer are
compared with aiayn's on the first sentences: float32 peers must agree within 1e-3 or the
script stops; int8 differences are reported. aiayn's systems are also scored one token a
step through their decoding cache, the path the search times ("aiayn_..._cached"): the
float32 one must agree within 1e-3 as well; the int8 one's figure includes the bfloat16
encoder-decoder stores, where the CPU has them (`aiayn.fast.int8.cross_store_dtype`). With
`--dtype bfloat16` the float systems run in bfloat16 (CTranslate2 only where the CPU
supports it) and nothing is enforced; int8 runs on the CPU only.

The sources are `--sentences` random sentences of 10-40 tokens + eos, in the same
length-sorted batches (at most `--max-tokens` source tokens and `--batch-size` sentences)
for every system, decoded with beam 4 and a KV cache (aiayn's keeps its memory from one
batch and pass to the next on the CPU, as `aiayn.translate.Translator` does). Random
weights rarely choose eos, and the libraries stop and count differently, so every
hypothesis is forced to exactly `--out-len` decoder steps: aiayn with min_len = out_len - 1
and max_len = out_len (eos forced at the last step), CTranslate2 with min_decoding_length =
max_decoding_length = out_len (eos is masked for the first min_decoding_length steps, and
the result holds the out_len tokens without eos), transformers with min_new_tokens =
max_new_tokens = out_len.
No system can stop early or drop a finished sentence from its batch, so the figure
measures the per-step cost only. Each system decodes all batches `--repeats` times, the
systems taking turns batch by batch, and its median pass counts. Each system is loaded and
timed in a process of its own (`time_apart`), as users run them: CTranslate2 brings its own
OpenMP runtime, and in one process with PyTorch both slow down. Prints one JSON object.

`--latency`: one sentence a call (batch 1, beam 4), as a server's lone client is served:
each system's milliseconds per sentence ("ms_per_sentence"), where a batched run shows
throughput. The ratios keep their names and sense (sentences/s of aiayn over the peer, so
above 1 aiayn is faster); the result's "mode" says which run it was.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import statistics
import tempfile
import time

from dataclasses import dataclass

import torch

from aiayn import fast
from aiayn.checkpoint import load_checkpoint, save_checkpoint
from aiayn.config import Config, ModelConfig
from aiayn.data.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab
from aiayn.decode.search import run_search
from aiayn.decode.strategy import BeamStrategy
from aiayn.data.batching import longest_first_batches
from aiayn.export import export_checkpoint
from aiayn.fast.kv_cache import SharedKVCache
from aiayn.fast.search import FastSearch, row_topk
from aiayn.fast.static_beam import StepBeam
from aiayn.fast.static_search import StepSearch
from aiayn.model.transformer import Transformer
from results import add_arguments, emit

VOCAB, BEAM, ALPHA = 8000, 4, 0.6
FLOAT_TOLERANCE = 1e-3  # max |log p| difference allowed between float32 implementations
CHECK_SENTENCES = 8  # sentences of the agreement check
INT8_COMPUTE_TYPES = ("int8", "int8_float32", "int8_bfloat16")  # CTranslate2's, CPU


def benchmark_vocab(size: int = VOCAB, seed: int = 0) -> Vocab:
    """A `size`-piece sentencepiece vocabulary, trained in seconds on made-up words: the
    export needs token names, and the benchmark's sources are random ids anyway."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzäöüß"
    words = lambda: " ".join(  # noqa: E731
        "".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(12)
    )
    return Vocab.train((words() for _ in range(20000)), size, threads=1)


def sources(n: int, seed: int) -> list[list[int]]:
    """`n` random sentences of 10-40 ordinary tokens, each + eos."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(10, 41, (n,), generator=gen).tolist()
    return [torch.randint(4, VOCAB, (k,), generator=gen).tolist() + [EOS_ID] for k in lengths]


def groups(sents: list[list[int]], max_tokens: int, batch_size: int | None) -> list[list[int]]:
    """Sentence indices per batch: token batches, each cut into at most `batch_size`."""
    out = []
    for batch in longest_first_batches([len(s) for s in sents], max_tokens):
        step = batch_size or len(batch)
        out.extend(batch[i : i + step] for i in range(0, len(batch), step))
    return out


def padded(sents: list[list[int]], device: str) -> torch.Tensor:
    """(batch, longest) right-padded ids."""
    src = torch.full((len(sents), max(map(len, sents))), PAD_ID, dtype=torch.long)
    for row, sent in enumerate(sents):
        src[row, : len(sent)] = torch.tensor(sent)
    return src.to(device)


Search = FastSearch | StepSearch


def aiayn_search(name: str, model: Transformer, built: dict[str, Search] | None = None) -> Search | None:
    """The search of aiayn system `name` over its `model`, as a `Translator` has it: the one
    `built` holds for it (the compiled step's, `compiled_search`), else the fast path's
    (the int8 model's with its narrowed encoder-decoder stores), or the core's."""
    if built and name in built:
        return built[name]
    if name == "aiayn_reference":
        return None
    return FastSearch(model, int8=name == "aiayn_int8")


def compiled_search(model: Transformer) -> tuple[StepSearch | None, float]:
    """The compiled step's search over `model` (its step built now, or loaded from the
    cache), and the seconds that took; None where it cannot be built here."""
    start = time.perf_counter()
    search = fast.for_inference(model, compile="always").search
    seconds = round(time.perf_counter() - start, 1)
    return (search, seconds) if isinstance(search, StepSearch) else (None, seconds)


def wide_from_rows(built: dict[str, StepSearch]) -> dict | None:
    """The compiled step's and source keys' row counts from which their wide library runs
    (`compiled_step.ByRows`; None: never), as measured when they were built."""
    for search in built.values():
        return {"step": search.step.wide_from, "source": search.source.wide_from}
    return None


@torch.no_grad()
def run_aiayn(
    model: Transformer, batches: list[list[list[int]]], out_len: int, device,
    search: Search | None = None,
) -> int:  # fmt: skip
    steps = 0
    for sents in batches:
        src = padded(sents, device)  # (batch, src_len)
        max_len = torch.full((src.size(0),), out_len, device=src.device)
        topk = torch.topk if search is None else row_topk
        strategy = BeamStrategy(max_len, BEAM, 1, ALPHA, out_len - 1, EOS_ID, PAD_ID, topk)
        if getattr(search, "search_step", None) is not None:  # the compiled whole search
            # step's state, as a `Translator` searches with it
            strategy = StepBeam(max_len, BEAM, 1, ALPHA, out_len - 1, EOS_ID, PAD_ID)
        if search is None:
            hyps = run_search(model, src, strategy, BOS_ID)
        else:
            hyps = search.run(src, strategy)
        steps += sum(len(h[0].tokens) + 1 for h in hyps)
    return steps


def run_ct2(translator, batches: list[list[list[int]]], out_len: int, names: list[str]) -> int:
    """`names`: the vocabulary's pieces; the export appends the source eos itself."""
    steps = 0
    for sents in batches:
        results = translator.translate_batch(
            [[names[t] for t in s[:-1]] for s in sents], beam_size=BEAM, length_penalty=ALPHA,
            min_decoding_length=out_len, max_decoding_length=out_len, num_hypotheses=1,
        )  # fmt: skip
        steps += sum(len(r.hypotheses[0]) for r in results)  # no eos: one token per step
    return steps


@torch.no_grad()
def run_hf(model, batches: list[list[list[int]]], out_len: int, device) -> int:
    steps = 0
    for sents in batches:
        src = padded(sents, device)
        out = model.generate(
            input_ids=src, attention_mask=src.ne(PAD_ID), num_beams=BEAM, do_sample=False,
            min_new_tokens=out_len, max_new_tokens=out_len, length_penalty=ALPHA,
            early_stopping=False, use_cache=True, num_return_sequences=1,
        )  # fmt: skip
        steps += (out.size(1) - 1) * out.size(0)  # minus the decoder start token
    return steps


# --- agreement: teacher-forced log P(y_t | y_<t, x) of the same (x, y) pairs ---------------
def forced(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tgt (batch, T) -> what teacher forcing feeds (bos + tgt) and the tokens it scores
    (tgt + eos), each (batch, T + 1)."""
    bos = torch.full_like(tgt[:, :1], BOS_ID)
    return torch.cat([bos, tgt], dim=1), torch.cat([tgt, torch.full_like(bos, EOS_ID)], dim=1)


def gold_logp(logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """log P of each gold token: logits (batch, T + 1, V), gold (batch, T + 1) -> like gold."""
    return logits.float().log_softmax(dim=-1).gather(2, gold[:, :, None]).squeeze(2)


@torch.no_grad()
def aiayn_logp(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """src (batch, src_len) padded, tgt (batch, T) -> (batch, T + 1): each token and eos."""
    feed, gold = forced(tgt)
    return gold_logp(model(src, feed), gold)


@torch.no_grad()
def aiayn_cached_logp(
    model: Transformer, src: torch.Tensor, tgt: torch.Tensor, search: Search | None
) -> torch.Tensor:
    """As `aiayn_logp`, but fed one token a step through the decoding cache (or the
    compiled step) the timed search uses (so the int8 model's bfloat16 encoder-decoder
    stores enter it)."""
    feed, gold = forced(tgt)  # (batch, T + 1) each
    if isinstance(search, StepSearch):
        return search.forced_logp(src, feed).gather(2, gold[:, :, None]).squeeze(2)
    src_pad = model.pad_mask(src)
    memory = model.encode(src, src_pad)  # (batch, src_len, d_model)
    steps = []
    if search is None:
        cache = model.new_cache(src_pad)
    else:
        cache = SharedKVCache(len(model.decoder), src_pad, cross_dtype=search.cross_dtype)
    for t in range(feed.size(1)):
        hidden = model.decode(feed[:, t : t + 1], memory, src_pad, cache)  # (batch, 1, d_model)
        memory = None  # the cache now holds the encoder-decoder keys and values
        steps.append(model.project(hidden))  # (batch, 1, V)
    return gold_logp(torch.cat(steps, dim=1), gold)


def ct2_logp(
    translator, sents: list[list[int]], tgt: torch.Tensor, names: list[str]
) -> torch.Tensor:
    """CTranslate2's `score_batch` scores the target and the eos it appends (the sources'
    eos it appends too: `add_source_eos` in the export's config)."""
    results = translator.score_batch(
        [[names[t] for t in s[:-1]] for s in sents], [[names[t] for t in y] for y in tgt.tolist()]
    )
    return torch.tensor([r.log_probs for r in results])  # (batch, T + 1)


@torch.no_grad()
def hf_logp(model, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    feed, gold = forced(tgt)
    logits = model(input_ids=src, attention_mask=src.ne(PAD_ID), decoder_input_ids=feed).logits
    return gold_logp(logits, gold)


def agreement(
    systems: dict, sents: list[list[int]], out_len: int, device: str, names: list[str] | None = None,
    built: dict[str, Search] | None = None,
) -> dict:  # fmt: skip
    """Max |log p| difference of each system from aiayn's first (float) one on `sents` with
    random targets of `out_len` tokens, and of each aiayn system fed through its decoding
    cache ("..._cached"); stops the script if a float32 peer, or aiayn's float32 model
    through its cache, is off."""
    gen = torch.Generator().manual_seed(2)
    tgt = torch.randint(4, VOCAB, (len(sents), out_len), generator=gen)
    src = padded(sents, device)
    reference, *others = (name for name, model in systems.items() if model is not None)
    ref = aiayn_logp(systems[reference], src, tgt.to(device)).cpu()
    diffs = {}
    for name in others:
        if name.startswith("ctranslate2"):
            logp = ct2_logp(systems[name], sents, tgt, names)
        else:
            logp = (hf_logp if name.startswith("transformers") else aiayn_logp)(
                systems[name], src, tgt.to(device)
            )
        diffs[name] = (logp.cpu() - ref).abs().max().item()
    for name in (n for n in systems if n.startswith("aiayn") and systems[n] is not None):
        search = aiayn_search(name, systems[name], built)
        logp = aiayn_cached_logp(systems[name], src, tgt.to(device), search)
        diffs[f"{name}_cached"] = (logp.cpu() - ref).abs().max().item()
    off = {k: v for k, v in diffs.items() if "int8" not in k and not v <= FLOAT_TOLERANCE}
    if reference == "aiayn_float32" and off:
        raise SystemExit(
            f"float32 systems disagree with aiayn float32 (max |log p| difference): {off}"
        )
    return {k: float(f"{v:.3g}") for k, v in diffs.items()}


# --- the systems ---------------------------------------------------------------------------
def system_names(dtype: str) -> list[str]:
    """Every system, aiayn's float one first (the agreement's reference)."""
    return [f"aiayn_{dtype}", "aiayn_reference", "aiayn_int8", f"ctranslate2_{dtype}",
            *(f"ctranslate2_{ct}" for ct in INT8_COMPUTE_TYPES), "transformers_marian"]  # fmt: skip


def export_systems(config: ModelConfig, tmp: str) -> list[str]:
    """Write one network to `tmp`: aiayn's checkpoint (random initialisation, seed 0, and
    `benchmark_vocab`), its `aiayn export`s to CTranslate2 (float32 and int8 weights) and to
    MarianMT; -> the vocabulary's pieces."""
    torch.manual_seed(0)
    vocab = benchmark_vocab(config.vocab_size)
    save_checkpoint(f"{tmp}/checkpoint", Transformer(config).eval(), Config(model=config), vocab, vocab)
    for weights in ("float32", "int8"):
        export_checkpoint(f"{tmp}/checkpoint", "ctranslate2", f"{tmp}/ct2_{weights}", weights)
    export_checkpoint(f"{tmp}/checkpoint", "huggingface", f"{tmp}/hf")
    return [vocab.piece(i) for i in range(vocab.size)]


def load_system(name: str, tmp: str, device: str, dtype: str):
    """System `name` from what `export_systems` wrote to `tmp`; None where this device cannot
    run it: int8 is CPU only, and CTranslate2 runs only the compute types
    `get_supported_compute_types` lists (its float type from the float32 export)."""
    cpu, device_type, float_type = device == "cpu", torch.device(device).type, getattr(torch, dtype)
    if name.startswith("aiayn"):
        if name == "aiayn_int8":
            return fast.for_inference(load_checkpoint(f"{tmp}/checkpoint").model, int8=True).model if cpu else None
        model = load_checkpoint(f"{tmp}/checkpoint").model.to(device=device, dtype=float_type)
        return model if name == "aiayn_reference" else fast.for_inference(model).model
    if name.startswith("ctranslate2"):
        import ctranslate2

        compute_type = name.removeprefix("ctranslate2_")
        supported = ctranslate2.get_supported_compute_types(device_type)
        if compute_type not in supported or (compute_type.startswith("int8") and not cpu):
            return None
        weights = "int8" if compute_type.startswith("int8") else "float32"
        return ctranslate2.Translator(f"{tmp}/ct2_{weights}", device=device_type,
                                      compute_type=compute_type, intra_threads=torch.get_num_threads())  # fmt: skip
    from transformers import MarianMTModel

    return MarianMTModel.from_pretrained(f"{tmp}/hf").eval().to(device=device, dtype=float_type)


def build_systems(config: ModelConfig, device: str, dtype: str, tmp: str) -> tuple[dict, list[str]]:
    """Every system in this process (`load_system` of each; the agreement check needs them
    side by side), and the vocabulary's pieces."""
    names = export_systems(config, tmp)
    return {name: load_system(name, tmp, device, dtype) for name in system_names(dtype)}, names


def runner(name: str, device: str, names: list[str], built: dict[str, Search] | None = None):
    """The function that decodes `batches` with system `name`. aiayn's fast path keeps its
    cache's memory from one batch and pass to the next on the CPU, as a `Translator` does."""
    if name.startswith("ctranslate2"):
        return lambda model, batches, out_len, device: run_ct2(model, batches, out_len, names)
    if name.startswith("transformers"):
        return run_hf
    searches: dict[int, Search | None] = {}  # one per model, its memory kept between runs

    def run(model, batches, out_len, device):
        if id(model) not in searches:
            searches[id(model)] = aiayn_search(name, model, built)
        return run_aiayn(model, batches, out_len, device, searches[id(model)])

    return run


@dataclass(frozen=True)
class Job:
    """What a timing process needs: where `export_systems` wrote the network, how to run
    it, and the batches to decode."""

    tmp: str
    device: str
    dtype: str
    threads: int
    compile: str  # aiayn float32 and int8 on a CPU: their compiled steps ("always") or not ("never")
    names: list[str]  # the vocabulary's pieces (CTranslate2 takes tokens by name)
    batches: list[list[list[int]]]
    out_len: int


def time_apart(systems: list[str], job: Job, repeats: int) -> tuple[dict[str, list], dict[str, int]]:
    """Time `repeats` passes of each of `systems` over `job`'s batches, each system loaded
    in a process of its own, the systems taking turns batch by batch, so that a slow spell
    of the machine (whole passes here differ by a third) hits every system alike;
    -> {system: [(seconds, output steps) per pass]}, {system: its process id}.

    Apart because two programs in one process slow each other down: CTranslate2 brings its
    own OpenMP runtime beside PyTorch's, and once it has run, both run slower (2 to 3 times
    on a 2-core CPU, one sentence a call) than each in a process of its own, as users
    run them."""
    context = multiprocessing.get_context("spawn")
    workers: dict[str, tuple] = {}
    try:
        for name in systems:  # loaded and warmed up side by side, untimed
            mine, theirs = context.Pipe()
            process = context.Process(target=_timing_process, args=(theirs, name, job), daemon=True)
            process.start()
            theirs.close()  # so that a process's end shows as EOF here
            workers[name] = (process, mine)
        workers = {name: (process, conn, _answer(conn, name)) for name, (process, conn) in workers.items()}
        runs = {name: [] for name in systems}
        for _ in range(repeats):
            passes = {name: [] for name in systems}  # (seconds, output steps) per batch
            for index in range(len(job.batches)):
                for name, (_, conn, _) in workers.items():
                    conn.send(index)
                    passes[name].append(_answer(conn, name))
            for name, timings in passes.items():
                runs[name].append((sum(t for t, _ in timings), sum(n for _, n in timings)))
        return runs, {name: pid for name, (_, _, pid) in workers.items()}
    finally:
        for process, conn, *_ in workers.values():
            try:
                conn.send(None)  # the end of its loop
            except OSError:  # it has ended already
                pass
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def _answer(conn, name: str):
    try:
        return conn.recv()
    except EOFError:
        raise SystemExit(f"the process timing {name} ended without an answer (see its error above)") from None


def _timing_process(conn, name: str, job: Job) -> None:
    """Load system `name`, decode the last batch once (first-call overheads), send this
    process's id; then decode and time the batch whose index the parent sends, until it
    sends None."""
    torch.set_num_threads(job.threads)
    model = load_system(name, job.tmp, job.device, job.dtype)
    built = {}
    if name in (f"aiayn_{job.dtype}", "aiayn_int8") and job.compile == "always":
        search, _ = compiled_search(model)  # loaded from the cache the parent's build filled
        built = {name: search} if search is not None else {}
    run = runner(name, job.device, job.names, built)
    run(model, job.batches[-1:], 4, job.device)
    conn.send(os.getpid())
    while (index := conn.recv()) is not None:
        conn.send(timed(run, model, job.batches[index:index + 1], job.out_len, job.device))


def timed(fn, *args) -> tuple[float, int]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    steps = fn(*args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, steps


def ratio(seconds: dict, ours: str, theirs: str) -> float | None:
    """Sentences/s of `ours` over `theirs` (> 1: aiayn is faster)."""
    if seconds.get(ours) is None or seconds.get(theirs) is None:
        return None
    return round(seconds[theirs] / seconds[ours], 3)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--batch-size", type=int, help="sentences per batch at most (no limit)")
    parser.add_argument("--out-len", type=int, default=30, help="decoder steps per hypothesis")
    parser.add_argument("--max-tokens", type=int, default=4096, help="source tokens per batch")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed passes per system, interleaved; the median counts")
    parser.add_argument("--small", action="store_true",
                        help="d_model 64, 2 + 2 layers, d_ff 256: to check the script quickly")
    parser.add_argument("--latency", action="store_true",
                        help="one sentence a call (batch 1): milliseconds per sentence")
    parser.add_argument("--compile", choices=("always", "never"), default="always",
                        help="aiayn float32 and int8 on a CPU: their compiled decoder steps, built first "
                        "(always), or the eager fast path (never)")
    add_arguments(parser)
    args = parser.parse_args()
    if args.latency:
        if args.batch_size not in (None, 1):
            parser.error("--latency decodes one sentence a call: leave --batch-size out")
        args.batch_size = 1
    return args  # fmt: skip


def main() -> None:
    args = parse_args()
    size = dict(d_model=64, d_ff=256, n_layers=2) if args.small else {}
    config = ModelConfig(vocab_size=VOCAB, **size)
    sents = sources(args.sentences, args.seed)
    batches = [[sents[i] for i in g] for g in groups(sents, args.max_tokens, args.batch_size)]
    with tempfile.TemporaryDirectory() as tmp:
        systems, names = build_systems(config, args.device, args.dtype, tmp)
        built, compile_seconds = {}, {}
        if args.compile == "always":
            for name in (f"aiayn_{args.dtype}", "aiayn_int8"):
                if systems.get(name) is None:
                    continue
                search, compile_seconds[name] = compiled_search(systems[name])
                if search is not None:
                    built[name] = search
        agree = agreement(systems, sents[:CHECK_SENTENCES], args.out_len, args.device, names,
                          built)  # fmt: skip
        live = [name for name, model in systems.items() if model is not None]
        ours = f"aiayn_{args.dtype}"
        search = {"aiayn_search": "compiled decoder step" if ours in built else "eager fast path",
                  "aiayn_int8_search": "compiled decoder step" if "aiayn_int8" in built else "eager fast path",
                  "compile_seconds": compile_seconds.get(ours), "compile_seconds_int8": compile_seconds.get("aiayn_int8"),
                  "compiled_wide_from_rows": wide_from_rows({k: v for k, v in built.items() if k == ours})}  # fmt: skip
        del systems, built  # the timed systems are loaded again, each in its own process
        job = Job(tmp, args.device, args.dtype, torch.get_num_threads(), args.compile, names,
                  batches, args.out_len)  # fmt: skip
        runs, _ = time_apart(live, job, args.repeats)
        results, seconds = dict.fromkeys(system_names(args.dtype)), dict.fromkeys(system_names(args.dtype))
        for name, timings in runs.items():
            seconds[name] = statistics.median(t for t, _ in timings)
            results[name] = {"seconds": round(seconds[name], 3), "output_tokens": timings[0][1],
                             "sentences_per_s": round(len(sents) / seconds[name], 2),
                             "ms_per_sentence": round(1000 * seconds[name] / len(sents), 2),
                             "seconds_each_pass": [round(t, 3) for t, _ in timings]}  # fmt: skip
    ours = f"aiayn_{args.dtype}"
    pairs = {f"ctranslate2_{args.dtype}": (ours, f"ctranslate2_{args.dtype}"),
             "ctranslate2_int8": ("aiayn_int8", "ctranslate2_int8"),
             "transformers": (ours, "transformers_marian"),
             "its_reference_path": (ours, "aiayn_reference")}  # fmt: skip
    ratios = {f"speed_ratio_aiayn_over_{k}": ratio(seconds, *v) for k, v in pairs.items()}
    int8 = [f"ctranslate2_{ct}" for ct in INT8_COMPUTE_TYPES if seconds.get(f"ctranslate2_{ct}")]
    best = min(int8, key=seconds.get, default=None)
    ratios["ctranslate2_int8_best"] = best
    best_ratio = best and ratio(seconds, "aiayn_int8", best)
    ratios["speed_ratio_aiayn_over_ctranslate2_int8_best"] = best_ratio
    report(args, config, len(batches), {**search, **results, **ratios}, agree)


def report(args, config: ModelConfig, n_batches: int, results: dict, agree: dict) -> None:
    import ctranslate2
    import transformers

    c = config
    emit(__file__, {
        "task": "beam search, one randomly initialised network in every system",
        "network": f"aiayn Transformer: d_model {c.d_model}, {c.n_layers} + {c.n_layers} layers, "
        f"{c.n_heads} heads, d_ff {c.d_ff}, post-LN, interleaved sinusoids, tied scaled "
        f"embeddings, LayerNorm eps {c.ln_eps} (CTranslate2's layer_norm_epsilon set to it; "
        "MarianMT's is 1e-5, which its config cannot change); exported with `aiayn export` "
        "to CTranslate2 and MarianMT",
        "mode": "latency: one sentence a call" if args.latency else "batched",
        "sentences": args.sentences, "src_tokens": "10-40 + eos", "batches": n_batches,
        "max_tokens": args.max_tokens, "batch_size": args.batch_size, "beam": BEAM,
        "vocab": VOCAB,
        "processes": "each system loaded and timed in a process of its own, the systems "
        "taking turns batch by batch",
        "output_length": f"forced: every hypothesis exactly {args.out_len} decoder steps "
        f"(aiayn min_len={args.out_len - 1}, max_len={args.out_len}; CTranslate2 "
        f"min_decoding_length=max_decoding_length={args.out_len}; transformers "
        f"min_new_tokens=max_new_tokens={args.out_len})",
        "int8": "aiayn: torch dynamic quantization (int8 weights with a scale per output row, "
        "inputs quantized per call) of every linear map and the tied output projection; "
        "CTranslate2: int8 weights with a scale per row (embeddings and projection too), "
        f"run with each supported compute_type of {', '.join(INT8_COMPUTE_TYPES)}",
        "agreement": f"teacher-forced log P of {CHECK_SENTENCES} sources with random "
        f"{args.out_len}-token targets (+ eos), max |difference| from aiayn {args.dtype} "
        "(whole target at once); ..._cached: aiayn fed one token a step through its cache",
        f"agreement_max_abs_logp_diff_vs_aiayn_{args.dtype}": agree,
        "agreement_tolerance_float32": FLOAT_TOLERANCE,
        **results,
        "device": args.device, "dtype": args.dtype, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
        "transformers": transformers.__version__, "ctranslate2": ctranslate2.__version__,
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
