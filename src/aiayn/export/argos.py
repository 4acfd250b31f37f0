"""`aiayn export --to argos`: a checkpoint as an Argos Translate package, the model format
that LibreTranslate serves.

An Argos package (OUT.argosmodel) is a zip archive of one directory, which Argos's
`package.install_from_path` unpacks into its packages directory:

    translate-en_de-aiayn-SHA/      (SHA: the first 8 hex digits of the weights' sha256)
        metadata.json        the language pair (Argos and LibreTranslate find models by it)
        model/               the CTranslate2 model (`export.ctranslate2.model_spec`)
        sentencepiece.model  the tokenizer Argos applies to both sides: aiayn's joint BPE
        spacy/               a blank spaCy pipeline: Argos's sentence splitter, offline
        README.md, aiayn-export.json

Argos encodes each sentence with `sentencepiece.model`, CTranslate2 appends the eos
(`add_source_eos`) and decodes from `<s>`, as aiayn does, so with beam 1 and float32
products (ARGOS_BEAM_SIZE=1, ARGOS_COMPUTE_TYPE=float32) Argos picks aiayn's greedy tokens.
Its beam search is its own: a length penalty of length ** 0.2 (aiayn: ((5 + length) / 6) **
alpha, sec. 6.1), no minimum length.

Argos splits text into sentences first. By default (ARGOS_CHUNK_TYPE unset) it runs MiniSBD,
which downloads a model for the source language the first time; with ARGOS_CHUNK_TYPE=SPACY
it loads the package's `spacy/` pipeline and adds spaCy's rule-based sentencizer, which needs
nothing from the network.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from aiayn.atomic_dir import umask
from aiayn.checkpoint import Checkpoint, load_checkpoint
from aiayn.errors import ExportError
from aiayn.export.common import check_output, refuse_unrepresentable, write_marker
from aiayn.export.ctranslate2 import AiaynConverter, check_quantization
from aiayn.export.ctranslate2 import unrepresentable as ct2_unrepresentable

TARGET = "Argos Translate"
PACKAGE_FORMAT = "1.9"  # the Argos version whose package layout this is (Argos does not check it)
README = """\
# {src} -> {tgt}: an aiayn model as an Argos Translate package

Install it and translate with Argos Translate (pip install argostranslate):

```python
import argostranslate.package, argostranslate.translate

argostranslate.package.install_from_path("{out}")
print(argostranslate.translate.translate("The children open the door.", "{src}", "{tgt}"))
```

LibreTranslate serves it once installed. Argos splits text into sentences with MiniSBD,
which downloads its model on first use; offline, set ARGOS_CHUNK_TYPE=SPACY to use this
package's own spaCy pipeline. With ARGOS_BEAM_SIZE=1 and ARGOS_COMPUTE_TYPE=float32 it
translates as `aiayn translate --beam 1` does (its default compute type, auto, runs float32
weights in int8 where the CPU has int8 products).
"""


def unrepresentable(ckpt: Checkpoint) -> list[str]:
    """What an Argos package cannot hold: CTranslate2's limits, and separate vocabularies
    (Argos tokenizes both sides with one sentencepiece model)."""
    problems = ct2_unrepresentable(ckpt.model)
    if not ckpt.config.model.shared_vocab:
        problems.append("Argos tokenizes source and target with one sentencepiece model, "
                        "this model has one vocabulary for each")  # fmt: skip
    return problems


def metadata(src: str, tgt: str) -> dict:
    """metadata.json: the fields `argostranslate.package.Package` reads. Names are the codes
    (the checkpoint records codes only)."""
    return {"package_version": "1.0", "argos_version": PACKAGE_FORMAT, "type": "translate",
            "from_code": src, "from_name": src, "to_code": tgt, "to_name": tgt,
            "links": []}  # fmt: skip


def sentence_splitter(out: Path, lang: str) -> None:
    """A blank spaCy pipeline for `lang` (spaCy's multi-language one where it has none):
    Argos adds the rule-based "sentencizer" to it, so it must not hold one already."""
    import spacy

    try:
        nlp = spacy.blank(lang)
    except ImportError:  # no spacy.lang.<lang>
        nlp = spacy.blank("xx")
    nlp.to_disk(out)


def export_argos(
    checkpoint: str | Path, out: str | Path, quantization: str | None = None,
    force: bool = False, languages: tuple[str, str] | None = None,
) -> Path:  # fmt: skip
    """Write checkpoint directory `checkpoint` as Argos package file `out` (.argosmodel),
    weights stored as `quantization` (CTranslate2's names; None: float32), for
    `languages` (source, target) or those the checkpoint records."""
    check_quantization(quantization)
    ckpt = load_checkpoint(checkpoint)
    refuse_unrepresentable(TARGET, unrepresentable(ckpt))
    src, tgt = languages or ckpt.languages
    if not src or not tgt:
        raise ExportError(f"cannot export to {TARGET}: {checkpoint} records no languages "
                          "(neither its checkpoint.json nor its prepared data's manifest), "
                          "and Argos finds a model by its language pair; from Python, "
                          "pass languages=(SOURCE, TARGET)")  # fmt: skip
    out = Path(out)
    check_output(out, force)
    name = f"translate-{src}_{tgt}-aiayn-{str(ckpt.meta.get('weights_sha256', ''))[:8]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.tmp-", dir=out.parent) as tmp:
        package = Path(tmp) / name
        package.mkdir()
        AiaynConverter(ckpt).convert(str(package / "model"), quantization=quantization)
        (package / "sentencepiece.model").write_bytes(ckpt.tgt_vocab.model_bytes)
        sentence_splitter(package / "spacy", src)
        (package / "metadata.json").write_text(json.dumps(metadata(src, tgt), indent=1), "utf-8")
        (package / "README.md").write_text(README.format(src=src, tgt=tgt, out=out), "utf-8")
        write_marker(package, "argos", ckpt, quantization=quantization or "float32")
        archive = Path(tmp) / "package.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for file in sorted(package.rglob("*")):
                zf.write(file, file.relative_to(tmp))
        os.chmod(archive, 0o666 & ~umask())  # the user's usual modes, not mkdtemp's
        if out.is_dir():  # empty, or an earlier export's directory (`check_output`, force)
            shutil.rmtree(out)
        os.replace(archive, out)
    return out
