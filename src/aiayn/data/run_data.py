"""A training run's data, opened from the directory `aiayn prepare` wrote (sec. 5.1): the
vocabularies, the train and dev splits, and this rank's token-budget batch sampler.

    data = load_run_data(config, rank=0, world_size=1)
    batch = next(data.micro_batches())             # a `Batch`, from the sampler's position

Checks that would otherwise fail hours into a run (a dev example longer than the batch
budget, an example beyond learned positions) are made here, before the first update.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from aiayn.config import Config
from aiayn.data.batching import Batch, TokenBatchSampler, collate, special_ids
from aiayn.data.binarize import BinarizedDataset, load_manifest, load_vocabs
from aiayn.data.marian_vocab import vocab_options
from aiayn.data.vocab import Vocab
from aiayn.errors import ConfigError, DataError


@dataclass
class RunData:
    """The prepared data of a run: vocabularies, train/valid splits, this rank's batches."""

    config: Config  # the run's config, model vocabulary sizes and special ids from the data
    src_vocab: Vocab
    tgt_vocab: Vocab
    train: BinarizedDataset
    valid: BinarizedDataset | None
    sampler: TokenBatchSampler
    languages: dict[str, str | None]  # {"source": "en", "target": "de"}: saved in checkpoints

    @property
    def vocabs(self) -> tuple[Vocab, Vocab]:
        return self.src_vocab, self.tgt_vocab

    def micro_batches(self) -> Iterator[Batch]:
        """This rank's training batches, epoch after epoch, from the sampler's position."""
        while True:
            for indices in self.sampler:
                examples = [self.train[int(i)] for i in indices]
                yield collate(examples, *special_ids(self.config.model), ids=indices)

    def epochs_done(self) -> int:
        sampler = self.sampler
        return sampler.epoch + int(sampler.index >= len(sampler))


def load_run_data(config: Config, rank: int = 0, world_size: int = 1) -> RunData:
    """Open `config.data.dir`; the model's vocabulary sizes, special ids and vocabulary
    format are set to the data's."""
    if not config.data.dir:
        raise ConfigError("set data.dir to a directory made by `aiayn prepare`")
    manifest = load_manifest(config.data.dir)
    src_vocab, tgt_vocab = load_vocabs(config.data.dir)
    joint = src_vocab.id_space == tgt_vocab.id_space and manifest["vocab"].get("joint", True)
    model = dataclasses.replace(
        config.model, vocab_size=tgt_vocab.size, src_vocab_size=None if joint else src_vocab.size,
        **vocab_options(tgt_vocab),
    )  # fmt: skip
    config = dataclasses.replace(config, model=model)
    train = BinarizedDataset(config.data.dir, "train")
    valid = None
    if "valid" in manifest["splits"]:
        valid = BinarizedDataset(config.data.dir, "valid")
        valid = valid if len(valid) else None
    for dataset in (train, valid):
        if dataset is not None:
            dataset.check_ids(src_vocab.size, tgt_vocab.size)
    _check_lengths(config, train, valid)
    sampler = TokenBatchSampler(
        train.src_lengths, train.tgt_lengths, config.data.max_tokens, seed=config.data.seed,
        rank=rank, world_size=world_size,
    )  # fmt: skip
    languages = {"source": manifest.get("src_lang"), "target": manifest.get("tgt_lang")}
    return RunData(config, src_vocab, tgt_vocab, train, valid, sampler, languages)


def _check_lengths(config: Config, train: BinarizedDataset, valid: BinarizedDataset | None) -> None:
    """Refuse, before the first update, examples the run could not take later: a valid one
    longer than data.max_tokens (the valid split is never filtered, and would otherwise fail
    at the first validation, hours in), and any longer than learned positions reach."""
    model = config.model
    limits = [("data.max_tokens", config.data.max_tokens, [("valid", valid)])]
    if model.positional == "learned":
        limits.append(("model.max_len", model.max_len, [("train", train), ("valid", valid)]))
    for key, limit, splits in limits:
        for split, dataset in splits:
            if dataset is None:
                continue
            for side in ("src", "tgt"):
                sizes = getattr(dataset, f"{side}_lengths").astype(int) + 1  # + eos, or bos
                too_long = (sizes > limit).nonzero()[0]
                if len(too_long):
                    i = int(too_long[0])
                    line = f" (line {i + 1})" if split == "valid" else ""  # never filtered
                    raise DataError(
                        f"{config.data.dir}: {split} example {i}{line} has {sizes[i]} {side} "
                        f"positions "
                        f"(eos or bos included), more than {key}={limit} ({len(too_long)} such "
                        f"examples); raise {key}, or shorten them and run `aiayn prepare` again"
                    )
