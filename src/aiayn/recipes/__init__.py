"""Known corpora (Multi30k, WMT14 En-De / En-Fr, constituency parsing) and `prepare_any`,
what `aiayn prepare` runs: a named recipe, or the user's own files.

    prepare_any(None, "data/mine", {"vocab_size": 2000}, train="corpus/train", valid="corpus/valid")
    prepare_any("multi30k", "data/multi30k", {}, from_dir="raw/multi30k")
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aiayn.errors import ConfigError

RECIPES = ("multi30k", "wmt14-en-de", "wmt14-en-fr", "parse")


def prepare_any(
    recipe: str | None, out: str, changes: dict[str, Any], *, train: str | None = None,
    valid: str | None = None, test: str | None = None, tsv: str | None = None,
    tmx: str | None = None, from_dir: str | None = None,
) -> None:  # fmt: skip
    """Prepare `out` from a known `recipe` (None: the user's own files `train`, `tsv` or
    `tmx`, `valid`, `test`); `changes`: `PrepareOptions` fields that override the recipe's own.
    A recipe reads its own files (`from_dir`: raw files already on disk, else downloaded);
    the parsing recipe reads tree files as `train`, `valid`, `test`."""
    own_files = [train, tsv, tmx, valid, test]
    if recipe == "parse":
        from aiayn.parsing import prepare as parsing

        languages = "src" in changes or "tgt" in changes
        if train is None or valid is None or tsv or tmx or from_dir or languages:
            raise ConfigError("parse: give --train TREES --valid TREES [--test TREES] only")
        options = replace(parsing.OPTIONS, **changes)
        parsing.prepare_parse(train=train, valid=valid, test=test, out=out, options=options)
    elif recipe is None:
        from aiayn.data.prepare import prepare
        from aiayn.data.prepare_options import PrepareOptions

        no_vocab = changes.get("vocab_size") is None and changes.get("vocab_from") is None
        if valid is None or no_vocab or sum(f is not None for f in (train, tsv, tmx)) != 1:
            raise ConfigError("give --train PREFIX (or --tsv FILE, or --tmx FILE), --valid "
                              "PREFIX, --vocab-size N (or --vocab-from CKPT)")  # fmt: skip
        prepare(train=train, tsv=tsv, tmx=tmx, valid=valid, test=test, out=out,
                options=PrepareOptions(**changes))  # fmt: skip
    elif any(f is not None for f in own_files):
        raise ConfigError(f"{recipe} reads its own files; drop --train/--valid/--test/--tsv/--tmx")
    elif recipe == "multi30k":
        from aiayn.recipes import multi30k

        options = replace(multi30k.OPTIONS, **changes)  # checked before any download
        raw = from_dir or multi30k.download(f"{out}-raw")
        multi30k.prepare_multi30k(raw, out, options)
    else:
        from aiayn.recipes import wmt14

        if "src" in changes or "tgt" in changes:
            raise ConfigError(f"{recipe} fixes the languages; drop --src/--tgt")
        options = replace(wmt14.task(recipe).options, **changes)
        wmt14.prepare_wmt14(recipe, out, raw_dir=from_dir, options=options)
