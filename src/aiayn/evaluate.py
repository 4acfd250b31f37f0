"""Scores of translations: sacreBLEU, chrF, and the paper's tokenized BLEU (sec. 6.1, Table 2).

Three figures, each labelled, because they are not comparable with one another:

- sacreBLEU (Post 2018): detokenized text, its own 13a tokenizer, mixed case; printed with
  its signature. This is the number to compare across papers and toolkits.
- chrF (Popovic 2015), sacrebleu's chrF2, also with its signature.
- tokenized BLEU, the paper's kind: tensor2tensor's `get_ende_bleu.sh` pipeline, i.e.
  Moses `replace-unicode-punctuation.perl` and `tokenizer.perl -l LANG` (via sacremoses),
  then for German the compound splitting "a-b" -> "a ##AT##-##AT## b" on hypotheses and
  references alike, then `multi-bleu.perl`: case-sensitive corpus BLEU on the whitespace
  tokens, no smoothing. (tensor2tensor read references already tokenized; we run the same
  steps on both sides.) This figure is higher than sacreBLEU, typically by ~1 point.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from aiayn.data import corpus
from aiayn.errors import DataError

_COMPOUND = re.compile(r"(\S)-(\S)")


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 file (plain or gzip, checked as the corpus reader checks) as the
    `sacrebleu` command reads them: split on "\\n" only, trailing whitespace removed."""
    return [line.rstrip() for line in corpus.read_lines(path)]


def split_compounds(text: str) -> str:
    """Compound splitting, "a-b" -> "a ##AT##-##AT## b", as tensor2tensor's
    `perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`.

    Matches do not overlap, as in Perl: "a-b-c" -> "a ##AT##-##AT## b-c".
    """
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def moses_tokenize(lines: Sequence[str], lang: str, compounds: bool) -> list[str]:
    """replace-unicode-punctuation.perl + tokenizer.perl -l `lang` (+ compound splitting)."""
    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    out = []
    for line in lines:
        tokens = tokenizer.tokenize(normalizer.replace_unicode_punct(line), return_str=True)
        out.append(split_compounds(tokens) if compounds else tokens)
    return out


def tokenized_bleu(
    hyps: Sequence[str], refs: Sequence[str], lang: str, compounds: bool | None = None
) -> Any:
    """The paper's BLEU (see the module doc) as a sacrebleu `BLEUScore`.

    `compounds` None: split compounds for German (`lang` "de") only, as tensor2tensor did.
    multi-bleu.perl = sacrebleu on pre-tokenized text with no smoothing: BLEU = BP *
    exp(mean log p_n), n = 1..4, 0 when any p_n is 0.
    """
    compounds = lang == "de" if compounds is None else compounds
    bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    return bleu.corpus_score(
        moses_tokenize(hyps, lang, compounds), [moses_tokenize(refs, lang, compounds)]
    )


def score(hyps: Sequence[str], refs: Sequence[str], lang: str = "de") -> dict[str, Any]:
    """All three scores of `hyps` against one reference each, as a JSON-ready dict."""
    if len(hyps) != len(refs):
        raise DataError(f"{len(hyps)} hypotheses but {len(refs)} references: counts must match")
    if not refs:
        raise DataError("no references to score against")
    bleu, chrf = BLEU(), CHRF()
    sacre, chr_f = bleu.corpus_score(hyps, [refs]), chrf.corpus_score(hyps, [refs])
    compounds = lang == "de"
    tok = tokenized_bleu(hyps, refs, lang, compounds)
    return {
        "sentences": len(refs),
        "sacrebleu": {
            "score": sacre.score, "signature": str(bleu.get_signature()),
            "precisions": sacre.precisions, "bp": sacre.bp,
            "sys_len": sacre.sys_len, "ref_len": sacre.ref_len,
        },
        "chrf": {"score": chr_f.score, "signature": str(chrf.get_signature())},
        "tokenized_bleu": {
            "score": tok.score, "precisions": tok.precisions, "bp": tok.bp,
            "lang": lang, "compound_splitting": compounds,
            "method": f"Moses replace-unicode-punctuation + tokenizer -l {lang}"
            + (" + ##AT## compound splitting" if compounds else "") + " + multi-bleu",
        },
    }  # fmt: skip


def format_report(report: dict[str, Any]) -> str:
    """Text lines, each labelled; the last is `BLEU <sacreBLEU score>`."""
    s, c, t = report["sacrebleu"], report["chrf"], report["tokenized_bleu"]
    precisions = "/".join(f"{p:.1f}" for p in s["precisions"])
    return "\n".join(
        [
            f"sentences        {report['sentences']}",
            f"sacreBLEU        {s['score']:.2f}  {precisions} (BP {s['bp']:.3f})  {s['signature']}",
            f"chrF             {c['score']:.2f}  {c['signature']}",
            f"tokenized BLEU   {t['score']:.2f}  (the paper's kind: {t['method']})",
            f"BLEU {s['score']:.2f}",
        ]
    )


def target_language(ref: str | Path, lang: str | None = None) -> str:
    """The language of the tokenized BLEU: `lang`, else the references' suffix when it is a
    two-letter code (x.de, x.de.gz -> de), else "en"."""
    if lang:
        return lang
    path = Path(ref)
    suffix = (path.with_suffix("") if path.suffix == ".gz" else path).suffix.lstrip(".")
    return suffix if suffix.isalpha() and len(suffix) == 2 else "en"


def evaluate_files(
    ref: str | Path, hyp: str | Path | None = None, src: str | Path | None = None,
    translate: Callable[[list[str]], list[str]] | None = None, hyp_out: str | Path | None = None,
    lang: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """`aiayn evaluate`: the scores (`score`) of the translations in `hyp`, or of `src`
    translated by `translate` (then also written to `hyp_out`, one line each), against `ref`."""
    from aiayn.translate import one_line

    if hyp_out:
        # An --hyp-out that cannot be written fails before translating; opened to append, so
        # that a run failing later leaves an existing file as it was.
        open(hyp_out, "a", encoding="utf-8").close()
    refs = read_lines(ref)
    if hyp is not None:
        hyps = read_lines(hyp)
    else:
        sources = read_lines(src)
        if len(sources) != len(refs):  # before translating, not after minutes of it
            raise DataError(
                f"{src} has {len(sources)} lines but {ref} has {len(refs)}: "
                "each source line needs one reference line"
            )
        # as `read_lines` would read them back from --hyp-out: one line each, right-stripped
        hyps = [one_line(h).rstrip() for h in translate(sources)]
    if hyp_out:
        Path(hyp_out).write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    return score(hyps, refs, target_language(ref, lang))
