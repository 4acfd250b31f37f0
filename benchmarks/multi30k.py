"""Multi30k English->German with configs/multi30k.yaml: prepare, train (<= 60 min on the
machine it runs on), average the last 5 checkpoints, sacreBLEU on test_2016_flickr.

    .venv/bin/python benchmarks/multi30k.py [--raw ../shared/data/multi30k] [--out runs/bench-m30k]
                                            [--minutes 50] [key=value ...]

Prints one JSON object: the final averaged model's sacreBLEU (cased, 13a) and chrF, the
BLEU of every saved checkpoint against its training minutes (the curve), the hardware and
the time each stage took. Not a test: it takes an hour.
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
from aiayn.checkpoint import read_meta
from aiayn.config import apply_overrides, load_config
from aiayn.data.corpus import find_side, read_lines
from aiayn.evaluate import score
from aiayn.recipes.multi30k import OPTIONS, prepare_multi30k, raw_prefixes
from aiayn.train.checkpoints import checkpoints_dir, step_checkpoints
from aiayn.train.trainer import train
from aiayn.translate import Translator
from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "multi30k"


def bleu_of(checkpoint: Path, sources: list[str], refs: list[str]) -> dict:
    hyps = Translator.from_checkpoint(checkpoint).translate(sources)
    report = score(hyps, refs, lang="de")
    return {"bleu": round(report["sacrebleu"]["score"], 2), "chrf": round(report["chrf"]["score"], 2),
            "signature": report["sacrebleu"]["signature"]}  # fmt: skip


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

    test = raw_prefixes(args.raw)["test"]
    sources, refs = (list(read_lines(find_side(test, lang))) for lang in ("en", "de"))
    saved = step_checkpoints(checkpoints_dir(result.out_dir))  # [(step, path)], oldest first
    t1 = time.monotonic()
    curve = []
    for step, path in saved:
        minutes = (read_meta(path)["created"] - started) / 60
        curve.append({"step": step, "minutes": round(minutes, 1), **bleu_of(path, sources, refs)})
    averaged = average_checkpoints([p for _, p in saved[-5:]], args.out / "avg5")
    final = bleu_of(averaged, sources, refs)
    timings["evaluate_s"] = round(time.monotonic() - t1, 1)
    emit(__file__, {
        "benchmark": "multi30k", "test_set": "test_2016_flickr", "config": "configs/multi30k.yaml",
        "overrides": overrides, "steps": result.steps, "epochs": result.epoch,
        "final_avg_last5": final, "curve": curve, "timings": timings,
        "total_minutes": round((time.monotonic() - start) / 60, 1),
        "machine": {"cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
                    "platform": platform.platform(), "torch": torch.__version__},
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
