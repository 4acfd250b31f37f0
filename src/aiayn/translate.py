"""`Translator`: a checkpoint in, text in, text out (sec. 6.1's decoding).

    translator = Translator.from_checkpoint("runs/base/avg", device="cuda", dtype="bfloat16")
    translator = Translator.from_checkpoint("runs/base/avg", int8=True)  # CPU, int8 weights
    translator.translate(["A cat sits on a mat."])         # -> ["Eine Katze sitzt ..."]
    translator.translate_nbest(["..."])                     # -> [[(text, score), ...]]

Sentences are encoded with the checkpoint's vocabulary, sorted by length and grouped into
batches of at most `max_tokens` source tokens (padding included; the one batcher of
`aiayn.data.batching`) so that similar lengths decode together; results come back in the
input order. Beam search settings default to the checkpoint's `decode` config (the paper's
beam 4, alpha 0.6, input + 50).

By default a Translator runs the fast path (`aiayn.fast.for_inference`): the model's fast
pieces, and a search whose cache memory is kept from one batch (and call) to the next on a
CPU, for the Translator's life. `reference=True` runs the core alone.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

import torch

from aiayn import fast
from aiayn.checkpoint import load_checkpoint
from aiayn.config import DecodeConfig, ModelConfig
from aiayn.data.batching import longest_first_batches
from aiayn.data.vocab import Vocab
from aiayn.decode.search import Search, output_limits
from aiayn.decode.search import search as search_core
from aiayn.decode.strategy import Hypothesis
from aiayn.device import check_int8, parse_device
from aiayn.errors import ConfigError
from aiayn.model.transformer import Transformer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """"bfloat16" -> torch.bfloat16; None keeps the checkpoint's float32."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


class Translator:
    """Translate text with a trained model: beam search (or greedy at beam 1) in batches."""

    def __init__(
        self,
        model: Transformer,
        src_vocab: Vocab,
        tgt_vocab: Vocab,
        decode: DecodeConfig | None = None,
        max_tokens: int = 4096,
        search: Search | None = None,
    ) -> None:
        """`search(src, config)`: the fast path's (`fast.for_inference`); None: the core's
        `decode.search.search` over `model`."""
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be positive, got {max_tokens}")
        self.model, self.src_vocab, self.tgt_vocab = model.eval(), src_vocab, tgt_vocab
        self.decode = decode or DecodeConfig()
        self.max_tokens = max_tokens
        self.device = next(model.parameters()).device
        self.search = search or functools.partial(search_core, model)

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = None,
        *,
        beam: int | None = None,
        alpha: float | None = None,
        max_len_offset: int | None = None,
        min_len: int | None = None,
        nbest: int | None = None,
        max_tokens: int = 4096,
        int8: bool = False,
        reference: bool = False,
        long_lived: bool = False,
        compile: str = "auto",
    ) -> Translator:
        """Load a checkpoint directory (training or averaged: both are plain checkpoints).

        The decoding options override the checkpoint's `DecodeConfig`; None keeps its value.
        `int8`: quantize the weights for faster CPU decoding (`aiayn.fast.int8`); CPU and
        float32 only. `reference`: the core alone, without the fast path (nor int8, part of it).
        `long_lived`: for a server; `compile`: when the search runs the compiled decoder
        step, "auto", "always" or "never" (both: `fast.for_inference`).
        """
        dtype = parse_dtype(dtype)
        if int8 and reference:
            raise ConfigError("int8 is part of the fast path: it cannot run with --reference")
        if int8:
            check_int8(device, dtype)  # before loading: a CUDA device may not even exist
        device = parse_device(device, "--device")
        ckpt = load_checkpoint(path, device=device, dtype=dtype)
        model, search = ckpt.model, None
        if not reference:
            model, search = fast.for_inference(model, int8=int8, long_lived=long_lived,
                                               compile=compile)  # fmt: skip
        given = dict(beam=beam, alpha=alpha, max_len_offset=max_len_offset, min_len=min_len)
        given.update(nbest=nbest)
        config = dataclasses.replace(
            ckpt.config.decode, **{k: v for k, v in given.items() if v is not None}
        )
        return cls(model, ckpt.src_vocab, ckpt.tgt_vocab, config, max_tokens, search)

    @property
    def search_kind(self) -> str:
        """What runs the search's steps: "compiled decoder step", "fast path" or "core"."""
        return getattr(self.search, "kind", "core")

    def translate(self, texts: Sequence[str]) -> list[str]:
        """One translation per text, in order; empty or blank texts give ""."""
        return [hyps[0][0] if hyps else "" for hyps in self.translate_nbest(texts)]

    def translate_nbest(self, texts: Sequence[str]) -> list[list[tuple[str, float]]]:
        """Per text, its `decode.nbest` best (translation, score), best first.

        The score is log P(Y|X) / lp(Y) (see `decode.strategy.length_penalty`). An empty or
        blank text has one translation, "" with score 0.0, and the model is not run for it.
        """
        decode = self.tgt_vocab.decode
        return [[(decode(h.tokens), h.score) for h in hyps] or [("", 0.0)]
                for hyps in self.hypotheses(texts)]  # fmt: skip

    def hypotheses(self, texts: Sequence[str]) -> list[list[Hypothesis]]:
        """Per text, its `decode.nbest` best hypotheses (token ids, scores), best first;
        none for a blank text. The ids are what attention views read (`attention_view`)."""
        return self.hypotheses_of(self.encode(texts))

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's source ids as the model reads them (`source_ids`)."""
        return source_ids(self.src_vocab, self.model.config, texts)

    def hypotheses_of(self, ids: Sequence[list[int]]) -> list[list[Hypothesis]]:
        """`hypotheses` of sources already encoded (`encode`): length-sorted token batches,
        results in the input order; none for an empty source."""
        todo = [i for i, x in enumerate(ids) if x]
        found: list[list[Hypothesis]] = [[] for _ in ids]
        capped = 0  # sentences whose maximum output length is at most min_len tokens
        for batch in longest_first_batches([len(ids[i]) for i in todo], self.max_tokens):
            rows = [ids[todo[j]] for j in batch]
            src = torch.full((len(rows), len(rows[0])), self.model.config.pad_id)
            for row, x in enumerate(rows):
                src[row, : len(x)] = torch.tensor(x)
            src = src.to(self.device)  # (batch, src_len), right-padded
            if self.decode.min_len > 0:  # every limit is >= 1: min_len 0 never conflicts
                limits = output_limits(self.model, src, self.decode.max_len_offset)  # (batch,)
                capped += int(limits.le(self.decode.min_len).sum())
            hyps = self.search(src, self.decode)  # greedy at beam 1, else beam search
            for j, h in zip(batch, hyps):
                found[todo[j]] = h
        if capped:
            # The maximum wins (decode/strategy.py): say so, rather than leave the user to
            # wonder why a translation is shorter than min_len asked.
            warnings.warn(
                f"{capped} input(s) allow fewer output tokens than min_len "
                f"{self.decode.min_len} (at most the source length + "
                f"{self.decode.max_len_offset}); their translations end at that maximum",
                stacklevel=3,
            )
        return found


def one_line(text: str) -> str:
    """A translation as one output line: line breaks (the vocabulary is lossless and may
    produce them) become spaces, so output lines match input lines one to one."""
    return " ".join(text.splitlines()) if text else text


def translate_stream(
    translator: Translator, lines: Iterable[str], out: TextIO, chunk_lines: int = 256,
    nbest: bool = False,
) -> int:  # fmt: skip
    """Read `lines` in chunks, translate, write and flush each chunk; -> lines read.

    Exactly one output line per input line, or with `nbest` exactly `decode.nbest` lines
    per input line, each `index ||| translation ||| score` with the 0-based input index
    (Moses' n-best format without the feature column). An input with fewer hypotheses
    (a blank line has just "") repeats its last one. A byte-order mark opening the input
    (Windows editors write one) is dropped, as the corpus reader drops it.
    """
    count, chunk = 0, []
    for i, line in enumerate(lines):
        line = line.rstrip("\r\n")
        chunk.append(line.removeprefix("\ufeff") if i == 0 else line)
        if len(chunk) >= chunk_lines:
            count = _write_chunk(translator, chunk, out, count, nbest)
            chunk = []
    if chunk:
        count = _write_chunk(translator, chunk, out, count, nbest)
    return count


def _write_chunk(
    translator: Translator, chunk: list[str], out: TextIO, first: int, nbest: bool
) -> int:
    if nbest:
        k = translator.decode.nbest
        for i, hyps in enumerate(translator.translate_nbest(chunk), start=first):
            hyps = (hyps + hyps[-1:] * k)[:k]
            out.writelines(f"{i} ||| {one_line(text)} ||| {score:.4f}\n" for text, score in hyps)
    else:
        out.writelines(one_line(text) + "\n" for text in translator.translate(chunk))
    out.flush()
    return first + len(chunk)


def source_ids(vocab: Vocab, config: ModelConfig, texts: Sequence[str]) -> list[list[int]]:
    """Each text's source ids as a model of `config` reads them: its pieces and eos,
    truncated (with a warning) to `config.max_len` positions; [] for an empty or blank text.
    A server encodes requests with it before they queue, without the model's weights.

    Learned positions end there; sinusoids would go on, but attention memory grows with
    the square of the length, so a runaway line (say 1 MB of text) would otherwise fail
    deep inside torch, or exhaust memory, instead of giving its one output line.
    """
    todo = [i for i, text in enumerate(texts) if text.strip()]
    ids: list[list[int]] = [[] for _ in texts]
    for i, pieces in zip(todo, vocab.encode_batch([texts[i] for i in todo])):
        ids[i] = pieces + [vocab.eos_id]
    long = [len(x) for x in ids if len(x) > config.max_len]
    if long:
        kind = "learned positions" if config.positional == "learned" else "positions"
        warnings.warn(
            f"{len(long)} input(s) longer than the model's {config.max_len} {kind} "
            f"(model.max_len={config.max_len}; the longest has {max(long)} tokens, "
            f"eos included) were truncated to {config.max_len} tokens",
            stacklevel=4,
        )
    return [x if len(x) <= config.max_len else x[: config.max_len - 1] + x[-1:] for x in ids]
