"""`aiayn demo`: the whole pipeline, offline, on the embedded English->German corpus.

corpus (generated) -> joint BPE + shards (`prepare`) -> a small Transformer trained with the
paper's recipe (`train`) -> beam search on the test split (`Translator`) -> sacreBLEU.

The model is the paper's architecture at a size two CPU cores train in a few minutes
(`DEMO_MODEL`); the recipe is the paper's (Adam 0.9/0.98, eq. 3 with a short warm-up,
label smoothing 0.1, beam 4, alpha 0.6) except for the batch size and the schedule's
scale, which a model this small and a run this short need.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aiayn.average import average_checkpoints
from aiayn.config import Config, apply_overrides
from aiayn.data.demo_corpus import demo_splits, write_splits
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import PrepareOptions
from aiayn.errors import ConfigError
from aiayn.evaluate import score
from aiayn.train.run_dir import checkpoints_dir, step_checkpoints
from aiayn.train.trainer import train
from aiayn.translate import Translator

# A small Transformer: every part of sec. 3, scaled to fit a few CPU minutes.
DEMO_MODEL = [
    "model.d_model=128", "model.n_heads=4", "model.d_ff=512", "model.n_layers=3",
    # The paper's 0.1 regularises many epochs over a fixed corpus; the demo sees each of its
    # 100k generated pairs about twice, so dropout only slows learning (Table 3 row D
    # explores the same knob). It is also a third of a CPU forward pass at this size.
    "model.p_drop=0.0",
]  # fmt: skip
# The paper's recipe with a batch of 2k tokens and a warm-up scaled to a 900-step run.
# A step budget, not a clock, so that every machine trains the same model (a busy machine
# takes longer but ends with the same BLEU).
DEMO_TRAIN = [
    "data.max_tokens=2000", "train.update_tokens=2000", "train.warmup=800",
    "train.max_steps=900", "train.save_every_minutes=0",
    "train.save_every_steps=100", "train.keep_last=3", "train.valid_every_steps=300",
    "train.log_every_steps=50",
]  # fmt: skip
DEMO_AVERAGE = 3  # the final model averages the last 3 checkpoints (sec. 6.1 averages 5)
DEMO_SIZES = dict(n_train=100_000, n_valid=500, n_test=500)
# `--fast` (for tests): under a minute, not minutes; the pipeline is the same, and the
# model learns enough that its BLEU tells a trained model from an untrained one. Eq. 3 at
# d_model 64 with a warm-up of 50 peaks at a rate of 0.018: at that rate where 200 updates
# end depended on the seed and on the CPU's rounding (sacreBLEU 5 to 26 over six seeds);
# at half of it, 21 to 30 over eight (at a quarter, less learned in 200 updates), so that
# the tests' floor holds on any CPU.
FAST = [
    "model.d_model=64", "model.n_heads=4", "model.d_ff=128", "model.n_layers=1",
    "train.max_steps=200", "train.save_every_steps=20",
    "train.valid_every_steps=100", "train.warmup=50", "train.lr_scale=0.5",
]  # fmt: skip
FAST_SIZES = dict(n_train=2000, n_valid=100, n_test=100)


@dataclass
class DemoResult:
    bleu: float
    checkpoint: Path
    report: dict
    train_minutes: float


def demo_config(
    data_dir: Path, out: Path, fast: bool = False, reference: bool = False,
    changes: Sequence[str] = (),
) -> Config:  # fmt: skip
    """The demo's config; `changes`: overrides applied last (e.g. another model size)."""
    overrides = [f"data.dir={data_dir}", f"train.out_dir={out / 'train'}"]
    overrides += DEMO_MODEL + DEMO_TRAIN + (FAST if fast else [])
    overrides += ["train.fast=false"] if reference else []
    return apply_overrides(Config(), [*overrides, *changes])


def run_demo(
    out: str | Path = "runs/demo", fast: bool = False, examples: int = 5, reference: bool = False,
    changes: Sequence[str] = (),
) -> DemoResult:  # fmt: skip
    """Build the corpus, prepare, train, translate the test split and score it. `fast`: a
    tiny run of seconds (for tests); `reference`: the core alone, without `aiayn.fast`;
    `changes`: config overrides applied last (`demo_config`)."""
    out = _claim(Path(out))
    splits = demo_splits(**(FAST_SIZES if fast else DEMO_SIZES))
    say(f"[1/4] corpus: {len(splits.train)} train / {len(splits.valid)} valid / "
        f"{len(splits.test)} test English->German pairs, generated offline")
    prefixes = write_splits(splits, out / "corpus")
    data_dir = out / "data"
    options = PrepareOptions(vocab_size=1000 if fast else 2000, overwrite=True, quiet=True)
    prepare(train=prefixes["train"], valid=prefixes["valid"], test=prefixes["test"],
            out=data_dir, options=options)  # fmt: skip
    say(f"[2/4] joint BPE vocabulary and binarized shards in {data_dir}")
    config = demo_config(data_dir, out, fast, reference, changes)
    checkpoint, minutes = train_and_average(config, out)
    say(f"[4/4] translating the test split with beam {config.decode.beam}, alpha {config.decode.alpha}")
    translator = Translator.from_checkpoint(checkpoint, reference=reference)
    sources, references = zip(*splits.test)
    hypotheses = translator.translate(list(sources))
    report = score(hypotheses, list(references), lang="de")
    for src, hyp, ref in list(zip(sources, hypotheses, references))[:examples]:
        say(f"\n  EN   {src}\n  OURS {hyp}\n  REF  {ref}")
    bleu = report["sacrebleu"]["score"]
    say(f"\n{report['sacrebleu']['signature']}")
    say(f"chrF {report['chrf']['score']:.2f}   trained {minutes:.1f} min")
    say(f"checkpoint: {checkpoint}  (try: aiayn translate --checkpoint {checkpoint})")
    print(f"BLEU {bleu:.2f}", flush=True)
    return DemoResult(bleu, checkpoint, report, minutes)


def train_and_average(config: Config, out: Path) -> tuple[Path, float]:
    """Step [3/4] of a demo: a fresh training run in ``out/train``, then the average of its
    last `DEMO_AVERAGE` checkpoints in ``out/checkpoint``; returns it and the minutes trained."""
    say(f"[3/4] training a {config.model.n_layers}+{config.model.n_layers}-layer Transformer, "
        f"d_model {config.model.d_model}, on CPU")
    shutil.rmtree(out / "train", ignore_errors=True)  # a fresh run, not a resumed one
    start = time.monotonic()
    result = train(config)
    minutes = (time.monotonic() - start) / 60
    saved = step_checkpoints(checkpoints_dir(result.out_dir))  # [(step, path)], oldest first
    averaged = [path for _, path in saved[-DEMO_AVERAGE:]]
    checkpoint = average_checkpoints(averaged, out / "checkpoint")
    say(f"averaged the last {len(averaged)} checkpoints into {checkpoint}")
    return checkpoint, minutes


# Written into a demo's directory: a later demo may replace what is there, nothing else may.
MARKER = ".aiayn-demo"


def _claim(out: Path) -> Path:
    """`out`, made or found to be a demo's directory. A demo replaces its corpus, data, run
    and checkpoint on every run; it refuses a directory that holds anything else, so that
    `--out` naming another directory by mistake deletes nothing."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: not a directory")
    if out.is_dir() and any(out.iterdir()) and not _is_demos(out):
        raise ConfigError(
            f"--out {out}: the directory exists and is not a demo's (no {MARKER} in it); "
            "a demo replaces what it writes there, so give a new or empty directory"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by `aiayn demo`, which may replace this directory\n")
    return out


def _is_demos(out: Path) -> bool:
    """Marked by a demo, or a demo's from before the mark: only what a demo writes."""
    if (out / MARKER).is_file():
        return True
    names = {path.name for path in out.iterdir()}
    written = {"corpus", "data", "train", "checkpoint"}
    return names <= written and (out / "corpus" / "train.en").is_file()


def say(text: str) -> None:
    print(text, file=sys.stdout, flush=True)
