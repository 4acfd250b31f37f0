"""Why translations come out short: a trained model's lengths and its end-of-sentence
probabilities on a dev set, for one or more checkpoints (say the last, and an average).

    .venv/bin/python benchmarks/brevity.py --checkpoint A [--checkpoint B ...] \
        --src RAW/val.en --ref RAW/val.de [--alphas 0.6 1.0]

Per checkpoint:
- search: sacreBLEU, brevity penalty and length ratio (hypothesis / reference, 13a tokens)
  greedy, and with beam 4 at each alpha; the share of sentences shorter than the reference;
- the model itself, teacher-forced on the references (no search): the mean probability of
  eos where the reference ends; the mean probability of eos at the positions before it; the
  share of those positions where eos is the model's first choice; and P(stop early), the
  probability that sampling from the model ends before the reference does,
  1 - prod_t (1 - p_t(eos)) over the positions before the end, averaged over sentences.
  A model whose eos mass leaks onto early positions is short under any search; a model
  that ends right but whose search prefers short hypotheses is short only with a beam.

Prints one JSON object and writes it to benchmarks/results/ (`results.py`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from aiayn.data.batching import collate, longest_first_batches
from aiayn.data.corpus import read_lines
from aiayn.evaluate import score
from aiayn.translate import Translator
from results import add_arguments, emit


def search_lengths(checkpoint: str, src: list[str], ref: list[str], beam: int, alpha: float) -> dict:
    hyps = Translator.from_checkpoint(checkpoint, beam=beam, alpha=alpha).translate(src)
    sacre = score(hyps, ref, lang="de")["sacrebleu"]
    shorter = sum(len(h.split()) < len(r.split()) for h, r in zip(hyps, ref)) / len(ref)
    return {"beam": beam, "alpha": alpha, "bleu": round(sacre["score"], 2),
            "bp": round(sacre["bp"], 4), "length_ratio": round(sacre["sys_len"] / sacre["ref_len"], 4),
            "share_shorter_words": round(shorter, 3)}  # fmt: skip


@torch.no_grad()
def eos_profile(checkpoint: str, src: list[str], ref: list[str], max_tokens: int = 4096) -> dict:
    """The model's eos probabilities on the references (teacher-forced), see the docstring."""
    translator = Translator.from_checkpoint(checkpoint)
    model, eos = translator.model, translator.tgt_vocab.eos_id
    pairs = list(zip(translator.src_vocab.encode_batch(src), translator.tgt_vocab.encode_batch(ref)))
    at_end, before, first_choice, stop_early = [], [], 0, []
    for batch_ids in longest_first_batches([len(s) + len(t) + 2 for s, t in pairs], max_tokens):
        batch = collate([pairs[i] for i in batch_ids])
        memory_pad = model.pad_mask(batch.src)  # (batch, src_len)
        memory = model.encode(batch.src, memory_pad)
        hidden = model.decode(batch.tgt_in, memory, memory_pad)  # (batch, tgt_len, d_model)
        logits = model.project(hidden).float()  # (batch, tgt_len, vocab)
        p_eos = logits.softmax(-1)[..., eos]  # (batch, tgt_len)
        top = logits.argmax(-1).eq(eos)  # (batch, tgt_len)
        for row, i in enumerate(batch_ids):
            n = len(pairs[i][1])  # the reference's eos is at position n
            at_end.append(float(p_eos[row, n]))
            early = p_eos[row, :n].double()  # (n,)
            before += early.tolist()
            first_choice += int(top[row, :n].sum())
            stop_early.append(float(1 - (1 - early).prod()))
    mean = lambda xs: round(sum(xs) / max(len(xs), 1), 5)  # noqa: E731
    return {"p_eos_at_reference_end": mean(at_end), "p_eos_before_end": mean(before),
            "eos_first_choice_before_end": round(first_choice / max(len(before), 1), 5),
            "p_stop_early_sampling": mean(stop_early)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", required=True)
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--ref", type=Path, required=True)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0])
    add_arguments(parser)
    args = parser.parse_args()
    src, ref = list(read_lines(args.src)), list(read_lines(args.ref))
    report = {"src": str(args.src), "ref": str(args.ref), "checkpoints": {}}
    for checkpoint in args.checkpoint:
        searches = [search_lengths(checkpoint, src, ref, 1, 0.0)]
        searches += [search_lengths(checkpoint, src, ref, 4, a) for a in args.alphas]
        report["checkpoints"][checkpoint] = {"search": searches, **eos_profile(checkpoint, src, ref)}
    emit(__file__, report, args)


if __name__ == "__main__":
    main()
