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

By default a Translator runs the fast path (`aiayn.fast`): the model's fast pieces, and a
search whose cache memory is kept from one batch (and call) to the next on a CPU
(`fast.cache.StoreBuffers`), allocated for the Translator's life or until
`translator.search.buffers.clear()`. `reference=True` runs the core alone.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

import torch

from aiayn import fast
from aiayn.checkpoint import load_checkpoint
from aiayn.config import DecodeConfig
from aiayn.data.batching import longest_first_batches
from aiayn.data.vocab import Vocab
from aiayn.decode.search import beam_search, greedy_search, output_limits
from aiayn.decode.strategy import Hypothesis
from aiayn.device import parse_device
from aiayn.errors import ConfigError
from aiayn.fast.int8 import check_int8, quantize_int8
from aiayn.fast.search import FastSearch, search_options
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
        search: FastSearch | None = None,
    ) -> None:
        """`search`: the fast path's search pieces (`FastSearch`); None: the core's search."""
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be positive, got {max_tokens}")
        self.model, self.src_vocab, self.tgt_vocab = model.eval(), src_vocab, tgt_vocab
        self.decode = decode or DecodeConfig()
        self.max_tokens = max_tokens
        self.device = next(model.parameters()).device
        self.search = search

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
    ) -> Translator:
        """Load a checkpoint directory (training or averaged: both are plain checkpoints).

        The decoding options override the checkpoint's `DecodeConfig`; None keeps its value.
        `int8`: quantize the weights for faster CPU decoding (`aiayn.fast.int8`); CPU and
        float32 only. `reference`: the core alone, without the fast path (nor int8, part of it).
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
            model = fast.apply(model)
            if int8:
                quantize_int8(model)
            search = FastSearch(device, int8)
        given = dict(beam=beam, alpha=alpha, max_len_offset=max_len_offset, min_len=min_len)
        given.update(nbest=nbest)
        config = dataclasses.replace(
            ckpt.config.decode, **{k: v for k, v in given.items() if v is not None}
        )
        return cls(model, ckpt.src_vocab, ckpt.tgt_vocab, config, max_tokens, search)

    def translate(self, texts: Sequence[str]) -> list[str]:
        """One translation per text, in order; empty or blank texts give ""."""
        return [hyps[0][0] if hyps else "" for hyps in self.translate_nbest(texts)]

    def translate_nbest(self, texts: Sequence[str]) -> list[list[tuple[str, float]]]:
        """Per text, its `decode.nbest` best (translation, score), best first.

        The score is log P(Y|X) / lp(Y) (see `decode.strategy.length_penalty`). An empty or
        blank text has one translation, "" with score 0.0, and the model is not run for it.
        """
        results: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in texts]
        for index, hyps in self._search(texts).items():
            results[index] = [(self.tgt_vocab.decode(h.tokens), h.score) for h in hyps]
        return results

    def hypotheses(self, texts: Sequence[str]) -> list[list[Hypothesis]]:
        """Per text, its `decode.nbest` best hypotheses (token ids, scores), best first;
        none for a blank text. The ids are what attention views read (`attention_view`)."""
        found = self._search(texts)
        return [found.get(i, []) for i in range(len(texts))]

    def _search(self, texts: Sequence[str]) -> dict[int, list[Hypothesis]]:
        """Encode the non-blank texts, decode them in length-sorted token batches."""
        todo = [i for i, text in enumerate(texts) if text.strip()]
        ids = self._encode([texts[i] for i in todo])
        found: dict[int, list[Hypothesis]] = {}
        capped = 0  # sentences whose maximum output length is at most min_len tokens
        for batch in longest_first_batches([len(x) for x in ids], self.max_tokens):
            src = torch.full((len(batch), len(ids[batch[0]])), self.model.config.pad_id)
            for row, j in enumerate(batch):
                src[row, : len(ids[j])] = torch.tensor(ids[j])
            src = src.to(self.device)  # (batch, src_len), right-padded
            if self.decode.min_len > 0:  # every limit is >= 1: min_len 0 never conflicts
                limits = output_limits(self.model, src, self.decode.max_len_offset)  # (batch,)
                capped += int(limits.le(self.decode.min_len).sum())
            with search_options(self.search, self.model) as kwargs:  # the fast path's topk and cache, or the core's
                m = self.model.config  # the decoder's first input and last output (sec. 3.1)
                kwargs.update(bos_id=m.bos_id, eos_id=m.eos_id)
                if self.decode.beam == 1:
                    best = greedy_search(self.model, src, self.decode, **kwargs)
                    hyps = [[h] if h else [] for h in best]
                else:
                    hyps = beam_search(self.model, src, self.decode, **kwargs)
            found.update((todo[j], h) for j, h in zip(batch, hyps))
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

    def _encode(self, texts: list[str]) -> list[list[int]]:
        """Source ids + eos, truncated (with a warning) to `model.max_len` tokens.

        Learned positions end there; sinusoids would go on, but attention memory grows with
        the square of the length, so a runaway line (say 1 MB of text) would otherwise fail
        deep inside torch, or exhaust memory, instead of giving its one output line.
        """
        ids = [x + [self.src_vocab.eos_id] for x in self.src_vocab.encode_batch(texts)]
        config = self.model.config
        long = sum(len(x) > config.max_len for x in ids)
        if long:
            kind = "learned positions" if config.positional == "learned" else "positions"
            warnings.warn(
                f"{long} input(s) longer than the model's {config.max_len} {kind} "
                f"(model.max_len={config.max_len}; the longest has {max(map(len, ids))} tokens, "
                f"eos included) were truncated to {config.max_len} tokens",
                stacklevel=3,
            )
        return [x if len(x) <= config.max_len else x[: config.max_len - 1] + x[-1:] for x in ids]


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
