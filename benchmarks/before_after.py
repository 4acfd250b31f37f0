"""aiayn's speed at this commit against an earlier one, in one run on one machine.

    .venv/bin/python benchmarks/before_after.py --before REV [--what train,translate]
        [--sizes small,base] [--turns 3] [--sentences 200]

Why: a change that moves code (such as the core / fast path split) must not cost speed,
and two benchmark runs made at different times on a shared machine differ by more than the
change does. So the two commits run here side by side, taking turns:

- train: `train_speed.py`'s own worker for system `aiayn` (its fast path: what `aiayn
  train` runs), from each commit's checkout, on the same batches; tokens/s. At this commit
  also `aiayn_reference` (the core alone, `--reference`), where the script has it.
- translate: each commit's `translate_speed.py` decoding functions (beam 4, the same random
  base-size network and batches, `--out-len` forced steps) for aiayn float32 and int8, and
  at this commit the reference path; seconds per pass.

The earlier commit is checked out into a temporary git worktree; each measurement runs in a
fresh process with that checkout's `src/` and `benchmarks/` first on the path. Prints one
JSON object and writes it under benchmarks/results/ (`results.emit`): medians and the
ratios after / before (> 1: this commit is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]

# Run in the checkout under test (its own aiayn): times aiayn's beam search there.
TRANSLATE_WORKER = r"""
import copy, importlib.util, inspect, json, sys, time
import torch
import translate_speed as ts
from aiayn.config import ModelConfig
from aiayn.model.transformer import Transformer

n, out_len, repeats, name = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
core = Transformer(ModelConfig(vocab_size=ts.VOCAB)).eval()
if importlib.util.find_spec("aiayn.fast") is not None:  # the core / fast path split
    from aiayn import fast
    if hasattr(fast, "for_inference"):  # its one entry for inference
        models = {"aiayn_float32": lambda: fast.for_inference(copy.deepcopy(core)).model,
                  "aiayn_int8": lambda: fast.for_inference(copy.deepcopy(core), int8=True).model,
                  "aiayn_reference": lambda: copy.deepcopy(core)}
    else:
        from aiayn.fast.int8 import quantize_int8
        models = {"aiayn_float32": lambda: fast.apply(copy.deepcopy(core)),
                  "aiayn_int8": lambda: quantize_int8(fast.apply(copy.deepcopy(core))),
                  "aiayn_reference": lambda: copy.deepcopy(core)}
else:
    from aiayn.quantize import quantize_int8
    models = {"aiayn_float32": lambda: copy.deepcopy(core),
              "aiayn_int8": lambda: quantize_int8(copy.deepcopy(core))}
if name not in models:
    print(json.dumps(None)); sys.exit()
model = models[name]()
sents = ts.sources(n, 1)
batches = [[sents[i] for i in g] for g in ts.groups(sents, 4096, None)]
extra = [None] if "names" in inspect.signature(ts.runner).parameters else []  # CT2's only
run = ts.runner(name, "cpu", *extra)
run(model, batches[-1:], 4, "cpu")  # first-call overheads, untimed
times = [ts.timed(run, model, batches, out_len, "cpu")[0] for _ in range(repeats)]
print(json.dumps(times))
"""


def checkout(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev],
                   check=True, capture_output=True)  # fmt: skip
    return where


def in_tree(tree: Path, command: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree / 'benchmarks'}"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tree)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} in {tree} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def train_rates(tree: Path, system: str, size: str, args) -> list[float] | None:
    script = tree / "benchmarks" / "train_speed.py"
    if system not in in_tree(tree, [sys.executable, str(script), "--help"]):
        return None  # this commit's script has no such system
    out = in_tree(tree, [sys.executable, str(script), "--worker", system, "--sizes", size,
                         "--steps", str(args.steps)])  # fmt: skip
    return json.loads(out)["rates"]


def translate_times(tree: Path, system: str, args) -> list[float] | None:
    command = [sys.executable, "-c", TRANSLATE_WORKER, str(args.sentences), str(args.out_len),
               str(args.repeats), system]  # fmt: skip
    return json.loads(in_tree(tree, command))


def compare(trees: dict[str, Path], systems: list[str], measure, turns: int) -> dict:
    """Each (commit, system) measured once per turn, in turn; -> medians and ratios."""
    samples: dict[str, list[float]] = {}
    for _ in range(turns):
        for label, tree in trees.items():
            for system in systems:
                got = measure(tree, system)
                if got is not None:
                    samples.setdefault(f"{label}/{system}", []).extend(got)
    return {key: statistics.median(values) for key, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the earlier commit")
    parser.add_argument("--what", default="train,translate")
    parser.add_argument("--sizes", default="small,base")
    parser.add_argument("--steps", type=int, default=4, help="timed training steps a turn")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--out-len", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2, help="search passes a turn")
    add_arguments(parser)
    args = parser.parse_args()
    result: dict = {"before": args.before}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": checkout(args.before, Path(tmp) / "before"), "after": ROOT}
        try:
            if "train" in args.what:
                for size in args.sizes.split(","):
                    measure = lambda tree, system: train_rates(tree, system, size, args)  # noqa: E731
                    med = compare(trees, ["aiayn", "aiayn_reference"], measure, args.turns)
                    result[f"train_{size}_tokens_per_s"] = {k: round(v) for k, v in med.items()}
                    result[f"train_{size}_after_over_before"] = round(
                        med["after/aiayn"] / med["before/aiayn"], 3)
            if "translate" in args.what:
                systems = ["aiayn_float32", "aiayn_int8", "aiayn_reference"]
                measure = lambda tree, system: translate_times(tree, system, args)  # noqa: E731
                med = compare(trees, systems, measure, args.turns)
                result["translate_seconds"] = {k: round(v, 3) for k, v in med.items()}
                for system in systems[:2]:  # seconds: before / after is the speed ratio
                    result[f"translate_{system}_after_over_before"] = round(
                        med[f"before/{system}"] / med[f"after/{system}"], 3)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(trees["before"])], capture_output=True)  # fmt: skip
    emit(__file__, result, args)


if __name__ == "__main__":
    main()
