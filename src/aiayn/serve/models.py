"""Several checkpoints in one service: each model with its pair, and a request's route.

`aiayn serve --checkpoint A --checkpoint B ...` (or a directory of checkpoints, or a file
listing them) serves every model at once, each under the (source, target) pair its
checkpoint records. A request names a pair; `Models.route` gives the models that translate
it: the one model of that pair, or, where there is none but source -> English and
English -> target are served, those two, one after the other (pivoting through English,
as LibreTranslate does). Two models of one pair are an error at start, naming both.

A single model keeps the behaviour of a one-model server: where its checkpoint records no
languages (and no --src-lang / --tgt-lang gave them) it translates whatever pair is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiayn.checkpoint import CONFIG
from aiayn.errors import ConfigError

if TYPE_CHECKING:
    from aiayn.config import Config
    from aiayn.serve.batcher import Batcher

PIVOT = "en"  # the language a pair without its own model is translated through
Pair = tuple[str | None, str | None]


class NoRoute(ValueError):
    """No model, nor two through English, translates the pair asked for."""


def checkpoint_paths(given: str | Sequence[str]) -> list[str]:
    """The checkpoint directories `--checkpoint` names: each a checkpoint, a directory whose
    subdirectories are checkpoints, or a text file listing them (one a line, `#` comments,
    relative to the file)."""
    out: list[str] = []
    for entry in [given] if isinstance(given, str) else list(given):
        path = Path(entry)
        if path.is_file():
            lines = (line.split("#", 1)[0].strip() for line in path.read_text("utf-8").splitlines())
            listed = [str(path.parent / line) for line in lines if line]
            if not listed:
                raise ConfigError(f"--checkpoint {entry}: the file lists no checkpoint")
            out += listed
        elif path.is_dir() and not (path / CONFIG).is_file():
            found = sorted(str(d) for d in path.iterdir() if (d / CONFIG).is_file())
            if not found:
                raise ConfigError(f"--checkpoint {entry}: neither a checkpoint ({CONFIG} is "
                                  "missing) nor a directory of checkpoints")  # fmt: skip
            out += found
        else:
            out.append(entry)  # a checkpoint, or a path Checkpoint will say is wrong
    return out


@dataclass
class Model:
    """One checkpoint of the service: its pair, its batcher, and once loaded its encoder."""

    path: str
    config: Config
    pair: Pair
    batcher: Batcher | None = None
    # texts -> source ids (`translate.source_ids`), set once loaded: requests are encoded
    # in the server, before they queue, whichever process decodes them
    encode: Callable[[Sequence[str]], list[list[int]]] | None = None
    parameters: int | None = None  # counted by the worker
    search_kind: str | None = None  # what runs its search (`Translator.search_kind`), once loaded

    @property
    def name(self) -> str:
        """"en-de": its pair (the checkpoint's directory name where it records none)."""
        if None in self.pair:
            return Path(self.path).name
        return f"{self.pair[0]}-{self.pair[1]}"


def _arrow(pair: Pair) -> str:
    return f"{pair[0]} -> {pair[1]}"


class Models:
    """The service's models by pair, in the order given (the first is the default)."""

    def __init__(self, models: list[Model]) -> None:
        if not models:
            raise ConfigError("give --checkpoint DIR (one or more)")
        if len(models) > 1:
            for model in models:
                if None in model.pair:
                    raise ConfigError(f"{model.path} records no languages: serving several "
                                      "models needs each checkpoint's pair (train on prepared "
                                      "data that names them)")  # fmt: skip
        self.all = models
        self.by_pair: dict[Pair, Model] = {}
        for model in models:
            other = self.by_pair.get(model.pair)
            if other is not None:
                raise ConfigError(f"two models for {_arrow(model.pair)}: {other.path} and "
                                  f"{model.path}; serve one of them")  # fmt: skip
            self.by_pair[model.pair] = model

    @property
    def first(self) -> Model:
        return self.all[0]

    @property
    def sources(self) -> list[str]:
        """The languages the server translates from, in the models' order."""
        return list(dict.fromkeys(m.pair[0] for m in self.all if m.pair[0] is not None))

    def targets(self, source: str) -> list[str]:
        """The languages `source` is translated into, directly or through English."""
        direct = [t for (s, t) in self.by_pair if s == source]
        pivoted = [t for (s, t) in self.by_pair if s == PIVOT and (source, PIVOT) in self.by_pair]
        return [t for t in dict.fromkeys(direct + pivoted) if t not in (None, source)]

    def codes(self) -> tuple[list[str], list[str]]:
        """(every source, every target reached), for the API's schema."""
        targets = [t for s in self.sources for t in self.targets(s)]
        return self.sources, list(dict.fromkeys(targets))

    def route(self, source: str, target: str) -> list[Model]:
        """The models that translate `source` into `target`, in order: one, or two through
        English; NoRoute naming what is served if none do."""
        first = self.first
        if len(self.all) == 1 and None in first.pair:
            return [first]
        if (source, target) in self.by_pair:
            return [self.by_pair[(source, target)]]
        legs = self.by_pair.get((source, PIVOT)), self.by_pair.get((PIVOT, target))
        if source != target and None not in legs:
            return list(legs)
        if len(self.all) == 1:
            raise NoRoute(f"{source} -> {target} is not a pair this model translates: it "
                          f"translates {_arrow(first.pair)} only")  # fmt: skip
        served = ", ".join(_arrow(m.pair) for m in self.all)
        raise NoRoute(f"{source} -> {target} is not a pair this server translates, directly "
                      f"or through English ({PIVOT}): its models translate {served}")

    def languages(self, name) -> list[dict]:
        """LibreTranslate's `/languages`: each language, with the targets it reaches
        (sources first, in the models' order; then the languages only translated into).
        `name`: a code's English name."""
        if len(self.all) == 1 and None in self.first.pair:
            return []
        codes = list(dict.fromkeys([*self.sources, *(t for _, t in self.by_pair)]))
        return [{"code": c, "name": name(c), "targets": self.targets(c)} for c in codes]
