"""The Multi30k recipe chosen on the dev set: variants of `configs/multi30k.yaml`, each given
the number of updates that the recipe's hour on 2 CPU cores affords it, scored on `val`.

    # 1. on the 2-core CPU the recipe is for: each variant's seconds per update
    .venv/bin/python benchmarks/recipe_search.py costs [--steps 50]
    # 2. anywhere (a GPU makes it minutes): train every variant for its update budget, score on val
    python3 benchmarks/recipe_search.py search --costs benchmarks/results/recipe_search_costs_...json
        [--base-updates 5100] [--device cuda] [--jobs 8] [--variants base,dropout_0.3]

What the hour is spent on (issue 37 item 3): model size, vocabulary size, update size and
dropout, each changed alone from the recipe (`VARIANTS`). A bigger model or update costs more
seconds per update on the CPU, so it gets fewer updates in the hour: variant v trains for
`base_updates * cost(base) / cost(v)` updates, where the costs are measured on the recipe's
CPU (stage 1) and `base_updates` is what the recipe's training minutes gave the base config
there (5,100 on a quiet 2-core Zen 5: ~0.63 s per update over 54 minutes, saves and dev
loss included). The training itself may then run elsewhere (stage 2), a GPU doing in
minutes what the CPU does in an hour: the same updates, batches and schedule, so the dev
BLEU is the one the hour on the CPU would reach, up to run-to-run noise.

Each variant saves 18 checkpoints evenly over its updates (the recipe saves every 3 of its 54
minutes), then on val: the last checkpoint, the average of the last 3 and 5, and of 5 taken
two apart (`AVERAGES`), each with beam 4 and alpha 1.0 and 1.5 (`ALPHAS`). The test set is
never read. Prints one JSON object and writes it under benchmarks/results/ (`results.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from aiayn.config import apply_overrides, load_config
from aiayn.recipes.multi30k import OPTIONS, prepare_multi30k
from aiayn.train.run_dir import checkpoints_dir, step_checkpoints
from aiayn.train.trainer import train
from multi30k import ROOT, SHARED, choose_on_dev, split
from results import add_arguments, emit

# name -> (overrides of configs/multi30k.yaml, joint vocabulary size); each changes one thing
VARIANTS = {
    "base": ([], OPTIONS.vocab_size),
    "dropout_0.1": (["model.p_drop=0.1"], OPTIONS.vocab_size),
    "dropout_0.3": (["model.p_drop=0.3"], OPTIONS.vocab_size),
    "vocab_5k": ([], 5000),
    "vocab_12k": ([], 12000),
    # twice the tokens per update, so half the updates: warmup halved to cover the same tokens
    "update_8k": (["train.update_tokens=8192", "train.warmup=250"], OPTIONS.vocab_size),
    "layers_6": (["model.n_layers=6"], OPTIONS.vocab_size),
    "width_384": (["model.d_model=384", "model.n_heads=6", "model.d_ff=1536"], OPTIONS.vocab_size),
}
SAVES = 18  # checkpoints per run: the recipe saves every 3 of its 54 minutes
AVERAGES = ((1, 1), (3, 1), (5, 1), (5, 2))  # (how many of the last checkpoints, how far apart)
ALPHAS = (1.0, 1.5)
KEEP = max((k - 1) * apart + 1 for k, apart in AVERAGES)  # checkpoints the averages reach back to


def variant_config(name: str, data_dir: Path, out_dir: Path, extra: list[str]):
    overrides, _ = VARIANTS[name]
    base = [f"data.dir={data_dir}", f"train.out_dir={out_dir}", "train.max_time_minutes=0"]
    return apply_overrides(load_config(str(ROOT / "configs" / "multi30k.yaml")),
                           [*base, *overrides, *extra])  # fmt: skip


def prepared(raw: Path, work: Path, vocab: int) -> Path:
    """Multi30k prepared with a joint vocabulary of `vocab` pieces (once per size)."""
    data_dir = work / f"data_{vocab}"
    if not (data_dir / "manifest.json").is_file():
        prepare_multi30k(raw, data_dir, dataclasses.replace(OPTIONS, vocab_size=vocab, quiet=True))
    return data_dir


def update_budget(base_updates: int, cost: dict[str, float], name: str) -> int:
    """The updates variant `name` gets in the time the base config spends on `base_updates`."""
    return round(base_updates * cost["base"] / cost[name])


def seconds_per_update(log: Path, skip: int) -> float:
    """Mean seconds per update after the first `skip` updates, from a run's train_log.jsonl."""
    events = [json.loads(line) for line in log.read_text().splitlines()]
    marks = [(e["step"], e["elapsed_s"]) for e in events if e["event"] == "train"]
    (s0, t0), (s1, t1) = next(m for m in marks if m[0] >= skip), marks[-1]
    return (t1 - t0) / (s1 - s0)


def costs(args) -> dict:
    """Each variant's CPU seconds per update, measured by training it `--steps` updates."""
    out = {}
    for name in args.variants:
        data_dir = prepared(args.raw, args.work, VARIANTS[name][1])
        run = args.work / "costs" / name
        config = variant_config(name, data_dir, run, [
            f"train.max_steps={args.steps}", "train.log_every_steps=5", "train.device=cpu",
            "train.valid_every_steps=0", "train.save_every_minutes=0",
        ])  # fmt: skip
        train(config)
        out[name] = round(seconds_per_update(run / "train_log.jsonl", skip=10), 4)
        print(json.dumps({name: out[name]}), flush=True)
    return {"stage": "costs", "steps": args.steps, "seconds_per_update": out,
            "load_average": list(os.getloadavg())}  # fmt: skip


def run_variant(args) -> dict:
    """Train one variant for its update budget on `args.device`, then score it on val."""
    name = args.worker
    updates = update_budget(args.base_updates, args.cost, name)
    data_dir = prepared(args.raw, args.work, VARIANTS[name][1])
    out_dir = args.work / "runs" / name
    config = variant_config(name, data_dir, out_dir, [
        f"train.max_steps={updates}", f"train.save_every_steps={max(1, updates // SAVES)}",
        "train.save_every_minutes=0", f"train.keep_last={KEEP}", f"train.device={args.device}",
        f"train.valid_every_steps={updates}", "train.precision=bf16",
    ])  # fmt: skip
    start = time.monotonic()
    result = train(config)
    train_s = time.monotonic() - start
    saved = step_checkpoints(checkpoints_dir(result.out_dir))
    dev = tuple(side[: args.dev_lines or None] for side in split(args.raw, "valid"))
    tried, best, _ = choose_on_dev(saved, out_dir / "averages", dev, averages=AVERAGES,
                                   alphas=ALPHAS, device=args.device)  # fmt: skip
    return {"variant": name, "overrides": VARIANTS[name][0], "vocab": VARIANTS[name][1],
            "updates": result.steps, "train_s": round(train_s, 1), "dev_tried": tried,
            "best": best}  # fmt: skip


def search(args) -> dict:
    """Every variant in its own process, `--jobs` at a time; their results gathered."""
    for vocab in {VARIANTS[n][1] for n in args.variants}:
        prepared(args.raw, args.work, vocab)  # once, before the workers race for it
    pending, running, results = list(args.variants), {}, {}
    while pending or running:
        while pending and len(running) < args.jobs:
            name = pending.pop(0)
            out = args.work / f"{name}.json"
            command = [sys.executable, __file__, "search", "--worker", name, "--costs",
                       str(args.costs), "--base-updates", str(args.base_updates), "--device",
                       args.device, "--raw", str(args.raw), "--work", str(args.work),
                       "--worker-out", str(out), "--dev-lines", str(args.dev_lines)]  # fmt: skip
            log = open(args.work / f"{name}.log", "w")
            # two threads each: the workers share the machine's cores, as they share the GPU
            env = {**os.environ, "OMP_NUM_THREADS": "2"}
            running[name] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                              env=env), out)  # fmt: skip
        time.sleep(2)
        for name, (process, out) in list(running.items()):
            if process.poll() is not None:
                del running[name]
                results[name] = (json.loads(out.read_text()) if process.returncode == 0
                                 else {"variant": name, "failed": process.returncode})  # fmt: skip
                print(json.dumps({name: results[name].get("best", "failed")}), flush=True)
                if args.json_out:  # what has finished so far, in case the run is cut short
                    args.json_out.write_text(json.dumps(results, indent=1))
    ranked = sorted((r for r in results.values() if "best" in r),
                    key=lambda r: -r["best"]["bleu"])  # fmt: skip
    return {"stage": "search", "dev_set": "val", "base_updates": args.base_updates,
            "seconds_per_update_cpu": args.cost, "costs_file": str(args.costs),
            "device": args.device, "variants": [results[n] for n in args.variants],
            "ranking": [(r["variant"], r["best"]["bleu"]) for r in ranked]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("costs", "search"))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--raw", type=Path, default=SHARED, help="the raw Multi30k files")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "recipe-search")
    parser.add_argument("--steps", type=int, default=50, help="costs: updates timed per variant")
    parser.add_argument("--costs", type=Path, help="search: the costs stage's result file")
    parser.add_argument("--base-updates", type=int, default=5100,
                        help="search: updates the recipe's training minutes give the base config")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--jobs", type=int, default=8, help="search: variants trained at once")
    parser.add_argument("--dev-lines", type=int, default=0,
                        help="score on the first N dev pairs only (0: all; a quick check)")
    parser.add_argument("--json-out", type=Path, help="search: the finished variants, as they finish")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one variant
    parser.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    args.variants = args.variants.split(",")
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {', '.join(sorted(unknown))}; known: {', '.join(VARIANTS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage == "costs":
        emit(__file__, costs(args), args)
        return None
    if args.costs is None:
        parser.error("search needs --costs FILE (the costs stage's result)")
    args.cost = json.loads(args.costs.read_text())["result"]["seconds_per_update"]
    if args.worker:
        args.worker_out.write_text(json.dumps(run_variant(args)))
        return None
    result = search(args)
    if args.device.startswith("cuda"):
        torch.cuda.init()  # the workers used the GPU; opened here too, the result's meta names it
    emit(__file__, result, args)


if __name__ == "__main__":
    main()
