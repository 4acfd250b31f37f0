"""Validation during training: dev loss and perplexity, and an optional quick dev BLEU.

The paper picks its hyperparameters on newstest2013 (sec. 6.2, Table 3) and reports
perplexity per wordpiece; we log the dev NLL per target token and its perplexity at every
`train.valid_every_steps`, with and without label smoothing. Dev BLEU uses greedy search
(`aiayn.decode.search.greedy_search`) on the first `train.valid_bleu_lines` dev pairs; a
quick signal, below what beam search on the full set gives (`aiayn evaluate` for that).
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager

import numpy as np
import torch
from sacrebleu.metrics import BLEU

from aiayn.config import DecodeConfig
from aiayn.data.batching import TokenBatchSampler, collate, longest_first_batches
from aiayn.data.binarize import BinarizedDataset
from aiayn.data.vocab import Vocab
from aiayn.decode.search import greedy_search
from aiayn.model.transformer import Transformer
from aiayn.train.distributed import DistEnv, all_reduce_sum
from aiayn.train.loss import projected_label_smoothed_loss
from aiayn.train.monitor import perplexity


@torch.no_grad()
def validation_loss(
    model: Transformer,
    dataset: BinarizedDataset,
    max_tokens: int,
    eps: float,
    env: DistEnv,
    context: AbstractContextManager,
) -> dict[str, float]:
    """{"nll", "loss", "ppl", "tokens"} over the whole split, each rank taking its share;
    the forward runs in `context` (the trainer's autocast and attention kernel), entered once."""
    was_training = model.training
    model.eval()
    sampler = TokenBatchSampler(
        dataset.src_lengths, dataset.tgt_lengths, max_tokens, shuffle=False,
        rank=env.rank, world_size=env.world_size,
    )  # fmt: skip
    sums = torch.zeros(2, dtype=torch.float64, device=env.device)  # smoothed, nll
    tokens = 0
    with context:
        for indices in sampler.epoch_batches(0):
            batch = collate([dataset[int(i)] for i in indices])
            positions, target = real_positions(batch.tgt_out, model.config.pad_id, env.device)
            batch = batch.to(env.device)
            smoothed, nll = real_token_loss(model, batch.src, batch.tgt_in, positions, target, eps)
            sums += torch.stack([smoothed, nll]).double()
            tokens += batch.n_tgt_tokens
    model.train(was_training)
    smoothed, nll, tokens = all_reduce_sum([*sums.tolist(), float(tokens)], env)
    tokens = max(tokens, 1.0)
    return {"loss": smoothed / tokens, "nll": nll / tokens, "ppl": perplexity(nll / tokens),
            "tokens": int(tokens)}  # fmt: skip


def real_positions(
    tgt_out: torch.Tensor, pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions, target): the flat indices of the real (non-pad) target positions and their
    targets, (n_tokens,) each, found on the CPU so that the GPU never waits for a count."""
    flat = tgt_out.reshape(-1)  # (batch * tgt_len,)
    positions = flat.ne(pad_id).nonzero().squeeze(1)  # (n_tokens,)
    return positions.to(device, non_blocking=True), flat[positions].to(device, non_blocking=True)


def real_token_hidden(
    model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """Teacher-forced decoder states at the real target positions only.

    src: (batch, src_len), tgt_in: (batch, tgt_len), positions: (n_tokens,) flat indices
    into (batch * tgt_len) -> (n_tokens, d_model). Selecting them before the pre-softmax
    projection skips the padding's share of the model's largest matrix product.
    """
    src_pad = model.pad_mask(src)  # (batch, src_len), True = padding
    memory = model.encode(src, src_pad)  # (batch, src_len, d_model)
    hidden = model.decode(tgt_in, memory, src_pad)  # (batch, tgt_len, d_model)
    return hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)  # (n_tokens, d_model)


def real_token_loss(
    model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor, positions: torch.Tensor,
    target: torch.Tensor, eps: float, compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(smoothed sum, NLL sum) over the real target positions: `real_token_hidden`, then the
    projection and loss together, a chunk of tokens at a time (`train/loss.py`).

    `compiled` (`train.compile`): both run through `torch.compile`, the network as a graph
    with dynamic shapes (not one per batch shape), and the loss's work between its two
    products (see `projected_label_smoothed_loss`), so that the element-wise ops around the
    matrix products (dropout, residual sums, LayerNorm, casts) run as fused kernels. The chunked
    loss itself stays eager: its products and hand-written gradients are already lean.
    """
    hidden_of = _compiled_real_token_hidden() if compiled else real_token_hidden
    hidden = hidden_of(model, src, tgt_in, positions)  # (n_tokens, d_model)
    return projected_label_smoothed_loss(
        hidden, model.output_weight, target, eps, compiled=compiled
    )


@functools.cache
def _compiled_real_token_hidden():
    """`real_token_hidden` compiled once per process; dynamic=True: a graph serves the
    trainer's many (batch, length) shapes instead of a recompilation for each (torch 2.11
    made two, for source lengths that are and are not multiples of 8)."""
    return torch.compile(real_token_hidden, dynamic=True)


@torch.no_grad()
def dev_bleu(
    model: Transformer, dataset: BinarizedDataset, vocab: Vocab, lines: int, max_tokens: int,
    device: torch.device,
) -> float:  # fmt: skip
    """sacreBLEU of greedy translations of the first `lines` dev pairs (references: the dev
    targets decoded back to text; the vocabulary is lossless)."""
    was_training = model.training
    model.eval()
    n = min(lines, len(dataset))
    hyps, refs = [""] * n, [""] * n
    for indices in longest_first_batches(dataset.src_lengths[:n] + 1, max_tokens):  # + eos
        examples = [dataset[i] for i in indices]
        src = collate(examples).src.to(device)  # (batch, src_len)
        for i, (_, tgt), hyp in zip(indices, examples, greedy_search(model, src, DecodeConfig())):
            hyps[i] = vocab.decode(hyp.tokens) if hyp is not None else ""
            refs[i] = vocab.decode(np.asarray(tgt).tolist())
    model.train(was_training)
    return BLEU().corpus_score(hyps, [refs]).score
