"""Does cleaning pay? Multi30k with labelled web-crawl noise, three trainings of one budget.

    .venv/bin/python benchmarks/noisy_corpus.py [--raw ../shared/data/multi30k] [--noise 0.3]
        [--updates 600] [--seeds 1 2] [--out runs/bench-noisy] [--filters-only] [--resume]
        [key=value ...]

1. Noise: Multi30k's 29k training pairs stay as they are, and labelled noisy pairs are
   added at random places until they are `--noise` of the corpus (30%: 12,429 pairs), in six
   equal kinds, each as crawled corpora have them: `misaligned` (a source with another
   pair's target), `untranslated` (a side copied to the other), `wrong_language` (an English
   target: other pairs' sources), `duplicate` (a pair again, half of them with its case or
   spacing changed), `truncated` (a side cut to a fifth to two fifths of its words) and
   `markup` (a pair wrapped in or interleaved with HTML). Of two equal pairs the later is the
   duplicate, whichever was added.
2. The filters (`prepare --dry-run --removed`, the code `prepare` runs): per filter what it
   removed and its precision (the share of that which is noise), per kind of noise its recall
   (the share removed by any filter), and the share of clean pairs removed. Cheap: no training.
3. Three trainings of the same budget (configs/multi30k.yaml for `--updates` updates, each
   seed of `--seeds`): `clean` (Multi30k alone), `noisy` (with the noise, no cleaning) and
   `cleaned` (with the noise, cleaned by `prepare`'s defaults). Each run's last checkpoint is
   decoded on the dev set (val) with each length penalty of multi30k.py (0.6, 1.0, 1.5), and
   the test set (test_2016_flickr) once with the best: the config's alpha 1.5 suits the
   recipe's converged model, while after a short budget it lengthens some models' output by
   half and others' not at all, a seed-to-seed spread larger than any corpus's effect.

Prints one JSON object and writes it to benchmarks/results/. Not a test: hours on two cores.
`--resume` goes on where an interrupted run in `--out` stopped: the conditions' prepared data
(if cleaned with the same options) and every training that ran to its end with the same
config on the same data (`data_print`) are kept (and scored again), the rest is done; each
seed's result says whether its training was "reused".
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
import shutil
import time
from pathlib import Path

from aiayn.checkpoint import Checkpoint
from aiayn.config import Config, apply_overrides, load_config
from aiayn.data.binarize import MANIFEST
from aiayn.data.clean import normalized
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import NO_CLEANING, CleanOptions
from aiayn.recipes.multi30k import OPTIONS, raw_prefixes
from aiayn.train.trainer import train
from multi30k import SHARED, bleu_of, choose_on_dev, split
from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("misaligned", "untranslated", "wrong_language", "duplicate", "truncated", "markup")
# the filters meant for each kind of noise
TARGETED = {"misaligned": ("misaligned",), "untranslated": ("copy", "language"),
            "wrong_language": ("language",), "duplicate": ("duplicate", "near_duplicate"),
            "truncated": ("char_ratio",), "markup": ("markup",)}  # fmt: skip
MARKUP = ('<p class="caption">{}</p>', "<b>{}</b>", '{} <a href="/next">&raquo;</a>',
          "{}<br/>", "<div><span>{}</span></div>", "{} &nbsp;")  # fmt: skip
Pair = tuple[str, str]


def truncate(text: str, rng: random.Random) -> str:
    """The first fifth to two fifths of `text`'s words (at least one)."""
    words = text.split()
    return " ".join(words[: max(1, round(len(words) * rng.uniform(0.2, 0.4)))])


def noisy_pair(kind: str, pairs: list[Pair], rng: random.Random) -> Pair:
    """One pair of noise of `kind`, made from the clean `pairs`."""
    (src, tgt), (other_src, other_tgt) = rng.sample(pairs, 2)
    if kind == "misaligned":
        return src, other_tgt
    if kind == "untranslated":
        return (src, src) if rng.random() < 0.5 else (tgt, tgt)
    if kind == "wrong_language":
        return src, other_src
    if kind == "duplicate":
        if rng.random() < 0.5:
            return src, tgt
        return src.lower(), "  ".join(tgt.split())  # a near duplicate
    if kind == "truncated":
        return (src, truncate(tgt, rng)) if rng.random() < 0.5 else (truncate(src, rng), tgt)
    if kind == "markup":
        template = rng.choice(MARKUP)
        return (template.format(src), tgt) if rng.random() < 0.5 else (src, template.format(tgt))
    raise ValueError(kind)


def inject_noise(pairs: list[Pair], share: float, seed: int) -> tuple[list[Pair], list[str]]:
    """`pairs` with noisy pairs added at random places until they are `share` of the whole,
    in equal numbers of each kind; returns the corpus and each pair's label ("clean" or its
    kind). Of equal pairs the first is labelled clean, the later ones "duplicate"."""
    rng = random.Random(seed)
    n_noise = round(share / (1 - share) * len(pairs))
    noise = [(noisy_pair(KINDS[i % len(KINDS)], pairs, rng), KINDS[i % len(KINDS)])
             for i in range(n_noise)]  # fmt: skip
    total = len(pairs) + n_noise
    places = set(rng.sample(range(total), n_noise))
    clean, noisy = iter(pairs), iter(noise)
    corpus = [next(noisy) if i in places else (next(clean), "clean") for i in range(total)]
    return [pair for pair, _ in corpus], relabel_duplicates(corpus)


def relabel_duplicates(corpus: list[tuple[Pair, str]]) -> list[str]:
    """The labels, with every pair equal to an earlier one once case, digits and spacing are
    normalised (as the issue defines near duplicates) "duplicate", and the first of each
    such group clean: an added copy may come before its original, and Multi30k has a few
    duplicates of its own."""
    seen: set[Pair] = set()
    labels = []
    for (src, tgt), label in corpus:
        if label in ("clean", "duplicate"):
            key = (normalized(src), normalized(tgt))
            label = "duplicate" if key in seen else "clean"
            seen.add(key)
        labels.append(label)
    return labels


def filter_scores(labels: list[str], removed: dict[int, str]) -> dict:
    """Per filter: removed, precision; per kind: recall; the clean pairs removed. `removed`:
    {1-based line: filter}, as `prepare --removed` writes it."""
    by_filter: dict[str, dict] = {}
    for line, name in removed.items():
        entry = by_filter.setdefault(name, {"removed": 0, "noise": 0, "kinds": {}})
        label = labels[line - 1]
        entry["removed"] += 1
        entry["noise"] += label != "clean"
        entry["kinds"][label] = entry["kinds"].get(label, 0) + 1
    for entry in by_filter.values():
        entry["precision"] = round(entry.pop("noise") / entry["removed"], 4)
    kinds = {}
    for kind in ("clean", *KINDS):
        lines = [i + 1 for i, label in enumerate(labels) if label == kind]
        gone = sum(line in removed for line in lines)
        kinds[kind] = {"pairs": len(lines), "removed": gone,
                       "share_removed": round(gone / max(len(lines), 1), 4)}  # fmt: skip
    return {"filters": by_filter, "kinds": kinds}


def write_pairs(prefix: Path, pairs: list[Pair]) -> Path:
    """PREFIX.en and PREFIX.de, one side of a pair a line."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for lang, side in (("en", 0), ("de", 1)):
        text = "".join(pair[side] + "\n" for pair in pairs)
        Path(f"{prefix}.{lang}").write_text(text, encoding="utf-8")
    return prefix


def measure_filters(train: Path, raw: Path, labels: list[str], out: Path) -> dict:
    """What `prepare`'s default cleaning removes from the noisy corpus `train`, scored
    against the labels (see `filter_scores`), and the recall on each kind it targets."""
    removed_tsv = out / "removed.tsv"
    options = dataclasses.replace(OPTIONS, clean=CleanOptions(), dry_run=True,
                                  removed=str(removed_tsv), quiet=True)  # fmt: skip
    start = time.monotonic()
    prepare(train=train, valid=raw_prefixes(raw)["valid"], out=out / "unused", options=options)
    seconds = round(time.monotonic() - start, 1)
    rows = (row.split("\t", 3) for row in removed_tsv.read_text(encoding="utf-8").splitlines())
    scores = filter_scores(labels, {int(row[0]): row[1] for row in rows})
    kinds = scores["kinds"]
    return {**scores, "targeted_recall": {k: kinds[k]["share_removed"] for k in TARGETED},
            "clean_removed_share": kinds["clean"]["share_removed"], "seconds": seconds}  # fmt: skip


def prepared(name: str, train_prefix: Path, raw: Path, clean: CleanOptions, out: Path,
             vocab_size: int, resume: bool = False) -> tuple[Path, int]:  # fmt: skip
    """The condition's prepared directory (its own BPE, as a user would have) and its pairs;
    with `resume`, one an earlier run prepared whole (`prepare` writes it at once) with the
    same cleaning options is kept."""
    data = out / f"data-{name}"
    if resume and (data / MANIFEST).is_file():
        manifest = json.loads((data / MANIFEST).read_text(encoding="utf-8"))
        if manifest["cleaning"]["options"] == json.loads(json.dumps(dataclasses.asdict(clean))):
            return data, manifest["splits"]["train"]["pairs"]
    options = dataclasses.replace(OPTIONS, vocab_size=vocab_size, clean=clean, quiet=True,
                                  overwrite=True)  # fmt: skip
    manifest = prepare(train=train_prefix, valid=raw_prefixes(raw)["valid"], out=data,
                       options=options)  # fmt: skip
    return data, manifest["splits"]["train"]["pairs"]


DATA_PRINT = "data_print.txt"  # in a training's directory: what it trained on


def data_print(data: Path) -> str:
    """A prepared directory's fingerprint: a hash of its manifest's vocabulary, cleaning
    options and training split (pairs, tokens, input files' hashes)."""
    manifest = json.loads((data / MANIFEST).read_text(encoding="utf-8"))
    what = [manifest["vocab"], manifest["cleaning"]["options"], manifest["splits"]["train"]]
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def finished(config: Config) -> tuple[Path, dict] | None:
    """The final checkpoint and `end` event of a training of exactly `config` that ran to
    its last update in `config.train.out_dir` (an earlier, interrupted run's) on the data
    now in `config.data.dir` (its `data_print`, which the training left beside it: a corpus
    cleaned otherwise since has other pairs, though its vocabulary, learned before
    cleaning, is the same), else None."""
    out, steps = Path(config.train.out_dir), config.train.max_steps
    log, checkpoint = out / "train_log.jsonl", out / "checkpoints" / f"step-{steps:06d}"
    if not log.is_file() or not checkpoint.is_dir():
        return None
    ends = [e for e in map(json.loads, log.read_text(encoding="utf-8").splitlines())
            if e["event"] == "end" and e["step"] == steps]  # fmt: skip
    if not ends:
        return None
    mark = out / DATA_PRINT
    if not mark.is_file() or mark.read_text(encoding="utf-8") != data_print(Path(config.data.dir)):
        return None
    saved = Checkpoint(checkpoint).config
    # the trainer sets the vocabulary's size from the data (the same directory here)
    model = dataclasses.replace(config.model, vocab_size=saved.model.vocab_size)
    if saved != dataclasses.replace(config, model=model):
        return None
    return checkpoint, ends[-1]


def train_and_score(data: Path, out: Path, seed: int, updates: int, overrides: list[str],
                    dev: tuple, test: tuple, resume: bool = False) -> dict:  # fmt: skip
    """One training of `updates` updates (configs/multi30k.yaml); its last checkpoint's
    dev scores with each length penalty, and its test score with the one best on dev. With
    `resume`, a training of the same config that an interrupted
    run finished is scored instead of trained again ("reused"); a half-done one is trained
    again from the start."""
    budget = [f"data.dir={data}", f"train.out_dir={out}", f"train.max_steps={updates}",
              "train.max_time_minutes=0", f"train.seed={seed}", f"data.seed={seed}"]
    config = apply_overrides(load_config(str(ROOT / "configs" / "multi30k.yaml")),
                             [*budget, *overrides])  # fmt: skip
    done = finished(config) if resume else None
    if done is not None:
        checkpoint, end = done
        steps, minutes = end["step"], round(end["elapsed_s"] / 60, 1)
    else:
        shutil.rmtree(out, ignore_errors=True)  # a half-done run's: the trainer starts anew
        start = time.monotonic()
        result = train(config)
        minutes = round((time.monotonic() - start) / 60, 1)
        checkpoint, steps = result.final_checkpoint, result.steps
        (out / DATA_PRINT).write_text(data_print(data), encoding="utf-8")
    tried, best, _ = choose_on_dev([(steps, checkpoint)], out, dev, averages=((1, 1),))
    scores = {k: v for k, v in best.items() if k not in ("average_last", "apart", "alpha")}
    return {"seed": seed, "steps": steps, "train_minutes": minutes, "reused": done is not None,
            "alpha": best["alpha"], "dev_tried": [{"alpha": t["alpha"], "bleu": t["bleu"]}
                                                  for t in tried],
            "dev": scores, "test": bleu_of(checkpoint, *test, alpha=best["alpha"])}  # fmt: skip


def summary(runs: dict) -> dict:
    """Mean dev and test BLEU of each condition, the spread between seeds, and the gaps."""
    means, spread = {}, 0.0
    for name, run in runs.items():
        tests = [r["test"]["bleu"] for r in run["seeds"]]
        devs = [r["dev"]["bleu"] for r in run["seeds"]]
        means[name] = {"dev": round(sum(devs) / len(devs), 2),
                       "test": round(sum(tests) / len(tests), 2)}
        spread = max(spread, max(tests) - min(tests))
    gaps = {f"{name}_minus_clean": round(means[name]["test"] - means["clean"]["test"], 2)
            for name in ("noisy", "cleaned")}  # fmt: skip
    several = all(len(run["seeds"]) > 1 for run in runs.values())
    return {"mean_bleu": means, "test_gaps": gaps,
            "seed_spread_test": round(spread, 2) if several else None}  # fmt: skip


def trainings(corpora: dict, raw: Path, args: argparse.Namespace) -> dict:
    """The three conditions, each prepared once and trained with every seed."""
    cleaning = {"clean": NO_CLEANING, "noisy": NO_CLEANING, "cleaned": CleanOptions()}
    dev, test = split(raw, "valid"), split(raw, "test")
    runs = {}
    for name, train_prefix in corpora.items():
        data, pairs = prepared(name, train_prefix, raw, cleaning[name], args.out, args.vocab_size,
                               args.resume)  # fmt: skip
        seeds = [train_and_score(data, args.out / f"{name}-seed{seed}", seed, args.updates,
                                 args.overrides, dev, test, args.resume)
                 for seed in args.seeds]  # fmt: skip
        runs[name] = {"pairs": pairs, "seeds": seeds}
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", type=Path, default=SHARED)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-noisy")
    parser.add_argument("--noise", type=float, default=0.3, help="share of the noisy corpus")
    parser.add_argument("--noise-seed", type=int, default=1)
    parser.add_argument("--updates", type=int, default=600, help="each training's updates")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--vocab-size", type=int, default=OPTIONS.vocab_size)
    parser.add_argument("--filters-only", action="store_true", help="measure the filters only")
    parser.add_argument("--resume", action="store_true",
                        help="go on where an interrupted run in --out stopped: its prepared data "
                        "and the trainings it finished with the same config are kept and scored")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    add_arguments(parser)
    args = parser.parse_args()

    start = time.monotonic()
    if not args.resume:
        shutil.rmtree(args.out, ignore_errors=True)
    clean_pairs = list(zip(*split(args.raw, "train")))
    noisy_pairs, labels = inject_noise(clean_pairs, args.noise, args.noise_seed)
    corpora = {"clean": write_pairs(args.out / "corpus" / "clean", clean_pairs),
               "noisy": write_pairs(args.out / "corpus" / "noisy", noisy_pairs)}  # fmt: skip
    corpora["cleaned"] = corpora["noisy"]  # the same text, prepared with cleaning
    kinds = {kind: labels.count(kind) for kind in ("clean", *KINDS)}
    result: dict = {
        "benchmark": "noisy_corpus", "config": "configs/multi30k.yaml", "updates": args.updates,
        "resumed": args.resume,
        "overrides": args.overrides, "noise": {"share": args.noise, "seed": args.noise_seed,
                                               "pairs": len(noisy_pairs), "labels": kinds},
        "filters": measure_filters(corpora["noisy"], args.raw, labels, args.out),
    }  # fmt: skip
    if not args.filters_only:
        runs = trainings(corpora, args.raw, args)
        result.update(runs=runs, summary=summary(runs))
    result["total_minutes"] = round((time.monotonic() - start) / 60, 1)
    emit(__file__, result, args)


if __name__ == "__main__":
    main()
