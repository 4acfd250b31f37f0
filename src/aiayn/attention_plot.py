"""`aiayn attention`: one sentence's attention maps written as a page, a picture or JSON.

- html: one self-contained file (the data, plain JS and SVG inlined; nothing loaded from
  elsewhere, so it opens offline) with the view of the paper's Figures 3-5 and a heat-map
  grid of layers x heads (`web/attention.js`);
- png: the heat maps of one kind of attention, one layer or all, drawn with matplotlib;
- json: bertviz's layout (`attention_view.to_bertviz`), for bertviz's own views.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from pathlib import Path

from aiayn.atomic_dir import umask
from aiayn.attention_view import KINDS, AttentionMaps, explain, to_bertviz, to_json
from aiayn.errors import ConfigError
from aiayn.translate import Translator
from aiayn.web import page, script_json

FORMATS = ("html", "png", "json")


def render_html(maps: AttentionMaps, source_text: str, target_text: str) -> str:
    """The self-contained page of `maps`."""
    data = {**to_json(maps), "source_text": source_text, "target_text": target_text}
    return page("attention.html", DATA=script_json(data), TITLE=html.escape(source_text[:60]))


def render_png(maps: AttentionMaps, path: Path, kind: str = "cross", layer: int | None = None) -> None:
    """Heat maps of `kind`: one row per layer (or only `layer`), one column per head;
    queries down, keys across, darker = more attention."""
    from matplotlib.figure import Figure  # the plot extra; no pyplot, no global state

    weights = maps.kind(kind)  # (layers, heads, q_len, k_len)
    layers = range(weights.size(0)) if layer is None else [layer]
    queries, keys = maps.tokens(kind)
    heads = weights.size(1)
    width, height = 0.6 + 0.16 * len(keys), 0.6 + 0.16 * len(queries)  # inches per heat map
    fig = Figure(figsize=(width * heads + 1.0, height * len(layers) + 0.6), layout="constrained")
    axes = fig.subplots(len(layers), heads, squeeze=False)
    for row, l in enumerate(layers):
        for h in range(heads):
            ax = axes[row][h]
            ax.imshow(weights[l, h].numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(len(keys)), keys if row == len(layers) - 1 else [], rotation=90)
            ax.set_yticks(range(len(queries)), queries if h == 0 else [])
            ax.tick_params(labelsize=7)
            ax.set_title(f"layer {l + 1}, head {h + 1}", fontsize=8)
    fig.suptitle(f"{kind} attention", fontsize=10)
    fig.savefig(path, format="png", dpi=110)


def _write_atomic(path: Path, write) -> None:
    """Write through a temporary file beside `path`, renamed over it only when complete,
    so a failure leaves an existing file as it was."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_options(fmt: str, kind: str, layer: int | None, n_layers: int) -> None:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    if layer is not None and not 1 <= layer <= n_layers:
        raise ConfigError(f"--layer {layer} is outside the model's layers 1..{n_layers}")


def write_attention(
    translator: Translator,
    text: str,
    out: str | Path,
    fmt: str = "html",
    target: str | None = None,
    kind: str = "cross",
    layer: int | None = None,
) -> AttentionMaps:
    """Translate `text` (or take `target`), and write its attention to `out` as `fmt`.
    `kind` and `layer` (1-based; None: all) choose the png's heat maps."""
    check_options(fmt, kind, layer, translator.model.config.n_layers)
    if not text.strip():
        raise ConfigError("the source sentence is empty")
    if target is None:  # the model's own best translation, as the search found it
        hyps = translator.hypotheses([text])[0]
        ids = hyps[0].tokens if hyps else []
        maps, target = explain(translator, text, ids), translator.tgt_vocab.decode(ids)
    else:
        maps = explain(translator, text, target)
    out = Path(out)
    if fmt == "png":
        index = None if layer is None else layer - 1
        _write_atomic(out, lambda p: render_png(maps, p, kind, index))
    else:
        content = (
            render_html(maps, text, target) if fmt == "html" else json.dumps(to_bertviz(maps))
        )
        _write_atomic(out, lambda p: p.write_text(content, encoding="utf-8"))
    return maps
