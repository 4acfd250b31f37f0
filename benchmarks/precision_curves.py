"""bfloat16 against float32 training on the same updates: the dev loss curves of both.

    .venv/bin/python benchmarks/precision_curves.py [--data data/multi30k] [--steps 200]
        [--valid-every 25] [--threads 1] [--out runs/precision-curves] [key=value ...]

Trains `configs/multi30k.yaml` twice from the same seed, identical but for
`train.precision` (fp32, then bf16: autocast with float32 master weights and Adam state),
for `--steps` updates each, the two in parallel processes of `--threads` threads, and
records each run's dev NLL at every `--valid-every` updates and its training time. Speed is
`train_speed.py`'s job (its `aiayn_bf16` system); this script answers whether bfloat16
learns as well per update. Needs the prepared corpus (`aiayn prepare multi30k`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from results import add_arguments, emit

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16")


def command(precision: str, args) -> list[str]:
    return [sys.executable, "-m", "aiayn", "train", str(ROOT / "configs" / "multi30k.yaml"),
            f"data.dir={args.data}", f"train.out_dir={args.out / precision}",
            f"train.precision={precision}", f"train.max_steps={args.steps}",
            "train.max_time_minutes=0", "train.save_every_minutes=0",
            f"train.valid_every_steps={args.valid_every}", *args.overrides]  # fmt: skip


def curve(run: Path) -> dict:
    """A run's dev NLL per validation and its training seconds, from its train_log.jsonl."""
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    valid = [{"step": e["step"], "dev_nll": round(e["nll"], 4)} for e in events if e["event"] == "valid"]
    end = next(e for e in events if e["event"] == "end")
    start = next(e for e in events if e["event"] == "start")
    return {"precision": start.get("precision"), "dev": valid, "elapsed_s": end["elapsed_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "multi30k")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--valid-every", type=int, default=25)
    parser.add_argument("--threads", type=int, default=1, help="per run (both run at once)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "precision-curves")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    add_arguments(parser)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    runs = [subprocess.Popen(command(p, args), env=env, stdout=subprocess.DEVNULL) for p in PRECISIONS]
    if any(run.wait() for run in runs):
        raise SystemExit("a training run failed (see its train_log.jsonl under --out)")
    curves = {p: curve(args.out / p) for p in PRECISIONS}
    fp32, bf16 = (curves[p]["dev"][-1]["dev_nll"] for p in PRECISIONS)
    emit(__file__, {"config": "configs/multi30k.yaml", "steps": args.steps, "curves": curves,
                    "final_dev_nll_bf16_minus_fp32": round(bf16 - fp32, 4),
                    "max_abs_dev_nll_difference": round(max(
                        abs(a["dev_nll"] - b["dev_nll"])
                        for a, b in zip(curves["fp32"]["dev"], curves["bf16"]["dev"])), 4)},
         args, also_loads=("aiayn.cli", "aiayn.train.trainer"))  # the `aiayn train` runs'  # fmt: skip


if __name__ == "__main__":
    main()
