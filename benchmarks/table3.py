"""Table 3 re-run on Multi30k: every row of the paper's Table 3 (A-E and big), each scaled
from one Multi30k base by the factors the paper's row is scaled by from its base.

    # 1. what an update of each row costs on this CPU (one thread, as each of 2 jobs runs)
    .venv/bin/python benchmarks/table3.py costs [--rows base,C-d1024,big] [--steps 20]
    # 2. the table: every row and 3 seeds of the base, --jobs at a time; resumable
    .venv/bin/python benchmarks/table3.py run [--rows ROWS] [--seeds 3] [--updates 800]
                                              [--jobs 2] [--device cpu|cuda] [--work DIR]

The rows: the presets of `aiayn.config.PRESETS` (configs/table3/) and `big`. A row's changes
are scaled by the paper's factors: h = 1, 4, 16, 32 stay themselves (the base has the
paper's 8 heads), d_k and d_v, N, d_model and d_ff take the paper's ratio to its base (d_k 16
is a quarter of the base's d_k, N 2 a third of its N), as do P_drop and eps_ls (the base
keeps the paper's 0.1, so rows D and big get the paper's own values); big trains 3 times
the updates, as the paper's 300K steps are 3 times 100K. Every other row trains the same
updates on the same batches (data.seed) with the same train.seed as the base, as the paper
trained every row for the same steps. Seeds 2 and 3 of the base (train.seed: its
initialisation and dropout, not its batches) give the run-to-run noise the table is read
against.

Each row is scored as Table 3 was: on the dev set (`val`, never the test set), the last
checkpoint (no averaging), beam 4 (alpha 1.5, the recipe's choice on val), sacreBLEU; dev
perplexity per subword (the trainer's dev NLL at the last update); parameters counted from
the model. A row's result is written to `<work>/rows/<row>_seed<k>.json` as it finishes, a
row cut short resumes from its latest checkpoint (saved every tenth of its updates), and a
row already written is not run again, so the table can be filled over several sessions.
When every row and seed asked for is written, the whole table is emitted as one result file
(`results.py`), from which `report.py` builds the README's table and
`benchmarks/plots/table3.png`.

Sizing (issue 46: the whole table in about four hours of 2 CPU cores, fp32 as on a CPU
without bf16 products): two rows run at once, one thread each (`--jobs 2`; small models use
one core better than two), so the budget is 8 core-hours. `costs` measured, in CPU seconds
per update of one thread on a 2-core Zen 3 shared with other jobs (load 8-18, which
inflates CPU time: a quiet machine is faster), 1.19 for a base at d_model 128 (8 heads,
d_ff 512, N 3, 4096-token updates) and 3.36 at d_model 256 (d_ff 1024); at 128, big 3.25
and A-h32 1.71 (32 heads of 4 dimensions cost more than their FLOPs). With the other rows
from their FLOPs (`aiayn.analysis.flops`), the 22 runs cost about 30 base runs, big alone 8
(3 x 2.7). A base of width 256 would get ~300 updates, too few to translate (the Multi30k
recipe passes 25 BLEU near 800); at width 128 a run gets 800 updates (8 core-hours less
60 s of scoring per run, over 30 x 1.19 s), about 7 epochs of Multi30k, and the table takes
about 8.3 core-hours at the loaded costs. The recipe's other settings are kept (lr_scale
0.5, 4096-token updates), with warm-up 300 (the recipe's 500 is most of 800 updates).
800 updates is early in training: the rows are compared at a fixed, short budget, as the
paper's were at its fixed 100K steps, but nearer the start. `costs --core-hours H` gives
the updates that fit another budget from costs measured anew; a GPU runs eight rows at
once (`--jobs 8 --device cuda`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from aiayn.checkpoint import Checkpoint
from aiayn.config import PRESETS, Config, apply_overrides, load_config, preset
from aiayn.errors import ConfigError
from aiayn.model.transformer import parameter_count
from aiayn.recipes.multi30k import OPTIONS, prepare_multi30k
from aiayn.train.run_dir import checkpoints_dir, step_checkpoints
from aiayn.train.trainer import train
from multi30k import ROOT, SHARED, bleu_of, split
from results import add_arguments, emit, meta

# The paper's Table 3: (dev PPL, dev BLEU, params x 10^6); None where the paper leaves the
# params blank (the base's).
PAPER = {
    "base": (4.92, 25.8, 65),
    "A-h1": (5.29, 24.9, None), "A-h4": (5.00, 25.5, None), "A-h16": (4.91, 25.8, None),
    "A-h32": (5.01, 25.4, None), "B-dk16": (5.16, 25.1, 58), "B-dk32": (5.01, 25.4, 60),
    "C-N2": (6.11, 23.7, 36), "C-N4": (5.19, 25.3, 50), "C-N8": (4.88, 25.5, 80),
    "C-d256": (5.75, 24.5, 28), "C-d1024": (4.66, 26.0, 168), "C-ff1024": (5.12, 25.4, 53),
    "C-ff4096": (4.75, 26.2, 90), "D-drop0.0": (5.77, 24.6, None),
    "D-drop0.2": (4.95, 25.5, None), "D-ls0.0": (4.67, 25.3, None),
    "D-ls0.2": (5.47, 25.7, None), "E-learned-pe": (4.92, 25.7, None), "big": (4.33, 26.4, 213),
}  # fmt: skip
ROWS = list(PAPER)  # Table 3's order
PAPER_STEPS = 100000  # the base's train steps in Table 3
NOT_SCALED = ("train.keep_last",)  # how many checkpoints big kept: not part of the row

# The Multi30k base: configs/multi30k.yaml with the paper's 8 heads (so that row A's h stay
# theirs), its dropout 0.1, half the recipe's width (see the docstring's sizing)
BASE = ["model.d_model=128", "model.n_heads=8", "model.d_ff=512", "model.n_layers=3",
        "model.p_drop=0.1", "train.eps_ls=0.1", "train.update_tokens=4096",
        "train.lr_scale=0.5", "train.warmup=300", "train.max_time_minutes=0"]  # fmt: skip
UPDATES = 800
SAVES = 10  # checkpoints per run: where a run cut short resumes
EVAL_CPU_S = 60  # CPU seconds a run's dev scores take, about (beam 4 over val, one thread)


def _value(config: Config, dotted: str):
    """A config value by its dotted key; d_k and d_v as used (d_model / h when unset)."""
    section, _, key = dotted.partition(".")
    if dotted in ("model.d_k", "model.d_v"):
        return config.model.key_dim if key == "d_k" else config.model.value_dim
    return getattr(getattr(config, section), key)


def row_overrides(name: str, base: Config, updates: int) -> list[str]:
    """The overrides that make row `name` of our base: each change the paper's row makes to
    its base, scaled by the paper's ratio (a text value, e.g. learned positions, as it is)."""
    if name not in PAPER:
        raise ConfigError(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
    paper, out = preset("base"), []
    for key, value in PRESETS[name].items():
        if key in NOT_SCALED:
            continue
        if isinstance(value, str):
            out.append(f"{key}={value}")
            continue
        ours = updates if key == "train.max_steps" else _value(base, key)
        theirs = PAPER_STEPS if key == "train.max_steps" else _value(paper, key)
        scaled = value / theirs * ours
        if isinstance(ours, int):
            if abs(scaled - round(scaled)) > 1e-9:
                raise ConfigError(f"row {name}: {key} = {value} / {theirs} x {ours} is not whole")
            scaled = round(scaled)
        out.append(f"{key}={round(scaled, 6)}")
    return out


def base_config(data_dir: Path, out_dir: Path, extra: list[str]) -> Config:
    """The Multi30k base (`BASE` over configs/multi30k.yaml), then `extra`."""
    base = [f"data.dir={data_dir}", f"train.out_dir={out_dir}", *BASE]
    return apply_overrides(load_config(str(ROOT / "configs" / "multi30k.yaml")), [*base, *extra])


def row_config(name: str, seed: int, data_dir: Path, out_dir: Path, updates: int,
               extra: list[str]) -> Config:  # fmt: skip
    """Row `name` at `train.seed=seed`: `updates` updates (big: 3 times), the base's
    batches; `extra` (overrides of the base, e.g. a tiny size for tests) before the row's."""
    base = base_config(data_dir, out_dir, [f"train.max_steps={updates}", *extra])
    return apply_overrides(base, [*row_overrides(name, base, updates), f"train.seed={seed}"])


def prepared(args) -> Path:
    """Multi30k prepared once under the work directory."""
    data_dir = args.work / "data"
    if not (data_dir / "manifest.json").is_file():
        options = dataclasses.replace(OPTIONS, vocab_size=args.vocab_size, quiet=True, workers=1)
        prepare_multi30k(args.raw, data_dir, options)
    return data_dir


def run_row(args, name: str, seed: int) -> dict:
    """Train one row (resuming its latest checkpoint if any), score it on val."""
    out_dir = args.work / "runs" / f"{name}_seed{seed}"
    config = row_config(name, seed, prepared(args), out_dir, args.updates, args.overrides)
    steps = config.train.max_steps
    config = apply_overrides(config, [
        f"train.valid_every_steps={steps}", f"train.save_every_steps={max(1, steps // SAVES)}",
        "train.save_every_minutes=0", "train.keep_last=1", f"train.device={args.device}",
    ])  # fmt: skip
    resume = out_dir if step_checkpoints(checkpoints_dir(out_dir)) else None
    cpu, start = time.process_time(), time.monotonic()
    result = train(config, resume=resume)
    train_s, train_cpu_s = time.monotonic() - start, time.process_time() - cpu
    dev = tuple(side[: args.dev_lines or None] for side in split(args.raw, "valid"))
    scores = bleu_of(result.final_checkpoint, *dev, device=args.device)
    model = Checkpoint(result.final_checkpoint).config.model
    return {
        "row": name, "seed": seed, "updates": result.steps, "resumed": resume is not None,
        "model": {k: _value(config, f"model.{k}") for k in
                  ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v", "p_drop", "positional")},
        "eps_ls": config.train.eps_ls, "params": parameter_count(model),
        "dev_nll": round(result.last_valid["nll"], 4),
        "dev_ppl": round(result.last_valid["ppl"], 3),
        "dev": {**scores, "lines": len(dev[0])},
        "train_s": round(train_s, 1), "train_cpu_s": round(train_cpu_s, 1),
        "meta": meta(__file__, args.note),
    }  # fmt: skip


def row_file(work: Path, name: str, seed: int) -> Path:
    return work / "rows" / f"{name}_seed{seed}.json"


def wanted(rows: list[str], seeds: int) -> list[tuple[str, int]]:
    """(row, seed) of every run asked for: each row at seed 1, the base at 1..seeds."""
    runs = [(name, 1) for name in rows]
    return runs + [("base", s) for s in range(2, seeds + 1) if "base" in rows]


def run_table(args) -> dict | None:
    """Every run not yet written, `--jobs` at a time (each its own process; one job: in
    this process); the table once every run asked for is written (None before)."""
    prepared(args)  # once, before the workers
    runs = wanted(args.rows, args.seeds)
    todo = [(n, s) for n, s in runs if not row_file(args.work, n, s).is_file()]
    if args.jobs == 1:
        for name, seed in todo:
            write_row(args, name, seed)
    else:
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for name, seed, code in pool.map(lambda run: _worker(args, *run, threads), todo):
                print(json.dumps({"row": name, "seed": seed, "exit": code}), flush=True)
    found = [row_file(args.work, n, s) for n, s in runs]
    if not all(path.is_file() for path in found):
        missing = [p.stem for p in found if not p.is_file()]
        print(f"table3: not emitted; missing {', '.join(missing)}", file=sys.stderr)
        return None
    return table([json.loads(p.read_text()) for p in found], args)


def _worker(args, name: str, seed: int, threads: int) -> tuple[str, int, int]:
    """`run_row` in a process of its own with `threads` threads; its log beside the rows."""
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    command = [sys.executable, __file__, *sys.argv[1:], "--worker", f"{name}:{seed}"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with open(args.work / "logs" / f"{name}_seed{seed}.log", "a") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    return name, seed, code


def write_row(args, name: str, seed: int) -> None:
    record = run_row(args, name, seed)
    path = row_file(args.work, name, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)  # a row file is whole or absent


# Student's t at 0.975 for 1..10 degrees of freedom (two-sided 95%)
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def noise(values: list[float]) -> dict:
    """Mean, sample sd and the 95% prediction interval of a new run of the same config,
    mean +- t(0.975, n-1) * sd * sqrt(1 + 1/n), assuming normal run-to-run noise."""
    n, mean = len(values), statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else math.nan
    t = T_975[n - 2] if 2 <= n <= len(T_975) + 1 else 1.96
    half = t * sd * math.sqrt(1 + 1 / n)
    return {"n": n, "mean": round(mean, 4), "sd": round(sd, 4),
            "interval": [round(mean - half, 4), round(mean + half, 4)]}  # fmt: skip


def table(records: list[dict], args) -> dict:
    """The emitted result: the rows (seed 1), the base's seeds, the noise, the paper."""
    seeds = [r for r in records if r["row"] == "base"]
    spread = {k: noise([r[k] if k == "dev_ppl" else r["dev"]["bleu"] for r in seeds])
              for k in ("dev_bleu", "dev_ppl")}  # fmt: skip
    rows = []
    for r in (r for r in records if r["seed"] == 1):
        values = {"dev_bleu": r["dev"]["bleu"], "dev_ppl": r["dev_ppl"]}
        outside = {k: r["row"] != "base" and not (spread[k]["interval"][0] <= v
                                                 <= spread[k]["interval"][1])
                   for k, v in values.items()}  # fmt: skip
        rows.append({**r, "outside_noise": outside})
    return {
        "benchmark": "table3", "dev_set": "val", "updates": args.updates, "base": BASE,
        "base_overrides": args.overrides, "rows": rows, "base_seeds": seeds, "noise": spread,
        "paper": {k: dict(zip(("ppl", "bleu", "params_m"), v)) for k, v in PAPER.items()},
    }  # fmt: skip


def costs(args) -> dict:
    """CPU seconds per update of each row, on one thread: the CPU time of `--steps` more
    updates than a run of 5 (which pays the setup and the first, slower updates)."""
    torch.set_num_threads(1)
    data_dir, out = prepared(args), {}
    for name in args.rows:
        spent = []
        for steps in (5, 5 + args.steps):
            run = args.work / "costs" / f"{name}_{steps}"
            shutil.rmtree(run, ignore_errors=True)  # a fresh run each time
            quiet = ["train.valid_every_steps=0", "train.save_every_minutes=0", "train.device=cpu"]
            config = row_config(name, 1, data_dir, run, steps, [*args.overrides, *quiet])
            config = apply_overrides(config, [f"train.max_steps={steps}"])  # big too
            cpu = time.process_time()
            train(config)
            spent.append(time.process_time() - cpu)
        out[name] = round((spent[1] - spent[0]) / args.steps, 4)
        print(json.dumps({name: out[name]}), flush=True)
    return {"stage": "costs", "steps": args.steps, "threads": 1, "base": BASE,
            "base_overrides": args.overrides, "cpu_seconds_per_update": out,
            "updates_in_budget": updates_in_budget(out, args.seeds, args.core_hours),
            "core_hours": args.core_hours, "load_average": list(os.getloadavg())}  # fmt: skip


def updates_in_budget(cost: dict[str, float], seeds: int, core_hours: float) -> int | None:
    """The updates per row that fit the runs of the rows in `cost` (the base `seeds` times,
    big 3 times as many updates) in `core_hours` of CPU, `EVAL_CPU_S` of it per run kept
    for scoring; None without the base's cost."""
    if "base" not in cost:
        return None
    runs = wanted(list(cost), seeds)
    per_update = sum(cost[name] * (3 if name == "big" else 1) for name, _ in runs)
    return int((core_hours * 3600 - EVAL_CPU_S * len(runs)) / per_update)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("costs", "run"))
    parser.add_argument("--rows", default=",".join(ROWS), help="rows, comma-separated (all)")
    parser.add_argument("--seeds", type=int, default=3, help="run: seeds of the base row")
    parser.add_argument("--updates", type=int, default=UPDATES, help="run: updates per row")
    parser.add_argument("--steps", type=int, default=20, help="costs: updates timed per row")
    parser.add_argument("--core-hours", type=float, default=8.0,
                        help="costs: the CPU budget the updates are fitted to (4 h x 2 cores)")
    parser.add_argument("--jobs", type=int, default=2, help="run: rows trained at once")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--raw", type=Path, default=SHARED, help="the raw Multi30k files")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "table3")
    parser.add_argument("--vocab-size", type=int, default=OPTIONS.vocab_size)
    parser.add_argument("--dev-lines", type=int, default=0,
                        help="score the first N dev pairs only (0: all; tests)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: ROW:SEED
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="changes to the base (tests: a tiny model)")
    add_arguments(parser)
    args, extra = parser.parse_known_args()  # overrides may follow options, as in `aiayn`
    if any("=" not in word or word.startswith("-") for word in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides += extra
    args.rows = args.rows.split(",")
    unknown = [name for name in args.rows if name not in PAPER]
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)}; rows: {', '.join(ROWS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.worker:
        name, _, seed = args.worker.partition(":")
        write_row(args, name, int(seed))
    elif args.stage == "costs":
        emit(__file__, costs(args), args)
    else:
        result = run_table(args)
        if result is not None:
            if args.device.startswith("cuda"):
                torch.cuda.init()  # the workers used the GPU; the result's meta names it
            emit(__file__, result, args)


if __name__ == "__main__":
    main()
