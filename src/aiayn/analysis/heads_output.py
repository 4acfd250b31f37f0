"""`aiayn heads`'s outputs: the text table, the JSON and a PNG grid of layers x heads, and
the JSON read back (`read_report`) for `aiayn serve --heads`, whose web page draws the grid.

The grid has a panel per kind of attention (encoder self, decoder self, encoder-decoder),
a cell per head: its colour the dev BLEU lost when it alone is masked (without references,
its mean attention distance), its text that number and what the head mostly looks at
(`prev`, `same`, `next`, `eos`, `punct`: a share above one half) or its distance in words.
"""

from __future__ import annotations

import json
from pathlib import Path

from aiayn.analysis.heads import STATS, Head, HeadReport, analyse_heads
from aiayn.attention_plot import _write_atomic
from aiayn.attention_view import KINDS
from aiayn.data.corpus import read_lines
from aiayn.errors import ConfigError, DataError
from aiayn.json_schema import COUNT, NUMBER, STRING, array, fits, obj
from aiayn.jsonfile import read_object
from aiayn.translate import Translator

TITLES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention",
          "cross": "encoder-decoder attention"}  # fmt: skip
TAGS = {"previous": "prev", "same": "same", "next": "next", "eos": "eos", "punctuation": "punct"}

# The report's shape, once: `read_report` checks files against it, `aiayn serve` publishes it.
_ROW = (
    {"kind": {"enum": list(KINDS)}, "layer": COUNT, "head": COUNT}
    | {name: NUMBER for name in STATS}
    | {"importance": {"type": ["number", "null"], "description": "dev BLEU lost when masked"}}
)  # fmt: skip
WRITTEN_HEAD = obj(_ROW, tuple(_ROW))  # a row as `aiayn heads --json` writes it
HEAD = obj(  # a row as `read_report` gives it back (GET /heads)
    _ROW | {"behaviour": {**STRING, "description": "what it mostly looks at, or its distance"}},
    (*_ROW, "behaviour"),
)  # fmt: skip
HEADS = obj(
    {"sentences": {"type": "integer"}, "layers": COUNT, "heads": COUNT,
     "bleu": {"type": ["number", "null"]}, "rows": array(HEAD)},
    ("sentences", "layers", "heads", "rows"),
)  # fmt: skip


def behaviour(stats: dict[str, float]) -> str:
    """A head's short label: what holds more than half its attention, else its distance."""
    share, name = max((stats[k], k) for k in TAGS)
    return TAGS[name] if share > 0.5 else f"d {stats['distance']:.1f}"


def read_report(path: str | Path, layers: int, heads: int) -> dict:
    """The JSON that `aiayn heads --json` wrote, checked against a model of `layers` layers of
    `heads` heads: every kind, layer and head once, each with its statistics (numbers) and
    importance (a number, or null for all). Each row gains its `behaviour` label, so that the
    web page's grid says what the PNG's does; the result fits `HEADS`, the schema that
    GET /heads publishes. A ConfigError names what does not fit."""
    path = Path(path)
    data = read_object(path, ConfigError)
    if (data.get("layers"), data.get("heads")) != (layers, heads):
        raise ConfigError(f"{path} describes {data.get('layers')} layers of {data.get('heads')} "
                          f"heads; the model has {layers} of {heads}")  # fmt: skip
    rows, seen = data.get("rows"), set()
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: no rows (is it the JSON of `aiayn heads --json`?)")
    for row in rows:
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: a row is not an object: {row!r:.60}")
        key = (row.get("kind"), row.get("layer"), row.get("head"))
        if not fits(row, WRITTEN_HEAD) or key[1] > layers or key[2] > heads or key in seen:
            raise ConfigError(f"{path}: row {row!r:.120} is not a head of this model with "
                              "its statistics, or is there twice")  # fmt: skip
        seen.add(key)
        row["behaviour"] = behaviour(row)
    if len(seen) != len(KINDS) * layers * heads:
        raise ConfigError(f"{path}: {len(seen)} heads; the model has "
                          f"{len(KINDS) * layers * heads} ({len(KINDS)} kinds x {layers} "
                          f"layers x {heads} heads)")  # fmt: skip
    if len({row["importance"] is None for row in rows}) > 1:
        raise ConfigError(f"{path}: some heads have an importance and some none")
    if not fits(data, HEADS):  # what is left: `sentences` and `bleu`
        raise ConfigError(f"{path}: its sentences (an integer) or bleu (a number or null) is "
                          "missing or of another type")  # fmt: skip
    return data


def write_grid(report: HeadReport, path: str | Path) -> None:
    """The PNG grid of `report` (see the module's docstring)."""
    from matplotlib.figure import Figure  # the plot extra; no pyplot, no global state

    by_importance = report.importance is not None
    distance = {h: s["distance"] for h, s in report.stats.items()}
    values = report.importance if by_importance else distance
    bound = max([abs(v) for v in values.values()] + [1e-9])
    height = 0.9 + 0.55 * report.layers * max(1, report.heads / 6)
    fig = Figure(figsize=(1.0 + 3.2 * len(KINDS), height), layout="constrained")
    axes = fig.subplots(1, len(KINDS), squeeze=False)[0]
    for ax, kind in zip(axes, KINDS):
        grid = [[values[Head(kind, l, h)] for h in range(report.heads)]
                for l in range(report.layers)]  # fmt: skip
        image = ax.imshow(grid, cmap="RdBu_r" if by_importance else "Blues", aspect="auto",
                          vmin=-bound if by_importance else 0.0, vmax=bound)  # fmt: skip
        for l in range(report.layers):
            for h in range(report.heads):
                head = Head(kind, l, h)
                number = f"{values[head]:+.1f}" if by_importance else ""
                ax.text(h, l, f"{number}\n{behaviour(report.stats[head])}".strip(), ha="center",
                        va="center", fontsize=6)  # fmt: skip
        ax.set_xticks(range(report.heads), [str(h + 1) for h in range(report.heads)], fontsize=7)
        ax.set_yticks(range(report.layers), [str(l + 1) for l in range(report.layers)], fontsize=7)
        ax.set(xlabel="head", ylabel="layer", title=TITLES[kind])
    label = "BLEU lost when masked" if by_importance else "mean distance, words"
    fig.colorbar(image, ax=list(axes), label=label, shrink=0.8)
    fig.suptitle(f"attention heads over {report.sentences} sentences", fontsize=10)
    fig.savefig(path, format="png", dpi=110, metadata={"Software": None})


def run_heads(
    translator: Translator, src: str | Path, ref: str | Path | None = None, lines: int = 0,
    json_out: str | Path | None = None, png_out: str | Path | None = None, group: int = 8,
) -> HeadReport:  # fmt: skip
    """`aiayn heads`: the first `lines` (0: all) sentences of `src` (and of `ref`, which
    adds each head's importance) analysed; JSON and the PNG grid written where asked."""
    sources = list(read_lines(src))[: lines or None]
    refs = None if ref is None else list(read_lines(ref))[: lines or None]
    if refs is not None and len(refs) != len(sources):
        raise DataError(f"{src} has {len(sources)} lines but {ref} has {len(refs)}")
    if not sources:
        raise DataError(f"{src}: no sentences")
    report = analyse_heads(translator, sources, refs, group)
    if json_out is not None:
        text = json.dumps(report.to_json(), indent=1) + "\n"
        _write_atomic(Path(json_out), lambda p: p.write_text(text, encoding="utf-8"))
    if png_out is not None:
        _write_atomic(Path(png_out), lambda p: write_grid(report, p))
    return report
