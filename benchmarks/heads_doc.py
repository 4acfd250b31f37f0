"""docs/heads.md: what a trained model's attention heads do, with the paper's Figures 3-5
drawn for it.

    .venv/bin/python benchmarks/heads_doc.py --checkpoint runs/bench-multi30k/avg5x2
        [--raw ../shared/data/multi30k] [--lines 0] [--out docs]

Runs `aiayn heads` on the dev set (`val`; the test set is never read): each head's
statistics and the dev BLEU lost when it alone is masked, and the grid of layers x heads.
Then, on two sentences made to hold what the paper's figures show, a long-distance
dependency (a verb far from its subject, Figure 3) and an anaphora (a pronoun and the noun
it refers to, Figure 4), it draws with `aiayn attention` the layers of the three most
important heads and of the longest-range encoder head, and states, from the weights, where
each probe word's attention goes: in the longest-range head, and in the encoder head that
gives the probe's partner the largest share. Whether a head "follows" the dependency is
decided by the numbers (the partner gets the word's largest share, or not), not by eye.

Writes `<out>/heads.md` and its pictures under `<out>/heads/`, and the figures it states as
a result file (`results.py`) beside the other benchmarks'.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from aiayn.analysis.heads import Head, analyse_heads, piece_text, word_numbers
from aiayn.analysis.heads_output import TITLES, behaviour, write_grid
from aiayn.attention_plot import write_attention
from aiayn.attention_view import explain
from aiayn.translate import Translator
from multi30k import ROOT, SHARED, split
from results import add_arguments, emit

# (what it shows, the sentence, the probe word, its partner): each word once in its sentence
SENTENCES = (
    ("a long-distance dependency: the verb and its subject, a relative clause between them",
     "A woman who is holding a small baby in her arms walks down the busy street.", "walks",
     "woman"),
    ("an anaphora: the pronoun and the noun it refers to",
     "The little girl shows her father the picture that she painted.", "she", "girl"),
)  # fmt: skip
TOP = 3  # the most important heads drawn


def words(pieces: list[str]) -> list[str]:
    """The words of sentencepiece pieces (`word_numbers`, `piece_text`)."""
    out: list[str] = []
    for number, piece in zip(word_numbers(pieces), pieces):
        if number == len(out):
            out.append("")
        out[number] += piece_text(piece)
    return out


def word_weights(weights: torch.Tensor, pieces: list[str]) -> torch.Tensor:
    """A self-attention's (len, len) weights over pieces -> (words, words): a word's row
    the mean of its pieces' rows, a key word the sum of its pieces' columns."""
    numbers = torch.tensor(word_numbers(pieces))
    member = torch.nn.functional.one_hot(numbers).double()  # (len, words)
    summed = member.T @ weights.double() @ member  # (words, words)
    return summed / member.sum(0)[:, None]


def probe(translator: Translator, text: str, word: str, partner: str,
          heads: list[Head]) -> tuple[dict, Head]:  # fmt: skip
    """Where `word`'s attention goes in the encoder heads `heads` and in the encoder head
    that gives `partner` the most (returned beside), for the model's translation of `text`."""
    maps = explain(translator, text)
    names = words(maps.source)
    lowered = [w.lower().strip(".,") for w in names]
    q, p = lowered.index(word.lower()), lowered.index(partner.lower())
    per_head = {}
    layers, n_heads = maps.encoder.shape[:2]
    for layer in range(layers):
        for head in range(n_heads):
            w = word_weights(maps.encoder[layer, head], maps.source)[q]  # (words,)
            top = int(w.argmax())
            per_head[Head("encoder", layer, head)] = {
                "to_partner": round(float(w[p]), 3), "largest": names[top],
                "largest_share": round(float(w[top]), 3), "follows": top == p}  # fmt: skip
    best = max(per_head, key=lambda h: per_head[h]["to_partner"])
    shown = list(dict.fromkeys([*heads, best]))
    return {"text": text, "word": word, "partner": partner, "distance_words": abs(q - p),
            "translation": translator.translate([text])[0], "best_head": best.name(),
            "heads": {h.name(): per_head[h] for h in shown}}, best  # fmt: skip


def pictures(translator: Translator, heads: list[Head], out: Path) -> dict[str, list[str]]:
    """For each sentence, `aiayn attention`'s PNG of each (kind, layer) of `heads`."""
    drawn: dict[str, list[str]] = {}
    for n, (_, text, _, _) in enumerate(SENTENCES):
        for kind, layer in dict.fromkeys((h.kind, h.layer) for h in heads):
            name = f"heads/sentence{n + 1}_{kind}_layer{layer + 1}.png"
            write_attention(translator, text, out / name, "png", kind=kind, layer=layer + 1)
            drawn.setdefault(text, []).append(name)
    return drawn


def analyse(args) -> dict:
    translator = Translator.from_checkpoint(args.checkpoint, args.device)
    sources, refs = (side[: args.lines or None] for side in split(args.raw, "valid"))
    report = analyse_heads(translator, sources, refs, args.group)
    (args.out / "heads").mkdir(parents=True, exist_ok=True)
    write_grid(report, args.out / "heads" / "grid.png")
    ranked = sorted(report.stats, key=lambda h: -report.importance[h])[:TOP]
    encoder = [h for h in report.stats if h.kind == "encoder"]
    longest = max(encoder, key=lambda h: report.stats[h]["distance"])
    probes, best = zip(*(probe(translator, text, word, partner, [longest])
                         for _, text, word, partner in SENTENCES))  # fmt: skip
    drawn = pictures(translator, list(dict.fromkeys([*ranked, longest, *best])), args.out)
    rows = {(r["kind"], r["layer"], r["head"]): r for r in report.rows()}
    return {"checkpoint": str(args.checkpoint), "dev_set": "val", "sentences": len(sources),
            "bleu": report.bleu, "heads": report.to_json()["rows"],
            "most_important": [rows[h.kind, h.layer + 1, h.head + 1] for h in ranked],
            "longest_encoder": rows["encoder", longest.layer + 1, longest.head + 1],
            "probes": [{**p, "what": what, "pictures": drawn[p["text"]]}
                       for p, (what, *_) in zip(probes, SENTENCES)]}  # fmt: skip


def _head_line(r: dict) -> str:
    shares = ("distance", "entropy", "previous", "same", "next", "eos", "punctuation")
    cells = " | ".join(f"{r[k]:.2f}" for k in shares)
    return (f"| {TITLES[r['kind']]}, layer {r['layer']}, head {r['head']} | "
            f"{r['importance']:+.2f} | {cells} | {behaviour(r)} |")


def render(result: dict, source: str) -> str:
    """heads.md from `result` (what `analyse` found) and where it came from."""
    head = ["| head | BLEU lost | distance | entropy | prev | same | next | eos | punct | mostly |",
            "|---" * 10 + "|"]  # fmt: skip
    longest = result["longest_encoder"]
    lines = [
        "# What the attention heads of a trained model do", "",
        f"Generated by `benchmarks/heads_doc.py` from `{result['checkpoint']}` ({source}), on "
        f"the first {result['sentences']} sentences of the dev set (`val`), where the model "
        f"scores {result['bleu']:.2f} sacreBLEU unmasked. `aiayn heads` gives each head's "
        "mean attention distance in words, the entropy of its weights (nats) and its shares "
        "on the previous, same and next word, on the sentence boundary and on punctuation, "
        "over the model's own translations; and the BLEU lost when that head alone is masked "
        "at inference (Michel et al., 2019). In the grid the colour is the BLEU lost.", "",
        "![heads](heads/grid.png)", "",
        f"## The {len(result['most_important'])} most important heads", "", *head,
        *[_head_line(r) for r in result["most_important"]], "",
        "## The longest-range encoder head", "",
        f"Encoder layer {longest['layer']}, head {longest['head']} looks on average "
        f"{longest['distance']:.2f} words away from the word it serves:", "", *head,
        _head_line(longest), "",
        "## Two sentences (the paper's Figures 3-5)", "",
    ]
    for p in result["probes"]:
        lines += [f"### {p['what']}", "", f"> {p['text']}", "",
                  f"The model's translation: *{p['translation']}*", "",
                  f"Probe: where *{p['word']}* looks, and how much on *{p['partner']}*, "
                  f"{p['distance_words']} words away.", ""]  # fmt: skip
        for name, h in p["heads"].items():
            best = " (the encoder head that gives it the largest share)" * (name == p["best_head"])
            verdict = (
                "it is the largest share of the word's attention: this head follows the link."
                if h["follows"] else f"the largest share, {h['largest_share']:.2f}, goes to "
                f"*{h['largest']}*: this head does not follow the link."
            )  # fmt: skip
            lines.append(f"- {name}{best}: *{p['word']}* gives {h['to_partner']:.2f} of its "
                         f"attention to *{p['partner']}*; {verdict}")  # fmt: skip
        lines += ["", *[f"![{name}]({name})" for name in p["pictures"]], ""]
    lines += [
        "## What this shows and what it does not", "",
        "The statements above are computed from the weights by the script, not read off the "
        "pictures. A head's statistics are averages over every word of every sentence, and "
        "its importance is what masking it alone costs: heads that back each other up each "
        "look unimportant alone. A weight says where a head reads from, not what the model "
        "does with it; a link the encoder does not draw may still be made through the layers "
        "or the decoder. Two sentences are anecdotes: the grid and the tables are the "
        "measurement.", "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--raw", type=Path, default=SHARED, help="the raw Multi30k files")
    parser.add_argument("--lines", type=int, default=0, help="the first N dev pairs (0: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--group", type=int, default=8, help="masked heads per search")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_arguments(parser)
    args = parser.parse_args(argv)
    result = analyse(args)
    written = emit(__file__, result, args)
    source = f"result file `benchmarks/results/{written.name}`" if written else "no result file"
    (args.out / "heads.md").write_text(render(result, source), encoding="utf-8")


if __name__ == "__main__":
    main()
