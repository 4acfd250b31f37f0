"""Multi30k English->German with configs/multi30k.yaml, end to end in an hour: prepare,
train, choose on the dev set, score the test set once.

    .venv/bin/python benchmarks/multi30k.py [--raw ../shared/data/multi30k] [--out runs/bench-m30k]
                                            [--minutes 50] [key=value ...]

The recipe's last stage is chosen on `val` (the dev set) only: which model (the last
checkpoint, or the average of the last 2, 3 or 5, or of 5 taken two saves apart) and which
length penalty alpha (0.6, the paper's, 1.0 or 1.5) give the best dev sacreBLEU. Every variant tried is recorded with its dev
BLEU and brevity penalty. Then test_2016_flickr is translated and scored once, with the
chosen pair. `total_minutes` is the recipe end to end (prepare, train, choose, test).

After it, as a measurement outside the recipe and its minutes: the dev BLEU of every saved
checkpoint against its training minutes (the curve that `report.py` plots). Prints one JSON
object (sacreBLEU cased 13a, chrF, hardware, the time of each stage). Not a test: it takes
an hour.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import time
from pathlib import Path

import torch

from aiayn.average import average_checkpoints
from aiayn.checkpoint import Checkpoint
from aiayn.config import apply_overrides, load_config
from aiayn.data.corpus import find_side, read_lines
from aiayn.evaluate import score
from aiayn.recipes.multi30k import OPTIONS, prepare_multi30k, raw_prefixes
from aiayn.train.run_dir import checkpoints_dir, step_checkpoints
from aiayn.train.trainer import train
from aiayn.translate import Translator
from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "multi30k"


# The dev set's candidates: the last checkpoint, or the average of the last k taken `apart`
# saves apart (apart 2: every other one, so 5 of them span 27 of the 54 minutes) ...
AVERAGES = ((1, 1), (2, 1), (3, 1), (5, 1), (5, 2))  # (k, apart)
# ... and the length penalty: the paper's 0.6, 1.0, or 1.5, which on val undid most of
# the beam's shortening (benchmarks/brevity.py)
ALPHAS = (0.6, 1.0, 1.5)


def bleu_of(checkpoint: Path, sources: list[str], refs: list[str], alpha: float | None = None,
            device: str = "cpu") -> dict:  # fmt: skip
    hyps = Translator.from_checkpoint(checkpoint, device, alpha=alpha).translate(sources)
    report = score(hyps, refs, lang="de")
    sacre = report["sacrebleu"]
    return {"bleu": round(sacre["score"], 2), "chrf": round(report["chrf"]["score"], 2),
            "bp": round(sacre["bp"], 3), "length_ratio": round(sacre["sys_len"] / sacre["ref_len"], 3),
            "signature": sacre["signature"]}  # fmt: skip


def split(raw: Path, name: str) -> tuple[list[str], list[str]]:
    """(English sources, German references) of a raw split ("valid" or "test")."""
    prefix = raw_prefixes(raw)[name]
    return tuple(list(read_lines(find_side(prefix, lang))) for lang in ("en", "de"))


def choose_on_dev(saved: list[tuple[int, Path]], out: Path, dev: tuple[list[str], list[str]],
                  averages=AVERAGES, alphas=ALPHAS, device: str = "cpu"):  # fmt: skip
    """Every (model, alpha) candidate's dev scores, and the best one's checkpoint. A model is
    the average of the last k saved checkpoints taken `apart` saves apart (k = 1: the last)."""
    tried, paths = [], {}
    for k, apart in averages:
        if (k - 1) * apart >= len(saved):
            continue
        picked = [p for _, p in saved[::-1][::apart][:k]][::-1]  # oldest first
        key = (k, apart)
        paths[key] = picked[0] if k == 1 else average_checkpoints(picked, out / f"avg{k}x{apart}")
        tried += [{"average_last": k, "apart": apart, "alpha": a,
                   **bleu_of(paths[key], *dev, alpha=a, device=device)} for a in alphas]  # fmt: skip
    best = max(tried, key=lambda t: t["bleu"])
    return tried, best, paths[(best["average_last"], best["apart"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, default=SHARED)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-multi30k")
    parser.add_argument("--minutes", type=float, default=None, help="training time limit")
    parser.add_argument("--vocab-size", type=int, default=OPTIONS.vocab_size)
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    add_arguments(parser)
    args = parser.parse_args()

    timings = {}
    load = {"start": list(os.getloadavg())}  # other jobs on the machine slow training down
    start = time.monotonic()
    shutil.rmtree(args.out, ignore_errors=True)
    data_dir = args.out / "data"
    options = dataclasses.replace(OPTIONS, vocab_size=args.vocab_size, quiet=True)
    prepare_multi30k(args.raw, data_dir, options)
    timings["prepare_s"] = round(time.monotonic() - start, 1)

    overrides = [f"data.dir={data_dir}", f"train.out_dir={args.out / 'train'}", *args.overrides]
    if args.minutes is not None:
        overrides.append(f"train.max_time_minutes={args.minutes}")
    config = apply_overrides(load_config(str(ROOT / "configs" / "multi30k.yaml")), overrides)
    t0, started = time.monotonic(), time.time()
    result = train(config)
    timings["train_s"] = round(time.monotonic() - t0, 1)
    load["end_of_training"] = list(os.getloadavg())  # 1, 5 and 15-minute averages

    saved = step_checkpoints(checkpoints_dir(result.out_dir))  # [(step, path)], oldest first
    t1 = time.monotonic()
    dev = split(args.raw, "valid")
    tried, best, chosen = choose_on_dev(saved, args.out, dev)
    timings["choose_on_dev_s"] = round(time.monotonic() - t1, 1)
    t2 = time.monotonic()
    test = bleu_of(chosen, *split(args.raw, "test"), alpha=best["alpha"])  # the test set, once
    timings["test_s"] = round(time.monotonic() - t2, 1)
    total_minutes = round((time.monotonic() - start) / 60, 1)

    t3 = time.monotonic()  # outside the recipe: the dev curve
    curve = []
    for step, path in saved:
        minutes = (Checkpoint(path).meta["created"] - started) / 60
        curve.append({"step": step, "minutes": round(minutes, 1), **bleu_of(path, *dev)})
    timings["dev_curve_s"] = round(time.monotonic() - t3, 1)
    emit(__file__, {
        "benchmark": "multi30k", "test_set": "test_2016_flickr", "config": "configs/multi30k.yaml",
        "overrides": overrides, "steps": result.steps, "epochs": result.epoch,
        "dev_set": "val", "dev_tried": tried,
        "chosen": {k: best[k] for k in ("average_last", "apart", "alpha")},
        "test": test, "curve": curve, "timings": timings, "total_minutes": total_minutes,
        "load_average": load,
        "machine": {"cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
                    "platform": platform.platform(), "torch": torch.__version__},
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
