"""A trained model taken elsewhere: a checkpoint exported to CTranslate2 (`ctranslate2.py`),
to a HuggingFace `MarianMTModel` directory (`huggingface.py`), each through that library's
own API, or to an Argos Translate package for LibreTranslate (`argos.py`, through the
CTranslate2 export). Each reads the checkpoint's weights as saved, so an export is the same
whether or not the fast path (`aiayn.fast`) is used for aiayn's own decoding.

    export_checkpoint("runs/mine/avg5", "ctranslate2", "deploy/ct2", quantization="int8")
    export_checkpoint("runs/mine/avg5", "huggingface", "deploy/hf")
    export_checkpoint("runs/mine/avg5", "argos", "deploy/en_de.argosmodel", "int8")

The libraries are the optional extra `aiayn[export]` (and spaCy, from `aiayn[argos]`, for
the Argos package's sentence splitter).
"""

from __future__ import annotations

from pathlib import Path

from aiayn.errors import ExportError

TARGETS = ("ctranslate2", "huggingface", "argos")
QUANTIZED = ("ctranslate2", "argos")  # the targets that take CTranslate2's weight types


def export_checkpoint(
    checkpoint: str | Path, target: str, out: str | Path, quantization: str | None = None,
    force: bool = False,
) -> Path:  # fmt: skip
    """Write checkpoint directory `checkpoint` as a `target` model directory `out` (for
    argos, a package file); `quantization` (CTranslate2's weight types) applies to
    ctranslate2 and argos only."""
    if target not in TARGETS:
        raise ExportError(f"unknown export target {target!r}; choose one of {', '.join(TARGETS)}")
    if quantization is not None and target not in QUANTIZED:
        raise ExportError(f"--quantization applies to {' and '.join(QUANTIZED)} exports, "
                          f"not {target}")  # fmt: skip
    extra = "argos" if target == "argos" else "export"
    try:
        if target == "ctranslate2":
            from aiayn.export.ctranslate2 import export_ctranslate2

            return export_ctranslate2(checkpoint, out, quantization, force)
        if target == "argos":
            from aiayn.export.argos import export_argos

            return export_argos(checkpoint, out, quantization, force)
        from aiayn.export.huggingface import export_huggingface
    except ImportError as err:
        raise ExportError(
            f"exporting to {target} needs {err.name}: pip install 'aiayn[{extra}]'"
        ) from err
    return export_huggingface(checkpoint, out, force)
