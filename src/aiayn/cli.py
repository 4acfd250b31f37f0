"""`aiayn <command>`: a thin command line; every command calls a library function.

Each command is a pair of functions: `_add_<name>(subparsers)` declares its arguments and
`_run_<name>(args)` calls the library. `_build_parser` lists the commands in one place.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import warnings

from aiayn.data.prepare_options import CLEANING, CleanOptions, default
from aiayn.errors import AiaynError, ConfigError, out_of_memory_message


REFERENCE_HELP = "the core alone, without the fast path (aiayn.fast): the code as the paper writes it"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiayn", description="The Transformer of 'Attention Is All You Need'."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # One line per command, in the order `aiayn --help` shows them.
    _add_demo(sub)
    _add_info(sub)
    _add_prepare(sub)
    _add_train(sub)
    _add_average(sub)
    _add_translate(sub)
    _add_evaluate(sub)
    _add_score(sub)
    _add_export(sub)
    _add_import(sub)
    _add_attention(sub)
    _add_heads(sub)
    _add_serve(sub)
    _add_parse(sub)
    return parser


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="offline: generate En-De data, prepare, train, translate, print BLEU"
    )
    p.add_argument("--out", help="run directory (default: runs/demo, runs/demo-parse)")
    p.add_argument("--tiny", "--fast", dest="tiny", action="store_true",
                   help="a tiny run of seconds, for tests (--fast: its old name; the fast path "
                   "is on either way)")  # fmt: skip
    p.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    p.add_argument("--task", choices=("translate", "parse"), default="translate",
                   help="En-De translation, or English constituency parsing (sec. 6.3)")
    p.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    if args.task == "parse":
        from aiayn.parsing.demo import run_parse_demo

        run_parse_demo(args.out or "runs/demo-parse", fast=args.tiny)
    else:
        from aiayn.demo import run_demo

        run_demo(args.out or "runs/demo", fast=args.tiny, reference=args.reference)
    return 0


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print a model's hyperparameters and parameter count")
    p.add_argument("config", metavar="PRESET_OR_CONFIG", help="a preset name or a YAML file")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--vocab-size", type=int, help="vocabulary size (default: the config's)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--flops", action="store_true",
                   help="also the training FLOPs per target token and over the config's run")
    p.set_defaults(run=_run_info)


def _run_info(args: argparse.Namespace) -> int:
    from aiayn.info import model_info, text_lines

    overrides = list(args.overrides)
    if args.vocab_size is not None:
        overrides.append(f"model.vocab_size={args.vocab_size}")
    info = model_info(args.config, overrides, flops=args.flops)
    print(json.dumps(info) if args.json else "\n".join(text_lines(info)))
    return 0


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    from aiayn.recipes import RECIPES

    p = sub.add_parser(
        "prepare",
        help="text pairs -> checked corpus, BPE vocabulary, binarized shards",
        description="Check and filter a parallel corpus, train its BPE vocabulary and write "
        "memory-mapped token shards to --out. Name a RECIPE, or give your own files with "
        "--train/--valid/--vocab-size.",
    )
    p.add_argument(
        "recipe", nargs="?", choices=RECIPES, metavar="RECIPE",
        help=f"a known corpus: {', '.join(RECIPES)}",
    )  # fmt: skip
    p.add_argument("--out", required=True, metavar="DIR", help="the directory to write")
    p.add_argument("--from", dest="from_dir", metavar="DIR", help="recipe: raw text already here")
    train = p.add_mutually_exclusive_group()
    train.add_argument("--train", metavar="PREFIX", help="PREFIX.SRC + PREFIX.TGT (or .gz), or a .tsv")
    train.add_argument("--tsv", metavar="FILE", help="training pairs as one two-column TSV")
    train.add_argument("--tmx", metavar="FILE", help="training pairs as one TMX file "
                       "(.tmx or .tmx.gz, as OPUS serves them; sides by their xml:lang)")
    p.add_argument("--valid", metavar="PREFIX", help="validation pairs (never filtered)")
    p.add_argument("--test", metavar="PREFIX", help="test pairs (never filtered)")
    p.add_argument("--src", help=f"source language suffix (default: {default('src')})")
    p.add_argument("--tgt", help=f"target language suffix (default: {default('tgt')})")
    p.add_argument("--vocab-size", type=int, metavar="N", help="BPE vocabulary size")
    p.add_argument(
        "--separate-vocabs", action="store_true",
        help="one vocabulary per language (the paper shares one; embeddings are then untied)",
    )
    p.add_argument("--max-tokens-per-side", type=int, metavar="N",
                   help=f"training filter ({default('max_tokens_per_side')})")
    p.add_argument("--max-len-ratio", type=float, metavar="R", help="training filter (off)")
    p.add_argument("--workers", type=int, metavar="N", help="encoding processes (all cores)")
    p.add_argument("--vocab-sample", type=int, metavar="N",
                   help=f"vocabulary training sample ({default('vocab_sample_sentences'):,})")
    p.add_argument("--seed", type=int, help=f"seed of the vocabulary sample ({default('seed')})")
    p.add_argument("--vocab-from", metavar="CKPT",
                   help="encode with checkpoint CKPT's vocabulary, no new BPE (fine-tuning)")
    _add_cleaning(p)
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress bars, no report")
    p.set_defaults(run=_run_prepare)


def _add_cleaning(p: argparse.ArgumentParser) -> None:
    """`prepare`'s options for cleaning the training pairs (aiayn.data.clean)."""
    clean = CleanOptions()
    g = p.add_argument_group("cleaning of the training pairs (docs/cleaning.md)")
    g.add_argument("--skip-filter", action="append", default=[], metavar="NAME[,NAME]",
                   help=f"do not run these filters ({', '.join(CLEANING)}; all; none: run "
                   "every one, also for a recipe, which does not clean by default)")
    g.add_argument("--max-char-ratio", type=float, metavar="R",
                   help=f"char_ratio: longer side / shorter in characters ({clean.max_char_ratio})")
    g.add_argument("--min-letter-share", type=float, metavar="F",
                   help=f"chars: letters among a side's characters ({clean.min_letter_share})")
    g.add_argument("--dry-run", action="store_true",
                   help="clean the training pairs and print the report; write no directory")
    g.add_argument("--removed", metavar="FILE",
                   help="write every removed pair as TSV: line, filter, source, target")
    g.add_argument("--allow-heavy-filtering", action="store_true",
                   help="go on when one filter removes more than half the pairs")


def _clean_options(args: argparse.Namespace) -> CleanOptions | None:
    """The CleanOptions the cleaning flags ask for; None if no flag is given (then a recipe
    keeps its own: the standard corpora are not cleaned)."""
    numbers = {"max_char_ratio": args.max_char_ratio, "min_letter_share": args.min_letter_share}
    numbers = {k: v for k, v in numbers.items() if v is not None}
    if not (args.skip_filter or numbers or args.allow_heavy_filtering):
        return None
    skip = [name for value in args.skip_filter for name in value.split(",") if name != "none"]
    skip = list(CLEANING) if "all" in skip else skip
    return CleanOptions(skip=tuple(filter(None, skip)), allow_heavy=args.allow_heavy_filtering,
                        **numbers)  # fmt: skip


def _run_prepare(args: argparse.Namespace) -> int:
    from aiayn.recipes import prepare_any

    options = {"vocab_size": args.vocab_size, "src": args.src, "tgt": args.tgt,
               "max_tokens_per_side": args.max_tokens_per_side, "max_len_ratio": args.max_len_ratio,
               "workers": args.workers, "vocab_sample_sentences": args.vocab_sample,
               "seed": args.seed, "joint_vocab": False if args.separate_vocabs else None,
               "vocab_from": args.vocab_from, "removed": args.removed}  # fmt: skip
    changes = {key: value for key, value in options.items() if value is not None}
    clean = _clean_options(args)
    if clean is not None:  # else the defaults, or a recipe's own (which do not clean)
        changes["clean"] = clean
    if args.dry_run:
        changes["dry_run"] = True
    if args.vocab_from is not None:  # the checkpoint's vocabulary, not a recipe's size
        changes["vocab_size"] = args.vocab_size
    prepare_any(args.recipe, args.out, {**changes, "overwrite": args.force, "quiet": args.quiet},
                train=args.train, valid=args.valid, test=args.test, tsv=args.tsv,
                tmx=args.tmx, from_dir=args.from_dir)  # fmt: skip
    return 0


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (sec. 5): Adam + warm-up, label smoothing, checkpoints, resume",
        description="Train on the prepared data in data.dir; checkpoints, train_log.jsonl and "
        "a summary go to train.out_dir. Ctrl-C saves a checkpoint and exits with code 130. "
        "Many GPUs: torchrun --nproc_per_node N -m aiayn train CONFIG ...",
    )
    p.add_argument("config", nargs="?", metavar="PRESET_OR_CONFIG",
                   help="a preset name or a YAML file (default with --resume: the checkpoint's)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("--resume", metavar="DIR",
                   help="continue from a checkpoint, or from a run's out_dir (its newest)")
    p.add_argument("--init-from", metavar="CKPT",
                   help="a new run from CKPT's weights (fine-tuning): fresh optimizer, schedule, "
                   "data order; data prepared with --vocab-from CKPT, the same architecture")
    p.add_argument("--reference", action="store_true", help=REFERENCE_HELP + " (train.fast=false)")
    p.set_defaults(run=_run_train)  # fmt: skip


def _run_train(args: argparse.Namespace) -> int:
    from aiayn.train.resume import run_config
    from aiayn.train.trainer import train

    config = run_config(args.config, list(args.overrides), args.resume, args.reference)
    result = train(config, resume=args.resume, init_from=args.init_from)
    return 128 + result.signal if result.interrupted and result.signal else 0


def _add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "average",
        help="average checkpoints into one (sec. 6.1: the last 5 for base, 20 for big)",
        description="Average the weights of the last N checkpoints of a run (--last N DIR) or "
        "of the given ones (--inputs A B ...) into a new checkpoint --out.",
    )
    p.add_argument("dir", nargs="?", metavar="DIR", help="with --last: a run's out_dir")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--last", type=int, metavar="N", help="the newest N step checkpoints of DIR")
    which.add_argument("--inputs", nargs="+", metavar="CKPT", help="checkpoint directories")
    p.add_argument("--out", required=True, metavar="DIR", help="the checkpoint to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.set_defaults(run=_run_average)


def _run_average(args: argparse.Namespace) -> int:
    from aiayn.average import average_run

    paths = average_run(args.out, args.last, args.dir, args.inputs, args.force)
    print(f"averaged {len(paths)} checkpoints into {args.out}: {', '.join(p.name for p in paths)}")
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a checkpoint as a CTranslate2 or HuggingFace MarianMT model directory",
        description="Export a checkpoint to another library: --to ctranslate2 (with "
        "--quantization int8, float16, ...) or --to huggingface (a MarianMTModel "
        "directory that transformers.pipeline('translation', model=OUT) loads).",
    )
    p.add_argument("out", metavar="OUT", help="the model directory to write")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint directory")
    p.add_argument("--to", required=True, choices=("ctranslate2", "huggingface", "argos"),
                   help="the library: CTranslate2, or HuggingFace transformers (MarianMT)")
    p.add_argument("--quantization", metavar="TYPE",
                   help="ctranslate2 only: int8, int8_float32, int8_float16, int8_bfloat16, "
                   "int16, float16, bfloat16 or float32 (the default)")  # fmt: skip
    p.add_argument("--force", action="store_true", help="replace OUT if an export wrote it")
    p.set_defaults(run=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from aiayn.export import export_checkpoint

    out = export_checkpoint(args.checkpoint, args.to, args.out, args.quantization, args.force)
    print(f"exported {args.checkpoint} to {args.to}: {out} (see {out}/README.md or "
          "docs/export.md, Deploy)")  # fmt: skip
    return 0


def _add_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="write a HuggingFace MarianMT (OPUS-MT) model directory as an aiayn checkpoint",
        description="Import a model directory of another library as a checkpoint OUT: --from "
        "huggingface reads a MarianMTModel directory (config.json, model.safetensors or "
        "pytorch_model.bin, source.spm, target.spm, vocab.json), such as an OPUS-MT model's.",
    )
    p.add_argument("dir", metavar="DIR", help="the model directory to read")
    p.add_argument("out", metavar="OUT", help="the checkpoint directory to write")
    p.add_argument("--from", dest="source", required=True, choices=("huggingface",),
                   help="the library: HuggingFace transformers (MarianMT)")
    p.add_argument("--force", action="store_true", help="replace OUT if it is a checkpoint")
    p.set_defaults(run=_run_import)


def _run_import(args: argparse.Namespace) -> int:
    from aiayn.convert import import_model

    out = import_model(args.dir, args.source, args.out, args.force)
    print(f"imported {args.dir} from {args.source}: {out}")
    return 0


def _add_decode_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `translate` and `evaluate`; unset ones keep the checkpoint's."""
    p.add_argument("--checkpoint", metavar="DIR", help="a checkpoint directory (or an average)")
    p.add_argument("--beam", type=int, help="beam size (4; 1 = greedy)")
    p.add_argument("--alpha", type=float, help="length penalty exponent (0.6)")
    p.add_argument("--max-len-offset", type=int, metavar="N", help="max output = input + N (50)")
    p.add_argument("--min-len", type=int, metavar="N",
                   help="tokens before eos at least (1, so no translation is empty)")  # fmt: skip
    p.add_argument("--max-tokens", type=int, default=4096, metavar="N",
                   help="source tokens per batch, padding included (4096)")  # fmt: skip
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (cpu)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="(float32)")
    p.add_argument("--int8", action="store_true",
                   help="int8 weights for faster CPU decoding (CPU, float32 only)")  # fmt: skip
    _add_compile_option(p, "a compiled one is in the cache")
    p.add_argument("--reference", action="store_true", help=REFERENCE_HELP)


def _add_compile_option(p: argparse.ArgumentParser, auto: str) -> None:
    from aiayn.config import COMPILE

    p.add_argument("--compile", choices=COMPILE, default="auto",
                   help="run each decoder step as one compiled function (float32 CPU models, --int8 too): "
                   f"auto = where {auto}; always = compile it now if it is not (tens of "
                   "seconds once, kept in the cache for later runs); never = not (auto)")  # fmt: skip


def _translator(args: argparse.Namespace, nbest: int | None = None):
    from aiayn.translate import Translator

    return Translator.from_checkpoint(
        args.checkpoint, device=args.device, dtype=args.dtype, beam=args.beam, alpha=args.alpha,
        max_len_offset=args.max_len_offset, min_len=args.min_len, nbest=nbest,
        max_tokens=args.max_tokens, int8=args.int8, reference=args.reference,
        compile=args.compile,
    )  # fmt: skip


def _add_translate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "translate",
        help="translate text with a checkpoint (beam search, sec. 6.1)",
        description="Translate stdin (or -i FILE) to stdout (or -o FILE), one output line per "
        "input line, in chunks that are written and flushed as they are done; an existing -o "
        "FILE keeps its old content until every line is done, then is replaced. With --nbest K "
        "each input gives K lines `index ||| translation ||| score` (index from 0; score = "
        "log P / length penalty). --split sentences cuts each line into sentences and puts "
        "their translations back on it; --alignment appends ` ||| 0-0 1-2 ...` to each line "
        "(source-target word pairs, Moses / fast_align's format).",
    )
    _add_decode_options(p)
    p.add_argument("--nbest", type=int, metavar="K", help="K best per input (needs K <= beam)")
    p.add_argument("--split", choices=("lines", "sentences"), default="lines",
                   help="lines: each line is one segment (the default, for test sets); "
                   "sentences: each line a paragraph of sentences")  # fmt: skip
    p.add_argument("--alignment", action="store_true",
                   help="append ` ||| i-j ...` word alignments (from the encoder-decoder attention)")
    p.add_argument("--src-lang", default="en", metavar="CODE",
                   help="the input's language, for --split sentences (en)")
    p.add_argument("-i", "--input", metavar="FILE", help="UTF-8 text, one sentence a line")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write (stdout)")
    p.add_argument("--chunk-lines", type=int, metavar="N",
                   help="lines read per chunk (256; 1 when stdin is a terminal)")  # fmt: skip
    p.set_defaults(run=_run_translate)


def _run_translate(args: argparse.Namespace) -> int:
    from aiayn.text.documents import translate_files

    if args.checkpoint is None:
        raise ConfigError("give --checkpoint DIR")
    translate_files(_translator(args, args.nbest), args.input, args.output, args.chunk_lines,
                    split=args.split, alignment=args.alignment, nbest=args.nbest is not None,
                    lang=args.src_lang)  # fmt: skip
    return 0


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="sacreBLEU, chrF and the paper's tokenized BLEU of a checkpoint or a file",
        description="Translate --src with --checkpoint (or take --hyp, translations already "
        "made) and score them against --ref. The last line is `BLEU <sacreBLEU>`.",
    )
    _add_decode_options(p)
    p.add_argument("--src", metavar="FILE", help="source sentences to translate")
    p.add_argument("--hyp", metavar="FILE", help="score these translations (no checkpoint)")
    p.add_argument("--ref", required=True, metavar="FILE", help="one reference per line")
    p.add_argument("--hyp-out", metavar="FILE", help="also write the translations here")
    p.add_argument(
        "--lang",
        help="target language of the tokenized BLEU (--ref's suffix: x.de, x.de.gz -> de; "
        "else en)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--task", choices=("translate", "parse"), default="translate",
                   help="parse: --ref and --hyp hold trees; EVALB's figures (COLLINS.prm) and a "
                   "strict F1 (sec. 6.3)")
    p.set_defaults(run=_run_evaluate)


def _run_evaluate(args: argparse.Namespace) -> int:
    from aiayn.evaluate import evaluate_files, format_report
    from aiayn.outfile import refuse_output_among_inputs

    if (args.hyp is None) == (args.checkpoint is None) or (args.checkpoint and not args.src):
        raise ConfigError("give either --checkpoint DIR --src FILE, or --hyp FILE")
    refuse_output_among_inputs(args.hyp_out, args.src, args.ref, args.hyp)
    if args.task == "parse":
        return _run_evaluate_parse(args)
    report = evaluate_files(args.ref, args.hyp, args.src, lambda lines: _translator(args).translate(lines),
                            args.hyp_out, args.lang)  # fmt: skip
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def _add_score(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="log-probability of each (source, translation) pair under a checkpoint",
        description="One line per pair of --src and --hyp lines: log P(hyp | src) (eos "
        "included), its mean per token, and log P / length penalty (the beam search's score), "
        "tab-separated; --json: one JSON object per line, with each token's log-probability.",
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="a checkpoint directory")
    p.add_argument("--src", required=True, metavar="FILE", help="source sentences")
    p.add_argument("--hyp", required=True, metavar="FILE", help="their translations")
    p.add_argument("--alpha", type=float, help="length penalty exponent (the checkpoint's)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (cpu)")
    p.add_argument("--reference", action="store_true", help=REFERENCE_HELP)
    p.add_argument("--json", action="store_true", help="JSON lines instead of text")
    p.set_defaults(run=_run_score)


def _run_score(args: argparse.Namespace) -> int:
    from aiayn.scores import score_files

    for line in score_files(args.checkpoint, args.src, args.hyp, args.alpha, args.device,
                            args.reference, args.json):  # fmt: skip
        print(line)
    return 0


def _add_attention(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attention",
        help="the attention of every layer and head for one sentence: html, png or json",
        description="Translate SENTENCE (or take --target) and write its attention weights: "
        "html (one self-contained page: lines as in the paper's figures, heat maps of layers x "
        "heads), png (heat maps of --kind, one --layer or all) or json (bertviz's layout).",
    )
    _add_decode_options(p)
    p.add_argument("sentence", metavar="SENTENCE", help="the source sentence")
    p.add_argument("--target", metavar="TEXT", help="a given translation (default: the model's)")
    p.add_argument("--format", default="html", choices=("html", "png", "json"), help="(html)")
    p.add_argument("--kind", default="cross", choices=("encoder", "decoder", "cross"),
                   help="png: which attention (cross = encoder-decoder)")  # fmt: skip
    p.add_argument("--layer", type=int, metavar="N", help="png: only layer N (1-based)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write")
    p.set_defaults(run=_run_attention)


def _run_attention(args: argparse.Namespace) -> int:
    from aiayn.attention_plot import write_attention

    if args.checkpoint is None:
        raise ConfigError("give --checkpoint DIR")
    maps = write_attention(
        _translator(args), args.sentence, args.output, args.format, args.target, args.kind,
        args.layer,
    )  # fmt: skip
    print(f"wrote {args.output}: {len(maps.source)} source and {len(maps.target)} target pieces")
    return 0


def _add_heads(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "heads", help="what each attention head does, and the dev BLEU lost without it",
        description="Per layer, head and kind: mean attention distance in words, entropy, the "
        "share on the previous / same / next word, on eos and on punctuation, over the model's "
        "translations of --src; with --ref, the BLEU lost when that head alone is masked.",
    )  # fmt: skip
    _add_decode_options(p)
    p.add_argument("--src", required=True, metavar="FILE", help="source sentences")
    p.add_argument("--ref", metavar="FILE", help="their references: adds each head's importance")
    p.add_argument("--lines", type=int, default=0, metavar="N", help="the first N only (all)")
    p.add_argument("--group", type=int, default=8, metavar="G", help="masked heads per search (8)")
    p.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    p.add_argument("--png", metavar="FILE", help="also draw the grid of layers x heads")
    p.set_defaults(run=_run_heads)


def _run_heads(args: argparse.Namespace) -> int:
    from aiayn.analysis.heads_output import run_heads

    if args.checkpoint is None:
        raise ConfigError("give --checkpoint DIR")
    report = run_heads(_translator(args), args.src, args.ref, args.lines, args.json, args.png,
                       args.group)  # fmt: skip
    print(report.text())
    return 0


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a checkpoint over HTTP: JSON API, LibreTranslate's API, a web page",
        description="Serve --checkpoint (one or several) on http://HOST:PORT/ (needs the serve "
        "extra: pip install 'aiayn[serve]'). Concurrent requests are batched: what is queued "
        "when the model is free, up to --max-batch-tokens source tokens (--max-wait-ms holds "
        "the oldest back for company); --max-batch-tokens 1 serves one request at a time. "
        "GET / is a web page; POST /v1/translate and /translate (in "
        "LibreTranslate's shape) translate; GET /health, /ready and /info report.",
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", action="append",
                   help="a checkpoint directory; again for more models (each serves the pair "
                   "it records; a pair without a model goes through English), or a directory "
                   "of checkpoints, or a file listing them one a line")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (8000; 0 = any free one)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, ... (cpu)")
    p.add_argument("--int8", action="store_true", help="int8 weights (CPU, float32 only)")
    _add_compile_option(p, "one is in the cache, else compiled as the server warms up")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (torch's default)")
    from aiayn.serve.service import WORKERS, ServeConfig

    p.add_argument("--worker", choices=WORKERS, default=ServeConfig.worker,
                   help="where each model decodes: a process of its own, so that models and "
                   "the HTTP layer do not take turns on one interpreter (process), or a thread "
                   "of the server's (thread)")
    p.add_argument("--src-lang", help="source language code, if the checkpoint names none")
    p.add_argument("--tgt-lang", help="target language code, if the checkpoint names none")
    p.add_argument("--api-keys", metavar="FILE",
                   help="the API keys, one a line: KEY [REQUESTS_PER_MINUTE]")
    p.add_argument("--req-limit", type=int, metavar="N",
                   help="requests a minute per client without a key (no limit; 0: a key is needed)")
    p.add_argument("--heads", metavar="FILE", help="what each head does, from `aiayn heads "
                   "--json FILE` on this model: the web page draws its grid (GET /heads)")
    limits = (("max_batch_tokens", int, "padded source tokens per batch"),
              ("max_wait_ms", float, "wait for more requests to batch, in ms (0: batch what "
               "is queued when the model is free)"),
              ("max_queue", int, "sentences waiting before 503"),
              ("max_sentences", int, "sentences per request before 413"),
              ("max_sentence_tokens", int, "tokens of one sentence before 413"),
              ("max_body_bytes", int, "request body size before 413"),
              ("max_beam", int, "largest beam a request may ask for"),
              ("timeout_s", float, "seconds before a request gets 504"))  # fmt: skip
    for name, kind, text in limits:
        default = ServeConfig.__dataclass_fields__[name].default
        flag = "--timeout" if name == "timeout_s" else f"--{name.replace('_', '-')}"
        p.add_argument(flag, dest=name, type=kind, default=default, metavar="N",
                       help=f"{text} ({default})")  # fmt: skip
    p.set_defaults(run=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    import dataclasses

    from aiayn.serve.service import ServeConfig

    try:
        from aiayn.serve.app import serve
    except ImportError as err:
        raise ConfigError(f"aiayn serve needs the serve extra: pip install 'aiayn[serve]' ({err})")
    names = [f.name for f in dataclasses.fields(ServeConfig)]
    given = {n: getattr(args, n) for n in names if hasattr(args, n)}
    if len(given["checkpoint"]) == 1:
        given["checkpoint"] = given["checkpoint"][0]
    serve(ServeConfig(**given),
          announce=lambda line: print(line, flush=True))  # fmt: skip
    return 0


def _run_evaluate_parse(args: argparse.Namespace) -> int:
    from aiayn.parsing.parser import evaluate_parse

    report = evaluate_parse(args.ref, hyp=args.hyp, src=args.src, hyp_out=args.hyp_out,
                            translator=lambda: _translator(args), as_json=args.json)
    print(report)
    return 0


def _add_parse(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "parse",
        help="constituency parsing (sec. 6.3): tokenized sentences in, bracketed trees out",
        description="Parse stdin (or -i FILE), one tokenized sentence (words separated by "
        "spaces) a line, with a checkpoint trained on `aiayn prepare parse` data; writes one "
        "Penn Treebank tree per line to stdout (or -o FILE; an existing file is replaced only "
        "once every line is done). A blank line gives a blank line.",
    )
    _add_decode_options(p)
    p.add_argument("-i", "--input", metavar="FILE", help="UTF-8 text, one sentence a line")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write (stdout)")
    p.set_defaults(run=_run_parse)


def _run_parse(args: argparse.Namespace) -> int:
    from aiayn.parsing.parser import parse_files

    if args.checkpoint is None:
        raise ConfigError("give --checkpoint DIR")
    parse_files(_translator(args), args.input, args.output)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args, extra = parser.parse_known_args(argv)
    # `key=value` overrides may follow options (`aiayn info big --json d_ff=1024`), which
    # argparse leaves over; anything else left over is an error as usual.
    unknown = [a for a in extra if "=" not in a or a.startswith("-")]
    if unknown or (extra and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(unknown or extra)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    code = _run(args)
    if args.command == "train":
        from aiayn.train import distributed

        if distributed.launched_world_size() > 1:  # one of torchrun's ranks
            distributed.end_rank_process(code)
    return code


def _run(args: argparse.Namespace) -> int:
    """The command's exit status; the errors a user can act on become one line and 2, and
    warnings one line each, `aiayn <command>: warning: ...` (not Python's file, line and
    source line)."""
    with warnings.catch_warnings():  # the format only: a caller recording warnings still does
        python_format = warnings.formatwarning

        def one_line(message, category, *rest, **kwargs) -> str:
            if category is not UserWarning:  # torch's deprecations and the like: as Python says
                return python_format(message, category, *rest, **kwargs)
            return f"aiayn {args.command}: warning: {message}\n"

        warnings.formatwarning = one_line
        return _run_command(args)


def _run_command(args: argparse.Namespace) -> int:
    try:
        return int(args.run(args) or 0)
    except AiaynError as err:
        print(f"aiayn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left (`aiayn translate ... | head -3`): stop quietly, as Unix tools do,
        # and keep Python from failing again on flushing stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as err:  # a path the user gave that cannot be read or written
        where = f"{err.filename}: " if err.filename else ""
        print(f"aiayn {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as err:  # torch's CPU and CUDA allocators raise these
        message = out_of_memory_message(err, args.command)
        if message is None:
            raise
        print(f"aiayn {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # `train` saves on the first Ctrl-C; this is a second one
        print(f"aiayn {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
