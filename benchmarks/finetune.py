"""A measured adaptation: a Multi30k model fine-tuned on the demo corpus (`aiayn train
--init-from`), against the same minutes of training from random weights.

    .venv/bin/python benchmarks/finetune.py [--base CKPT] [--raw ../shared/data/multi30k]
        [--minutes 30] [--save-at 10] [--out runs/bench-finetune] [key=value ...]

1. The base model: `--base CKPT` (e.g. the average that `benchmarks/multi30k.py` chose,
   runs/bench-multi30k/avg5x1), or else configs/multi30k.yaml trained for its recipe's
   hour (train.max_time_minutes) and its last 5 checkpoints averaged.
2. The demo corpus (the `aiayn demo` splits) prepared with the base's vocabulary
   (`prepare --vocab-from`): no new BPE, so the base's weights mean the same pieces.
3. Fine-tuning: the base's config on the demo data, started from its weights, for
   `--minutes`, a checkpoint saved every `--save-at` minutes, so that one run gives the
   model at `--save-at` and at `--minutes`; `key=value` overrides change its recipe
   (e.g. train.warmup=200 train.lr_scale=0.5), which is otherwise the base's.
4. From random weights: the same config, data and minutes.
5. sacreBLEU (the base's beam and alpha) of the base and of each of the four models on the
   demo test split (adaptation) and on Multi30k's val (what was forgotten).

Prints one JSON object; `report.py` writes the export page's paragraph (docs/export.md)
from its result file.
Not a test: with `--base` it takes about 1.5 hours on 2 CPU cores, without 2.5.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import time
from pathlib import Path

from aiayn.average import average_checkpoints, last_checkpoints
from aiayn.checkpoint import Checkpoint
from aiayn.config import apply_overrides, load_config
from aiayn.data.demo_corpus import demo_splits, write_splits
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import PrepareOptions
from aiayn.demo import DEMO_SIZES
from aiayn.recipes.multi30k import OPTIONS, prepare_multi30k
from aiayn.train.run_dir import checkpoints_dir, step_checkpoints
from aiayn.train.trainer import train
from multi30k import SHARED, bleu_of, split
from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]
BASE_AVERAGE = 5  # the base trained here: its last 5 checkpoints averaged (sec. 6.1)


def train_base(raw: Path, out: Path, vocab_size: int, overrides: list[str]) -> Path:
    """configs/multi30k.yaml on Multi30k for its recipe's minutes; -> the last 5 averaged."""
    options = dataclasses.replace(OPTIONS, vocab_size=vocab_size, quiet=True)
    prepare_multi30k(raw, out / "multi30k-data", options)
    recipe = load_config(str(ROOT / "configs" / "multi30k.yaml"))
    data, run_dir = out / "multi30k-data", out / "base"
    config = apply_overrides(recipe, [f"data.dir={data}", f"train.out_dir={run_dir}", *overrides])
    run = train(config)
    saved = last_checkpoints(run.out_dir, BASE_AVERAGE)
    return saved[0] if len(saved) == 1 else average_checkpoints(saved, out / "base-avg")


def demo_data(base: Path, out: Path, sizes: dict) -> tuple[Path, tuple[list[str], list[str]]]:
    """The demo corpus prepared with the base's vocabulary; -> (data dir, its test split)."""
    splits = demo_splits(**sizes)
    raw = write_splits(splits, out / "demo-raw")
    prepare(train=raw["train"], valid=raw["valid"], out=out / "demo-data",
            options=PrepareOptions(vocab_from=str(base), quiet=True))  # fmt: skip
    sources, refs = zip(*splits.test)
    return out / "demo-data", (list(sources), list(refs))


def run(base: Path, from_base: bool, out: Path, data: Path, minutes: float, save_at: float,
        overrides: list[str]) -> dict[str, tuple[float, int, Path]]:  # fmt: skip
    """Train the base's config on `data` for `minutes`, from the base's weights or from
    random ones; -> {"at_save": (minutes, step, checkpoint), "at_end": (...)}."""
    config = apply_overrides(Checkpoint(base).config, [
        f"data.dir={data}", f"train.out_dir={out}", f"train.max_time_minutes={minutes}",
        f"train.save_every_minutes={save_at}", "train.save_every_steps=0",
        f"train.keep_last={int(minutes / save_at) + 2}", "train.valid_every_steps=0",
        *overrides])  # fmt: skip
    started = time.time()
    result = train(config, init_from=base if from_base else None)
    saved = []
    for step, path in step_checkpoints(checkpoints_dir(result.out_dir)):
        saved.append(((Checkpoint(path).meta["created"] - started) / 60, step, path))
    at_save = min(saved, key=lambda s: abs(s[0] - save_at))
    return {"at_save": at_save, "at_end": saved[-1]}


def scores(checkpoint: Path, demo_test, multi30k_val) -> dict:
    return {"demo_test": bleu_of(checkpoint, *demo_test),
            "multi30k_val": bleu_of(checkpoint, *multi30k_val)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="a Multi30k checkpoint (default: train one)")
    parser.add_argument("--raw", type=Path, default=SHARED, help="Multi30k's raw files")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-finetune")
    parser.add_argument("--minutes", type=float, default=30.0, help="of each training run")
    parser.add_argument("--save-at", type=float, default=10.0, help="minutes between saves")
    parser.add_argument("--vocab-size", type=int, default=OPTIONS.vocab_size,
                        help="of the base trained here (without --base)")  # fmt: skip
    parser.add_argument("--base-override", action="append", default=[], metavar="key=value",
                        help="changes to configs/multi30k.yaml for the base trained here")
    parser.add_argument("--demo-train", type=int, default=DEMO_SIZES["n_train"])
    parser.add_argument("--demo-test", type=int, default=DEMO_SIZES["n_test"])
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="changes to the base's config for both runs (e.g. train.warmup)")
    add_arguments(parser)
    args = parser.parse_args()

    timings, start = {}, time.monotonic()
    shutil.rmtree(args.out, ignore_errors=True)
    base = args.base
    if base is None:
        base = train_base(args.raw, args.out, args.vocab_size, args.base_override)
        timings["base_s"] = round(time.monotonic() - start, 1)
    sizes = dict(DEMO_SIZES, n_train=args.demo_train, n_test=args.demo_test)
    data, demo_test = demo_data(base, args.out, sizes)
    multi30k_val = split(args.raw, "valid")
    models = [{"start": "base", "minutes": 0.0, "steps": 0,
               **scores(base, demo_test, multi30k_val)}]  # fmt: skip
    for name in ("base", "random"):
        t = time.monotonic()
        found = run(base, name == "base", args.out / f"from-{name}", data, args.minutes,
                    args.save_at, args.overrides)  # fmt: skip
        timings[f"from_{name}_train_s"] = round(time.monotonic() - t, 1)
        for minutes, step, path in found.values():
            models.append({"start": name,
                           "minutes": round(minutes, 2), "steps": step,
                           **scores(path, demo_test, multi30k_val)})  # fmt: skip
    base_ckpt = Checkpoint(base)
    vocab = base_ckpt.tgt_vocab
    emit(__file__, {
        "benchmark": "finetune", "base": str(base), "base_trained_here": args.base is None,
        "minutes": args.minutes, "save_at": args.save_at, "overrides": args.overrides,
        "demo": {"train_pairs": sizes["n_train"], "test_pairs": sizes["n_test"]},
        "vocab": {"size": vocab.size, "sha256": vocab.sha256},
        "decode": dataclasses.asdict(base_ckpt.config.decode), "models": models,
        "timings": {**timings, "total_s": round(time.monotonic() - start, 1)},
        "load_average": list(os.getloadavg()),
    }, args)  # fmt: skip


if __name__ == "__main__":
    main()
