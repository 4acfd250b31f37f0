"""Validation during training: dev loss and perplexity, and an optional quick dev BLEU.

The paper picks its hyperparameters on newstest2013 (sec. 6.2, Table 3) and reports
perplexity per wordpiece; we log the dev NLL per target token and its perplexity at every
`train.valid_every_steps`, with and without label smoothing. Dev BLEU uses greedy search
(`aiayn.decode.search.greedy_search`) on the first `train.valid_bleu_lines` dev pairs; a
quick signal, below what beam search on the full set gives (`aiayn evaluate` for that).
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import numpy as np
import torch
from sacrebleu.metrics import BLEU

from aiayn.config import DecodeConfig
from aiayn.data.batching import TokenBatchSampler, collate, longest_first_batches, special_ids
from aiayn.data.binarize import BinarizedDataset
from aiayn.data.vocab import Vocab
from aiayn.decode.search import greedy_search
from aiayn.model.transformer import Transformer
from aiayn.train.distributed import DistEnv, all_reduce_sum
from aiayn.loss import RealTokenLoss
from aiayn.train.monitor import perplexity


@torch.no_grad()
def validation_loss(
    loss: RealTokenLoss,
    dataset: BinarizedDataset,
    max_tokens: int,
    env: DistEnv,
    context: AbstractContextManager,
) -> dict[str, float]:
    """{"nll", "loss", "ppl", "tokens"} over the whole split, each rank taking its share:
    the training objective `loss` (its model and label smoothing) in eval mode; the forward
    runs in `context` (the trainer's autocast and attention kernel), entered once."""
    model = loss.model
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
            batch = collate([dataset[int(i)] for i in indices], *special_ids(model.config))
            positions, target = real_positions(batch.tgt_out, model.config.pad_id, env.device)
            batch = batch.to(env.device)
            smoothed, nll = loss(batch.src, batch.tgt_in, positions, target)
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
        pad_id, bos_id, eos_id = special_ids(model.config)
        src = collate(examples, pad_id, bos_id, eos_id).src.to(device)  # (batch, src_len)
        found = greedy_search(model, src, DecodeConfig(), bos_id, eos_id)
        for i, (_, tgt), hyp in zip(indices, examples, found):
            hyps[i] = vocab.decode(hyp.tokens) if hyp is not None else ""
            refs[i] = vocab.decode(np.asarray(tgt).tolist())
    model.train(was_training)
    return BLEU().corpus_score(hyps, [refs]).score
