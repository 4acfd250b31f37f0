"""How closely `aiayn export`'s models translate like aiayn: greedy and beam search through
CTranslate2, HuggingFace MarianMT and Argos Translate against `aiayn translate`, and BLEU of
the int8 CTranslate2 export against float32.

    .venv/bin/python benchmarks/export_agreement.py --checkpoint runs/demo/checkpoint \
        --src runs/demo/corpus/test.en --ref runs/demo/corpus/test.de [--limit N]

The checkpoint is exported to CTranslate2 (float32 and int8 weights) and to MarianMT; every
system reads the same source lines through its own tokenizer (sentencepiece pieces for
CTranslate2, `MarianTokenizer` inside `pipeline("translation")`) and decodes with the
checkpoint's beam, alpha and min_len. Greedy decoding is the same rule everywhere, so its
translations should be identical. Beam search is not: each library divides a hypothesis's
log-probability by its own length penalty (CTranslate2 and transformers by length ** alpha,
aiayn by ((5 + length) / 6) ** alpha, Wu et al. 2016), and they finish hypotheses by
different rules, so beam translations may differ; "beam_alpha0" runs all three without a
length penalty, which removes the first cause; Argos Translate (the Argos package, through
its own installer and translator, offline) always uses its own penalty, length ** 0.2.
Prints one JSON object: the fraction of translations identical to aiayn's, and sacreBLEU of
each system.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from aiayn.checkpoint import load_checkpoint
from aiayn.evaluate import score
from aiayn.export import export_checkpoint
from aiayn.translate import Translator
from results import add_arguments, emit

OFFLINE = "http://127.0.0.1:9"  # a proxy on the discard port: nothing is fetched through it


def aiayn_translations(checkpoint: Path, sources: list[str], beam: int, alpha: float) -> list[str]:
    return Translator.from_checkpoint(checkpoint, beam=beam, alpha=alpha).translate(sources)


def by_limit(lengths: list[int], max_len_offset: int,
             translate: Callable[[list[int], int], list[str]]) -> list[str]:  # fmt: skip
    """Translations of sentences whose source lengths (eos included) are `lengths`, by
    `translate(indices, limit)`: one call per output limit, for the sentences of `indices`.

    aiayn's limit is per sentence (|Y| <= source length + `max_len_offset`, eos included,
    `decode.search.output_limits`) and the libraries' per call, so each call holds the
    sentences of one limit: a translation that runs to its limit (a loop) is then cut where
    aiayn cuts it, not at a longer batch-mate's. Their limit counts the tokens before the
    eos that aiayn puts last, so it is one less."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(n + max_len_offset - 1, []).append(i)
    out = [""] * len(lengths)
    for limit, indices in groups.items():
        for i, text in zip(indices, translate(indices, limit), strict=True):
            out[i] = text
    return out


def ct2_translations(
    model_dir: Path, checkpoint: Path, sources: list[str], beam: int, alpha: float,
    compute_type: str = "float32",
) -> list[str]:  # fmt: skip
    """CTranslate2 as the export's README.md says: the sentencepiece model shipped beside
    it for pieces in and text out; CTranslate2 appends the source eos itself. Limited as
    aiayn limits each sentence (`by_limit`)."""
    import ctranslate2
    import sentencepiece

    decode = load_checkpoint(checkpoint).config.decode
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / "vocab.model"))
    pieces = [sp.encode(text, out_type=str) for text in sources]
    translator = ctranslate2.Translator(str(model_dir), compute_type=compute_type, intra_threads=1)

    def translate(indices: list[int], limit: int) -> list[str]:
        results = translator.translate_batch(
            [pieces[i] for i in indices], beam_size=beam, length_penalty=alpha,
            min_decoding_length=decode.min_len, max_decoding_length=limit, max_batch_size=64,
        )  # fmt: skip
        return [sp.decode(r.hypotheses[0]) for r in results]

    return by_limit([len(p) + 1 for p in pieces], decode.max_len_offset, translate)  # + eos


def hf_translations(model_dir: Path, sources: list[str], beam: int, alpha: float,
                    max_len_offset: int) -> list[str]:  # fmt: skip
    """`transformers.pipeline("translation")` on the exported directory, limited as aiayn
    limits each sentence (`by_limit`)."""
    from transformers import pipeline

    pipe = pipeline("translation", model=str(model_dir), device="cpu")

    def translate(indices: list[int], limit: int) -> list[str]:
        found = pipe([sources[i] for i in indices], num_beams=beam, length_penalty=alpha,
                     max_new_tokens=limit, batch_size=32)  # fmt: skip
        return [item["translation_text"] for item in found]

    lengths = [len(ids) for ids in pipe.tokenizer(sources)["input_ids"]]  # eos included
    return by_limit(lengths, max_len_offset, translate)


# Argos Translate's own calls, as its README shows them, in a child process (Argos reads its
# settings from the environment when imported, and creates its directories under HOME).
ARGOS_CHILD = """
import json, sys
import argostranslate.package, argostranslate.translate
package, src, tgt, texts, out = sys.argv[1:]
argostranslate.package.install_from_path(package)
translation = argostranslate.translate.get_translation_from_codes(src, tgt)
with open(texts, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
    json.dump([translation.translate(text) for text in json.load(f)], g)
"""


def argos_environment(
    home: Path, beam: int, compute_type: str = "float32", threads: int = 1
) -> dict[str, str]:
    """Argos in `home` alone (settings, packages, caches), offline: every download goes to a
    closed port, and sentences are split by the package's spaCy pipeline. Argos's default
    compute type, "auto", runs a float32 model in int8 on CPUs that have int8 products.
    LibreTranslate reads the same settings."""
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
           "ARGOS_PACKAGES_DIR": str(home / "packages"), "ARGOS_CHUNK_TYPE": "SPACY",
           "ARGOS_BEAM_SIZE": str(beam), "ARGOS_COMPUTE_TYPE": compute_type,
           "ARGOS_DEVICE_TYPE": "cpu", "ARGOS_INTRA_THREADS": str(threads),
           "HTTP_PROXY": OFFLINE, "HTTPS_PROXY": OFFLINE, "http_proxy": OFFLINE,
           "https_proxy": OFFLINE}  # fmt: skip
    env.pop("NO_PROXY", None), env.pop("no_proxy", None)
    return env


def argos_translations(
    package: Path, sources: list[str], beam: int, home: Path, compute_type: str = "float32"
) -> list[str]:
    """Argos Translate's translations of `sources`, the package installed into `home` by its
    own `install_from_path`; beam 1 is greedy (ARGOS_BEAM_SIZE)."""
    with zipfile.ZipFile(package) as archive:
        meta = next(n for n in archive.namelist() if n.endswith("/metadata.json"))
        languages = json.loads(archive.read(meta))
    texts, out = home / "texts.json", home / "translations.json"
    home.mkdir(parents=True, exist_ok=True)
    texts.write_text(json.dumps(sources), "utf-8")
    command = [sys.executable, "-c", ARGOS_CHILD, str(package), languages["from_code"],
               languages["to_code"], str(texts), str(out)]  # fmt: skip
    env = argos_environment(home, beam, compute_type)
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"Argos Translate failed: {done.stderr[-2000:]}")
    return json.loads(out.read_text("utf-8"))


def identical(ours: list[str], theirs: list[str]) -> float:
    """Fraction of translations that are the same string."""
    return round(sum(a == b for a, b in zip(ours, theirs)) / len(ours), 4)


def agreement(checkpoint: Path, sources: list[str], refs: list[str], tmp: Path) -> dict:
    ckpt = load_checkpoint(checkpoint)
    decode = ckpt.config.decode
    beam, alpha, offset = decode.beam, decode.alpha, decode.max_len_offset
    ct2, ct2_int8, hf = tmp / "ct2", tmp / "ct2_int8", tmp / "hf"
    export_checkpoint(checkpoint, "ctranslate2", ct2)
    export_checkpoint(checkpoint, "ctranslate2", ct2_int8, quantization="int8")
    export_checkpoint(checkpoint, "huggingface", hf)
    argos = export_checkpoint(checkpoint, "argos", tmp / "model.argosmodel")
    report, bleu = {}, {}
    for name, (b, a) in {"greedy": (1, alpha), f"beam{beam}": (beam, alpha),
                         f"beam{beam}_alpha0": (beam, 0.0)}.items():  # fmt: skip
        ours = aiayn_translations(checkpoint, sources, b, a)
        systems = {"ctranslate2": ct2_translations(ct2, checkpoint, sources, b, a),
                   "transformers": hf_translations(hf, sources, b, a, offset),
                   "argos": argos_translations(argos, sources, b, tmp / name)}  # fmt: skip
        report[name] = {k: identical(ours, v) for k, v in systems.items()}
        if name == f"beam{beam}":
            int8 = ct2_translations(ct2_int8, checkpoint, sources, b, a, "int8")
            systems["ctranslate2_int8"] = int8
            systems["aiayn"] = ours
            bleu = {k: round(score(v, refs)["sacrebleu"]["score"], 2) for k, v in systems.items()}
    return {"identical_to_aiayn": report, f"bleu_beam{beam}_alpha{alpha}": bleu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--src", required=True, type=Path)
    parser.add_argument("--ref", required=True, type=Path)
    parser.add_argument("--limit", type=int, help="the first N lines only")
    add_arguments(parser)
    args = parser.parse_args()
    sources = args.src.read_text("utf-8").splitlines()[: args.limit]
    refs = args.ref.read_text("utf-8").splitlines()[: args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        result = agreement(args.checkpoint, sources, refs, Path(tmp))
    head = {"checkpoint": str(args.checkpoint), "sentences": len(sources)}
    emit(__file__, {**head, **result}, args)


if __name__ == "__main__":
    main()
