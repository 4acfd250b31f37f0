"""The way in: another library's trained model as an aiayn checkpoint, the inverse of
`aiayn.export`. A HuggingFace `MarianMTModel` directory (the OPUS-MT models) is the one
source (`huggingface.py`); the checkpoint then translates, serves, shows its attention,
exports and fine-tunes (`train --init-from`) as any other.

    import_model("opus-mt-en-de", "huggingface", "runs/opus-en-de")
"""

from __future__ import annotations

from pathlib import Path

from aiayn.errors import ModelImportError

SOURCES = ("huggingface",)


def import_model(directory: str | Path, source: str, out: str | Path, force: bool = False) -> Path:
    """Write `source` model directory `directory` as checkpoint directory `out`."""
    if source not in SOURCES:
        choices = ", ".join(SOURCES)
        raise ModelImportError(f"unknown import source {source!r}; choose one of {choices}")
    from aiayn.convert.huggingface import import_huggingface

    return import_huggingface(directory, out, force)
