"""The generated parts of the READMEs and the documentation pages, and the plots, from the files
in `benchmarks/results/`.

    .venv/bin/python benchmarks/report.py [--check]

Writes, from the result files alone (see `results.py`), so that every figure the docs show
can be traced to the file, command and commit that measured it. Only results of committed
code are published (`provenance_problem`): a file whose code had uncommitted changes when the
run started or ended, or changed during it, is skipped with its reason printed, and the
newest result of committed code of the same command stands in its place (benchmarks with
none on a machine are named in one sentence, never as a table row). Files written before
`results.py` recorded provenance carry a `commit` and `dirty` that ignored untracked files
and were sometimes edited afterwards: they count as uncommitted. A published row is marked
stale when a file its run exercised differs now (in this checkout: HEAD in a clean one, so
a README regenerated with a change goes into the same commit) from the file at its commit;
a note added after the run (the record's `annotation`) is shown as such.
- between `<!-- report:begin NAME -->` and `<!-- report:end NAME -->` in the page that
  `READMES` names for NAME, the block NAME, its words from the Jinja2 template `NAME.md.j2`
  beside the pages (`docs/templates/`; `benchmarks/templates/` for benchmarks/README.md),
  its figures gathered here, its links relative to its page:
  `summary` (benchmarks/README.md): per machine, the headline figures of the latest result
  of each benchmark command (the same command run again on the same machine replaces the
  older one); `results` (README.md): the results table in short cells, whose BLEU rows come
  from the demos' and `multi30k.py`'s result files only; `results_details`
  (docs/results.md): the same rows with their runs, machines and result files;
  `extrapolation` (docs/experiments.md): what the latest `length_extrapolation.py` result
  shows, in words and a table; `table3` (docs/experiments.md): Table 3 re-run on Multi30k
  (`table3.py`), each row beside the paper's, bold where outside the base's noise, each
  update budget's BLEU a column, and the paper's claims held or not at each budget;
  `alignment` (docs/translate.md): the word alignment figures of the latest `alignment.py`
  result; `finetune` (docs/export.md): the latest `finetune.py` result;
- `benchmarks/plots/multi30k_bleu.png` (dev sacreBLEU of each saved checkpoint against its
  training minutes), `benchmarks/plots/speed_ratios.png` (aiayn / peer, per machine),
  `benchmarks/plots/length_extrapolation.png` (sacreBLEU per source length, by positions)
  and `benchmarks/plots/table3.png` (Table 3's dev BLEU against parameters, ours and the
  paper's).

`--check` writes nothing and exits 1 if a README or page differs from what it would write
(the test of the same name runs it). The plots are not checked: their bytes depend on the
matplotlib and FreeType versions; they are the same from run to run on one installation.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PLOTS = ROOT / "benchmarks" / "plots"
DOCS = ROOT / "docs"
TEMPLATES = (DOCS / "templates", ROOT / "benchmarks" / "templates")  # the blocks' words
# marker name -> the page that holds it; each block's words are the template NAME.md.j2
READMES = {"summary": ROOT / "benchmarks" / "README.md", "results": ROOT / "README.md",
           "results_details": DOCS / "results.md", "extrapolation": DOCS / "experiments.md",
           "table3": DOCS / "experiments.md", "alignment": DOCS / "translate.md",
           "finetune": DOCS / "export.md", "cleaning": DOCS / "cleaning.md",
           "serve_mixed": DOCS / "serve-many.md"}
OWN_OPTIONS = ("--note", "--results-dir", "--out", "--json-out")  # where and why: not part of a variant


NOT_COMMITTED = "not measured on committed code"
STALE_NAMES = 3  # the changed files a stale row names
# Exercised by every run, but only to write its record: a change to it moves no figure
RECORDER = "benchmarks/results.py"


class ReportError(Exception):
    """A README without its markers, or a result file that cannot be read."""


def load(results_dir: Path = RESULTS, root: Path = ROOT) -> list[dict]:
    """Every result file, oldest first (by its UTC time, then name), with its name added and,
    under "stale", the files its run exercised that differ in `root` from its commit's."""
    records = []
    for path in sorted(results_dir.glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            record["meta"]["utc"]
            record["stale"] = stale_files(record, root)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ReportError(f"{path}: not a result file of results.py ({error!r})") from None
        record["file"] = path.name
        records.append(record)
    return sorted(records, key=lambda r: (r["meta"]["utc"], r["file"]))


def provenance_problem(record: dict) -> str | None:
    """Why `record` does not describe committed code (so is not published), or None."""
    p = record["meta"].get("provenance")
    if p is None:
        return "no provenance (written before results.py recorded it): treated as uncommitted"
    start, end = p["start"], p["end"]
    if start["commit"] is None:
        return "not run in a git checkout"
    if start["dirty"]:
        return f"uncommitted changes to code when it started: {_names(start['changed'])}"
    if p["changed_during_run"]:
        return "the code changed during the run"
    if end["dirty"]:
        return f"uncommitted changes to code when it ended: {_names(end['changed'])}"
    if p.get("aiayn_outside_checkout"):
        return f"aiayn was imported from outside this checkout ({p['aiayn_outside_checkout']})"
    return None


def stale_files(record: dict, root: Path = ROOT) -> list[str]:
    """The files `record`'s run exercised whose content in `root` is not their content at
    the run's commit (changed, or removed), sorted, less `RECORDER`; [] without provenance."""
    exercised = record["meta"].get("provenance", {}).get("exercised", {})
    stale = []
    for path, blob in exercised.items():
        if path == RECORDER:
            continue
        file = root / path
        if blob is None or not file.is_file() or blob_id(file.read_bytes()) != blob:
            stale.append(path)
    return sorted(stale)


def blob_id(content: bytes) -> str:
    """git's id of a blob with this content (`git hash-object`), computed without git."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def published(records: list[dict]) -> list[dict]:
    """The records of committed code (`provenance_problem`), in their order."""
    return [r for r in records if provenance_problem(r) is None]


def _names(paths: list[str]) -> str:
    more = len(paths) - STALE_NAMES
    return ", ".join(paths[:STALE_NAMES]) + (f" and {more} more" if more > 0 else "")


def machine(record: dict) -> str:
    """'NVIDIA H100 80GB HBM3' or 'AMD EPYC (family 26, model 2), 2 logical CPUs', and the
    kernel caps the run set ('..., kernels capped: ATEN_CPU_CAPABILITY=avx2'): each set of
    kernels has its own rows, as another machine would."""
    m = record["meta"]
    if m.get("gpu"):
        return m["gpu"]
    cpu = m["cpu"]
    name = f"{cpu['name']} (family {cpu['family']}, model {cpu['model']}), " \
           f"{cpu['logical_cpus']} logical CPUs"  # fmt: skip
    caps = m.get("kernel_caps")  # absent from records written before it was recorded
    if caps:
        name += ", kernels capped: " + " ".join(f"{k}={v}" for k, v in sorted(caps.items()))
    return name


def short_machine(record: dict) -> str:
    """A plot's label for `machine`: 'AMD EPYC', or 'AMD EPYC, kernels capped avx2'."""
    caps = record["meta"].get("kernel_caps") if not record["meta"].get("gpu") else None
    isas = sorted({value.lower() for value in (caps or {}).values()})
    return machine(record).split(" (")[0] + (f", kernels capped {'/'.join(isas)}" if isas else "")


def variant(record: dict) -> str:
    """The command without the options that only say where and why it was recorded
    (`--note`, `--results-dir`, a run's `--out` directory)."""
    words, kept = shlex.split(record["meta"]["command"])[2:], []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in OWN_OPTIONS:
            skip = True
        elif word != "--no-save" and not word.startswith(tuple(o + "=" for o in OWN_OPTIONS)):
            kept.append(word)
    return " ".join(kept)


def latest(records: list[dict]) -> list[dict]:
    """The newest record of each (machine, script, variant), in order of first appearance."""
    newest: dict[tuple, dict] = {}
    for record in records:  # oldest first: a later run replaces the earlier one
        key = (machine(record), record["meta"]["script"], variant(record))
        newest.pop(key, None)
        newest[key] = record
    return list(newest.values())


def _train_speed(result: dict) -> list[tuple[str, str]]:
    rows = []
    for size, r in result["results"].items():
        rows.append((f"{size}: aiayn target tokens/s", f"{r['tokens_per_s_median']['aiayn']:g}"))
        rows += [(f"{size}: {k[len('ratio_'):].replace('_over_', ' / ')}", f"{v:.2f}")
                 for k, v in r.items() if k.startswith("ratio_")]  # fmt: skip
        share = r.get("aiayn_fraction_of_measured_matmul_peak")
        if share is not None:
            rows.append((f"{size}: aiayn share of the measured matmul peak", f"{share:.3f}"))
    return rows


def _model_name(t: dict) -> str:
    """A multi30k.py candidate: the last checkpoint, or the last k averaged (`apart` saves
    apart; results written before `apart` existed averaged neighbours)."""
    k, apart = t["average_last"], t.get("apart", 1)
    if k == 1:
        return "last checkpoint"
    return f"last {k} averaged" + (f", {apart} saves apart" if apart > 1 else "")


def _chosen(result: dict) -> str:
    """multi30k.py's model and length penalty, as chosen on the dev set."""
    chosen = result["chosen"]
    return f"{_model_name(chosen)}, alpha {chosen['alpha']:g} (chosen on {result['dev_set']})"


def _multi30k(result: dict) -> list[tuple[str, str]]:
    test = result["test"]
    rows = [(f"sacreBLEU on {result['test_set']}, {_chosen(result)}", f"{test['bleu']:.2f}"),
            ("its brevity penalty", f"{test['bp']:.3f}"),
            ("training updates", str(result["steps"])),
            ("minutes end to end", f"{result['total_minutes']:g}")]  # fmt: skip
    return rows + [(f"dev sacreBLEU (BP), {_model_name(t)}, alpha {t['alpha']:g}",
                    f"{t['bleu']:.2f} ({t['bp']:.3f})") for t in result["dev_tried"]]  # fmt: skip


def _demo(result: dict) -> list[tuple[str, str]]:
    return [("sacreBLEU, last 3 averaged", f"{result['bleu']:.2f}"),
            ("training minutes", f"{result['train_minutes']:g}")]  # fmt: skip


def _demo_base(result: dict) -> list[tuple[str, str]]:
    """The base-sized demo model: that it translates, and that its outputs end."""
    m = result["model"]
    return [(f"sacreBLEU, d_model {m['d_model']}, {m['n_layers']} + {m['n_layers']} layers, "
             f"{result['train_steps']} updates", f"{result['bleu']:.2f}"),
            ("output length / reference length", f"{result['length_ratio']:.3f}"),
            ("training minutes", f"{result['train_minutes']:g}")]  # fmt: skip


def _parse_demo(result: dict) -> list[tuple[str, str]]:
    e = result["evalb"]
    return [("F1, strict (error and skip sentences scored)", f"{result['strict_f1']:.2f}"),
            ("EVALB (COLLINS.prm) F1", "none" if e["f1"] is None else f"{e['f1']:.2f}"),
            ("sentences: valid / error / skip", f"{e['valid_sentences']} / "
             f"{e['error_sentences']} / {e['skip_sentences']} of {e['sentences']}"),
            ("training minutes", f"{result['train_minutes']:g}")]  # fmt: skip


def _prepare_scale(result: dict) -> list[tuple[str, str]]:
    rows = [(f"{r['pairs']:,} pairs: pairs/s", f"{r['pairs_per_second']:g}")
            for r in result["runs"]]
    return rows + [("peak memory, largest / smallest",
                    f"{result['peak_rss_ratio_largest_to_smallest']:.2f}")]  # fmt: skip


def _ratios(result: dict) -> list[tuple[str, str]]:
    """Any script: its top-level ratios, and those under "ratios"."""
    found = {k: v for k, v in result.items() if "ratio" in k and isinstance(v, (int, float))}
    found.update((k, v) for k, v in result.get("ratios", {}).items() if "tokens/s" in k)
    names = {k: k.replace("speed_ratio_", "").replace("ratio_", "").replace("_over_", " / ")
             for k in found}  # "ratio_full_over_chunked_time" -> "full / chunked_time"
    return [(names[k].replace("_time", ", time").replace("_peak_growth", ", peak memory growth"),
             f"{v:.2f}") for k, v in found.items()]  # fmt: skip


def _attention_window(result: dict) -> list[tuple[str, str]]:
    """Per n, full attention's figure against the window's; each one's growth with n."""
    (full, restricted), r = result["results"].values(), result["window"]
    rows = [(f"n={n}: {what}, full / window {r}", f"{full[n][key]:g} / {restricted[n][key]:g}")
            for n in full for key, what in (("ms", "ms"), ("peak_growth_mib", "peak MiB"))]
    for name, steps in result["growth_per_step"].items():
        rows.append((f"{name.replace('_', ' ')}: time growth from the previous n",
                     ", ".join(f"{step['ms']:g}" for step in steps.values())))
    return rows  # fmt: skip


def _tokens(bucket: dict) -> str:
    low, high = bucket["tokens"]
    return f"{low}–{high}"


def _length_extrapolation(result: dict) -> list[tuple[str, str]]:
    return [(f"sources of {_tokens(b)} tokens: sacreBLEU sinusoids, learned",
             f"{b['sinusoidal']['bleu']:.2f}, {b['learned']['bleu']:.2f}")
            for b in result["buckets"]]  # fmt: skip


def _precision_curves(result: dict) -> list[tuple[str, str]]:
    pairs = list(zip(result["curves"]["fp32"]["dev"], result["curves"]["bf16"]["dev"]))
    middle_and_last = sorted({len(pairs) // 2, len(pairs) - 1})
    return [(f"dev NLL after {a['step']} updates, fp32 / bf16", f"{a['dev_nll']:.4f} / {b['dev_nll']:.4f}")
            for a, b in (pairs[i] for i in middle_and_last)]  # fmt: skip


PEERS = ("libretranslate",)  # serve_load's peers: the same model behind another server


def _before_after(result: dict) -> list[tuple[str, str]]:
    """Each speed ratio of the code against `--before`: training tokens/s per size, then
    translation per system (its seconds inverted, so that above 1 is faster either way)."""
    rows = []
    for key, value in result.items():
        if key.endswith("_after_over_before"):
            what, part = key.removesuffix("_after_over_before").split("_", 1)
            label = f"training {part}" if what == "train" else f"beam search, {part}"
            rows.append((f"{label}: speed after / before {result['before']}", f"{value:.2f}"))
    return rows


def _export_agreement(result: dict) -> list[tuple[str, str]]:
    """The share of sentences each export translates as aiayn does, per search, and each
    system's sacreBLEU."""
    rows = []
    for search, systems in result["identical_to_aiayn"].items():
        names = " / ".join(systems)
        rows.append((f"identical to aiayn, {search}: {names}",
                     " / ".join(f"{v:.3f}" for v in systems.values())))  # fmt: skip
    for key, systems in result.items():
        if key.startswith("bleu_"):
            rows.append((f"sacreBLEU, {key.removeprefix('bleu_')}: {' / '.join(systems)}",
                         " / ".join(f"{v:.2f}" for v in systems.values())))  # fmt: skip
    return rows


def _serve_load(result: dict) -> list[tuple[str, str]]:
    s = result["summary"]
    low, high = s["dynamic_rss_mb_min_max"]
    peers = [(f"{s['clients']} clients: sentences/s, dynamic batching / {peer} (same model)",
              f"{s[f'dynamic_vs_{peer}_throughput']:.2f}") for peer in PEERS if f"{peer}_p99_ms" in s]
    peers += [(f"p50 ms at {key.rsplit('_', 2)[1]} client, dynamic batching / {peer}", f"{value:.2f}")
              for peer in PEERS for key, value in s.items()
              if key.startswith(f"dynamic_vs_{peer}_p50_at_")]  # fmt: skip
    return [(f"{s['clients']} clients: sentences/s, dynamic batching / one at a time", f"{s['throughput_ratio']:.2f}"),
            (f"{s['clients']} clients: p99 ms, dynamic / one at a time",
             f"{s['p99_ms_dynamic']:g} / {s['p99_ms_one_at_a_time']:g}"),
            ("errors", str(s["errors"])),
            ("resident MB over the run, dynamic batching", f"{low:g} to {high:g}"),
            (f"resident MB growth over the repeated {s['clients']}-client cell",
             f"{s['dynamic_rss_mb_growth_repeat']:g}"), *peers, *_served_model(result),
            *_serve_mixed(result)]  # fmt: skip


def _served_model(result: dict) -> list[tuple[str, str]]:
    """The served model's size and weights, where the result names them."""
    if "model" not in result:
        return []
    m = result["model"]
    return [("model served, weights", f"d_model {m['d_model']}, {m['layers']} + {m['layers']} layers, "
             f"{m['parameters'] / 1e6:.1f} M parameters; {result['weights']}")]  # fmt: skip


def _serve_mixed(result: dict) -> list[tuple[str, str]]:
    """`--mixed`: two models in one server, each model's throughput mixed / alone, the
    lighter one's p99 against its bound, and the resident memory of one and two models."""
    if "mixed" not in result:
        return []
    m = result["mixed"]
    s, mb, (a, b) = m["summary"], m["rss_mb"], m["models"]
    return [(f"two models ({a}, {b}), {m['clients_per_model']} clients each: sentences/s "
             f"mixed / alone, {a} / {b}",
             f"{s['throughput_mixed_over_alone_a']:.2f} / {s['throughput_mixed_over_alone_b']:.2f}"),
            ("two models: the lighter one's p99 ms mixed / its bound (alone + max wait + a batch)",
             f"{s['lighter_p99_ms_mixed']:g} / {s['lighter_p99_bound_ms']:g}"),
            ("two models: errors", str(s["errors"])),
            ("resident MB once ready, one model / two models",
             f"{mb['one_model_ready']:g} / {mb['two_models_ready']:g}")]  # fmt: skip


def _search(s: dict) -> str:
    return "greedy" if s["beam"] == 1 else f"beam {s['beam']}, alpha {s['alpha']:g}"


def _brevity(result: dict) -> list[tuple[str, str]]:
    rows = []
    for checkpoint, r in result["checkpoints"].items():
        name = Path(checkpoint).name
        rows += [(f"{name}, {_search(s)}: sacreBLEU (BP)", f"{s['bleu']:.2f} ({s['bp']:.3f})")
                 for s in r["search"]]  # fmt: skip
        rows.append((f"{name}: P(stop before the reference ends), sampling",
                     f"{r['p_stop_early_sampling']:.3f}"))  # fmt: skip
    return rows


def _gpu_levers(result: dict) -> list[tuple[str, str]]:
    """Each lever's tokens/s and MFU, where the compiled step's GPU time goes, and the
    compiled step's loss against the eager one's."""
    rows = []
    for name, r in result["rows"].items():
        rows.append((f"{name}: target tokens/s, MFU (989 TFLOP/s), hours for 100k updates",
                     f"{r['tokens_per_s']:,}, {r['mfu_vs_989']:.3f}, {r['projected_base_run_hours']:g}"
                     if isinstance(r, dict) else r))  # fmt: skip
    profile = result.get("profile")
    if profile:
        shares = ", ".join(f"{k} {v:.0%}" for k, v in sorted(profile["share_by_kind"].items(),
                                                              key=lambda kv: -kv[1]))  # fmt: skip
        rows.append(("fast_compiled: GPU time by kernel kind", shares))
        if profile["mfu_if_only_matrix_products"] is not None:  # None: no product kernel seen (CPU)
            rows.append(("fast_compiled: MFU if only its matrix products ran",
                         f"{profile['mfu_if_only_matrix_products']:.3f}"))  # fmt: skip
    curve = result.get("loss_curve")
    if curve:
        rows.append((f"loss over {curve['updates']} updates, mean abs. difference: eager vs "
                     "compiled / eager vs eager with other dropout masks",
                     f"{curve['eager_vs_compiled']['mean']:.4f} / "
                     f"{curve['eager_vs_eager_other_dropout']['mean']:.4f}"))  # fmt: skip
    return rows


def _recipe_search(result: dict) -> list[tuple[str, str]]:
    """The costs stage: seconds per update per variant; the search: each variant's updates
    and best dev BLEU (with the model and alpha that gave it), best first."""
    if result["stage"] == "costs":
        return [(f"{name}: CPU seconds per update", f"{s:.3f}")
                for name, s in result["seconds_per_update"].items()]  # fmt: skip
    done = sorted((v for v in result["variants"] if "best" in v), key=lambda v: -v["best"]["bleu"])
    return [(f"{v['variant']} ({v['updates']} updates): best dev sacreBLEU (BP), "
             f"{_model_name(v['best'])}, alpha {v['best']['alpha']:g}",
             f"{v['best']['bleu']:.2f} ({v['best']['bp']:.3f})") for v in done]  # fmt: skip


def _table3(result: dict) -> list[tuple[str, str]]:
    """The costs stage: CPU seconds per update per row; the table: the base's seeds and the
    rows outside their noise."""
    if result.get("stage") == "costs":
        return [(f"{name}: CPU seconds per update, one thread", f"{s:.3f}")
                for name, s in result["cpu_seconds_per_update"].items()]  # fmt: skip
    bleu = result["noise"]["dev_bleu"]
    rows = [(f"base, {bleu['n']} seeds: dev sacreBLEU mean (sd)", f"{bleu['mean']:.2f} ({bleu['sd']:.2f})")]
    rows += [(f"{r['row']}: dev sacreBLEU, outside the base's noise", f"{r['dev']['bleu']:.2f}")
             for r in result["rows"] if r["outside_noise"]["dev_bleu"]]  # fmt: skip
    return rows


def _alignment_choice(r: dict) -> str:
    heads = "heads averaged" if r["heads"] == "mean" else f"head {r['heads'] + 1}"
    return f"layer {r['layer'] + 1}, {heads}, {r['row']} row, {r['links']} links"


def _prf(r: dict) -> str:
    return f"{r['precision']:.3f} / {r['recall']:.3f} / {r['aer']:.3f}"


def _alignment(result: dict) -> list[tuple[str, str]]:
    """The default's figures, the best head average's where it differs, the best head's."""
    keys = ["default_in_src", "best_single_head"]
    chosen = {k: v for k, v in result["chosen"].items() if k != "layer_from_last"}
    if chosen != result["default_in_src"]:
        keys.insert(1, "chosen")
    return [(f"precision / recall / AER, {_alignment_choice(result[k])}", _prf(result[k]))
            for k in keys]  # fmt: skip


def _started(model: dict) -> str:
    """finetune.py's models: 'the base', 'from the base, 10 min', 'from random, 10 min'."""
    if model["minutes"] == 0:
        return "the base"
    return f"from {model['start']}, {model['minutes']:g} min ({model['steps']} updates)"


def _noisy_corpus(result: dict) -> list[tuple[str, str]]:
    """The filters' recall per kind of noise they target, the clean pairs removed, and the
    trainings' mean test BLEU where they ran."""
    f = result["filters"]
    rows = [(f"share removed of the {kind.replace('_', ' ')} pairs", f"{share:.3f}")
            for kind, share in f["targeted_recall"].items()]  # fmt: skip
    rows.append(("share removed of the clean pairs", f"{f['clean_removed_share']:.4f}"))
    for name, means in result.get("summary", {}).get("mean_bleu", {}).items():
        rows.append((f"test sacreBLEU, {name} ({result['updates']} updates)", f"{means['test']:.2f}"))
    return rows


def _finetune(result: dict) -> list[tuple[str, str]]:
    return [(f"sacreBLEU demo test / Multi30k val, {_started(m)}",
             f"{m['demo_test']['bleu']:.2f} / {m['multi30k_val']['bleu']:.2f}")
            for m in result["models"]]  # fmt: skip


SUMMARIES = {"finetune": _finetune, "before_after": _before_after,
             "export_agreement": _export_agreement, "train_speed": _train_speed, "gpu_levers": _gpu_levers,
             "recipe_search": _recipe_search, "multi30k": _multi30k, "demo": _demo, "demo_base": _demo_base,
             "table3": _table3, "parse_demo": _parse_demo,
             "prepare_scale": _prepare_scale, "length_extrapolation": _length_extrapolation,
             "attention_window": _attention_window, "precision_curves": _precision_curves,
             "brevity": _brevity, "serve_load": _serve_load, "alignment": _alignment,
             "noisy_corpus": _noisy_corpus}


def figures(record: dict) -> list[tuple[str, str]]:
    """(figure, value) rows of a record's headline figures."""
    return SUMMARIES.get(record["meta"]["script"], _ratios)(record["result"])


def _link(record: dict, prefix: str) -> str:
    """The file's link: its date and commit, "stale" with the files that changed since, its
    `--note`, and a note added after the run, marked as such."""
    note, annotation = record["meta"].get("note"), record.get("annotation")
    stale = record.get("stale")
    text = f"[{record['meta']['utc'][:10]}, {record['meta']['commit']}]({prefix}{record['file']})"
    if stale:
        text += f" (stale: changed since, {_names(stale)})"
    text += f": {note}" if note else ""
    return text + (f" (note added after the run: {annotation})" if annotation else "")


def render(name: str, **context) -> str:
    """Template `NAME.md.j2` (in `TEMPLATES`) with `context`: the words of a generated
    block, whose figures this module gathers."""
    return _environment().get_template(f"{name}.md.j2").render(**context)


def _oneline(text: str) -> str:
    """A paragraph written over several lines of a template, as one line."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip()) + "\n"


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(t) for t in TEMPLATES]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True,
                             autoescape=False)  # fmt: skip  # Markdown, not HTML
    env.filters.update(fmt=format, oneline=_oneline, tokens=_tokens,
                       code_py=lambda script: f"`{script}.py`",
                       capitalize_first=lambda s: s[:1].upper() + s[1:])  # fmt: skip
    return env


def bench_prefix(page: Path) -> str:
    """The relative link from `page` to the benchmarks folder: 'benchmarks/' from the
    README, '../benchmarks/' from docs/, '' from benchmarks/README.md."""
    rel = Path(os.path.relpath(ROOT / "benchmarks", page.parent)).as_posix()
    return "" if rel == "." else rel + "/"


def summary_tables(records: list[dict], bench: str = "") -> str:
    """Per machine, a table of the latest result of committed code of each benchmark
    command; a benchmark with results on a machine but none of committed code is listed as
    not measured."""
    shown = latest(published(records))
    by_machine: dict[str, list[dict]] = {}
    for record in shown:
        by_machine.setdefault(machine(record), []).append({
            "command": f"`{record['meta']['script']}.py {variant(record)}`".replace(" `", "`"),
            "figures": figures(record), "link": _link(record, f"{bench}results/")})  # fmt: skip
    measured = {(machine(r), r["meta"]["script"]) for r in shown}
    unmeasured: dict[str, list[str]] = {}  # machine -> scripts without a committed result there
    for record in records:
        name, script = machine(record), record["meta"]["script"]
        if (name, script) not in measured and script not in unmeasured.get(name, []):
            unmeasured.setdefault(name, []).append(script)
    machines = [{"name": name, "unmeasured": sorted(unmeasured.get(name, [])),
                 "records": by_machine.get(name, [])}
                for name in sorted(by_machine.keys() | unmeasured.keys())]  # fmt: skip
    return render("summary", machines=machines).rstrip("\n") + "\n"


DEMOS = (("demo", "offline demo (embedded En→De corpus)"),
         ("parse_demo", "offline parse demo (demo grammar treebank)"))  # fmt: skip


def _results_rows(records: list[dict], bench: str) -> dict:
    """The results tables' figures: a row per demo and Multi30k result of committed code
    (the latest per machine and command), and the tasks run only on uncommitted code."""
    shown = published(records)
    unmeasured = []  # run, but not on committed code: named below the table, not as rows
    for script, task in (*DEMOS, ("multi30k", "Multi30k En→De")):
        ran = any(r["meta"]["script"] == script for r in records)
        if ran and not any(r["meta"]["script"] == script for r in shown):
            unmeasured.append(task)
    demos = [{**_run(record, bench), "task": task, "result": record["result"]}
             for script, task in DEMOS
             for record in latest([r for r in shown if r["meta"]["script"] == script])]
    multi30k = [{**_run(record, bench), "steps": record["result"]["steps"],
                 "chosen": _chosen(record["result"]), "test_set": record["result"]["test_set"],
                 "bleu": record["result"]["test"]["bleu"],
                 "minutes": record["result"]["total_minutes"]}
                for record in latest([r for r in shown if r["meta"]["script"] == "multi30k"])]
    return {"demos": demos, "multi30k": multi30k, "unmeasured": unmeasured}


def _run(record: dict, bench: str) -> dict:
    """Where a result was measured: the machine in full and in short, its file's link, and
    whether the code it ran has changed since."""
    m = record["meta"]
    short = m["gpu"] or f"{m['cpu']['name']}, {m['cpu']['logical_cpus']} CPUs"
    return {"machine_full": machine(record), "machine": short,
            "link": _link(record, f"{bench}results/"), "stale": bool(record.get("stale"))}


def results_table(records: list[dict], bench: str = "benchmarks/") -> str:
    """README's Results table, in short cells: the demos' and Multi30k's rows from result
    files (none without one), then the paper's rows."""
    return render("results", docs=_docs_prefix(bench), **_results_rows(records, bench))


def results_details(records: list[dict], bench: str = "../benchmarks/") -> str:
    """The results page's table: the README's rows with the model's run, the machine in full
    and the result file."""
    return render("results_details", docs=_docs_prefix(bench), **_results_rows(records, bench))


def _docs_prefix(bench: str) -> str:
    """The link to docs/ from a results table's page: 'docs/' from the README (whose link
    to benchmarks/ is 'benchmarks/'), '' from the results page in docs/."""
    return "docs/" if bench == "benchmarks/" else ""


def newest_published(records: list[dict], script: str) -> dict | None:
    """The newest result of committed code of `script`, or None."""
    runs = [r for r in published(records) if r["meta"]["script"] == script]
    return runs[-1] if runs else None


def none_yet(script: str) -> str:
    """A generated paragraph's stand-in while `script` has no result of committed code."""
    return f"No `{script}.py` result of committed code yet ({NOT_COMMITTED}).\n"


def extrapolation_text(records: list[dict], bench: str = "../benchmarks/") -> str:
    """The experiments page's account of the latest `length_extrapolation.py` result of
    committed code: every figure in it read from the file, the comparison's words chosen by
    those figures (in its template)."""
    record = newest_published(records, "length_extrapolation")
    if record is None:
        return none_yet("length_extrapolation")
    r = record["result"]
    return render("extrapolation", r=r, first=r["buckets"][0], last=r["buckets"][-1],
                  machine=machine(record), link=_link(record, f"{bench}results/"),
                  plot=f"{bench}plots/length_extrapolation.png")  # fmt: skip


def alignment_text(records: list[dict], bench: str = "../benchmarks/") -> str:
    """The translation page's word alignment figures: the latest `alignment.py` result."""
    record = newest_published(records, "alignment")
    if record is None:
        return none_yet("alignment")
    r = record["result"]
    default, best = r["default_in_src"], r["best_single_head"]
    return render("alignment", r=r, default=default, best=best,
                  default_choice=_alignment_choice(default), best_choice=_alignment_choice(best),
                  link=_link(record, f"{bench}results/"))  # fmt: skip


def finetune_text(records: list[dict], bench: str = "../benchmarks/") -> str:
    """The export page's account of the latest `finetune.py` result, every figure read from
    it."""
    record = newest_published(records, "finetune")
    if record is None:
        return none_yet("finetune")
    r = record["result"]
    base = r["models"][0]
    tuned = [m for m in r["models"] if m["start"] == "base" and m["minutes"] > 0]
    scratch = [m for m in r["models"] if m["start"] == "random"]
    forgot = all(m["multi30k_val"]["bleu"] < base["multi30k_val"]["bleu"] for m in tuned)
    return render("finetune", r=r, base=base, tuned=tuned, scratch=scratch, forgot=forgot,
                  machine=machine(record), link=_link(record, f"{bench}results/"))  # fmt: skip


def cleaning_text(records: list[dict], bench: str = "../benchmarks/") -> str:
    """The cleaning page's account of the latest `noisy_corpus.py` result: what the filters
    removed of each kind of noise and of the clean pairs, and the trainings where they ran."""
    record = newest_published(records, "noisy_corpus")
    if record is None:
        return none_yet("noisy_corpus")
    r = record["result"]
    f = r["filters"]
    by = {kind: sorted(((entry["kinds"].get(kind, 0), name) for name, entry in
                        f["filters"].items() if entry["kinds"].get(kind)), reverse=True)
          for kind in f["kinds"]}  # fmt: skip  # kind -> [(pairs removed, filter)], most first
    return render("cleaning", r=r, f=f, by=by, targeted=list(f["targeted_recall"]),
                  machine=machine(record), link=_link(record, f"{bench}results/"))  # fmt: skip


IDLE_CORE = 0.25  # cores left idle in the mixed phase above which the cores were not the limit


def serve_mixed_text(records: list[dict], bench: str = "../benchmarks/") -> str:
    """The serve-many page's account of the latest `serve_load.py --mixed` result: each
    model alone and both at once, the targets, and the cores kept busy, whose words say
    whether the mixed phase was short of cores or of something else."""
    runs = [r for r in published(records)
            if r["meta"]["script"] == "serve_load" and "mixed" in r["result"]]  # fmt: skip
    if not runs:
        return none_yet("serve_load")
    record = runs[-1]
    m = record["result"]["mixed"]
    cores = m.get("busy_cores")
    idle = cores and cores["logical_cpus"] - cores["mixed"]["total"]
    # results from before `--worker` decoded every model in the server's own process
    worker = record["result"].get("server_worker", "thread")
    return render("serve_mixed", r=record["result"], m=m, cores=cores, idle=idle, worker=worker,
                  idle_core=IDLE_CORE, machine=machine(record),
                  link=_link(record, f"{bench}results/"))  # fmt: skip


def _table3_runs(records: list[dict]) -> list[dict]:
    """`table3.py run` results (not its costs stage), oldest first."""
    return [r for r in records if r["meta"]["script"] == "table3" and "rows" in r["result"]]


def table3_budgets(records: list[dict]) -> list[dict]:
    """The latest `table3.py run` result of each update budget, the longest budget first:
    the experiments page's table is the first, the others a column each beside it."""
    latest = {r["result"]["updates"]: r for r in _table3_runs(records)}  # later wins
    return [latest[u] for u in sorted(latest, reverse=True)]


# What the paper reads off Table 3 (sec. 6.2), as (rows, the rows' rank against the base's
# dev BLEU that bears it out: "lower", "higher", or "same" (inside the base's noise))
TABLE3_CLAIMS = (
    ("A: one head is worse than eight", ("A-h1",), "lower"),
    ("A: too many heads also hurt", ("A-h16", "A-h32"), "lower"),
    ("B: a smaller d_k hurts", ("B-dk16", "B-dk32"), "lower"),
    ("C: bigger models are better", ("C-N8", "C-d1024", "C-ff4096", "big"), "higher"),
    ("C: smaller models are worse", ("C-N2", "C-N4", "C-d256", "C-ff1024"), "lower"),
    ("D: dropout helps (none is worse)", ("D-drop0.0",), "lower"),
    ("E: learned positions do about as well as sinusoids", ("E-learned-pe",), "same"),
)


def claim_verdict(result: dict, rows: tuple[str, ...], expected: str) -> str:
    """One claim against one table: each row's dev BLEU less the base's seed mean, and
    "held" (every row outside the noise the way the claim says), "held for some", "not
    shown" (none), "mixed" (rows outside the noise both ways) or "contradicted" (rows
    outside it only the other way); for "same", "consistent" (every row inside the noise,
    which cannot tell a difference smaller than it) or "contradicted"."""
    mean = result["noise"]["dev_bleu"]["mean"]
    by_name = {r["row"]: r for r in result["rows"]}
    found = [by_name[name] for name in rows if name in by_name]
    if not found:
        return "not run"
    agree, against, parts = 0, 0, []
    for row in found:
        delta, outside = row["dev"]["bleu"] - mean, row["outside_noise"]["dev_bleu"]
        if expected == "same":
            agree += not outside
            against += outside
        else:
            agree += outside and (delta < 0) == (expected == "lower")
            against += outside and (delta < 0) != (expected == "lower")
        parts.append(f"{row['row']} {delta:+.2f}{'' if outside else ' (noise)'}")
    if expected == "same":
        verdict = "contradicted" if against else "consistent"
    else:
        verdict = ("mixed" if agree and against else "contradicted" if against
                   else "held" if agree == len(found) else "held for some" if agree
                   else "not shown")  # fmt: skip
    return f"{verdict}: {', '.join(parts)}"


def table3_text(records: list[dict], bench: str = "../benchmarks/") -> str:
    """The experiments page's Table 3 on Multi30k from the latest `table3.py run` result of
    the longest update budget: each row beside the paper's, in bold where it lies outside
    the base's seed-to-seed noise; the other budgets' dev BLEU beside it; then the paper's
    claims, each against each budget."""
    budgets = table3_budgets(published(records))
    if not budgets:
        return none_yet("table3")
    record, others = budgets[0], budgets[1:]
    claims = [(claim, [claim_verdict(b["result"], names, expected) for b in budgets])
              for claim, names, expected in TABLE3_CLAIMS]  # fmt: skip
    return render(
        "table3", r=record["result"], machine=machine(record),
        link=_link(record, f"{bench}results/"), plot=f"{bench}plots/table3.png",
        others=[{"result": o["result"], "machine": machine(o), "link": _link(o, f"{bench}results/"),
                 "rows": {row["row"]: row for row in o["result"]["rows"]}} for o in others],
        budgets=budgets, claims=claims,
    )  # fmt: skip


def replace_between(text: str, name: str, body: str, where: str = "README") -> str:
    """`text` with what lies between the `name` markers replaced by `body`."""
    begin, end = f"<!-- report:begin {name} -->\n", f"<!-- report:end {name} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if len(pattern.findall(text)) != 1:
        raise ReportError(f"{where}: needs exactly one '{begin.strip()}' ... '{end}' pair")
    return pattern.sub(lambda _: begin + body + end, text)


MAKERS = {"summary": summary_tables, "results": results_table,
          "results_details": results_details, "extrapolation": extrapolation_text,
          "alignment": alignment_text, "table3": table3_text,
          "finetune": finetune_text, "cleaning": cleaning_text,
          "serve_mixed": serve_mixed_text}  # fmt: skip  # marker -> maker


def readmes(records: list[dict], readme_paths: dict[str, Path] = READMES) -> dict[Path, str]:
    """path -> the page's text with its generated parts rebuilt (their links relative to
    the page)."""
    texts: dict[Path, str] = {}
    for name, path in readme_paths.items():
        text = texts.get(path) or path.read_text(encoding="utf-8")
        body = MAKERS[name](records, bench_prefix(path))
        texts[path] = replace_between(text, name, body, str(path))
    return texts


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "aiayn"  # no random ids, should SVG ever be drawn
    return plt


def plot_bleu(records: list[dict], path: Path) -> None:
    """Dev sacreBLEU of each saved checkpoint against training minutes, a line per run (the
    test set is scored once per run, not per checkpoint)."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    runs = [r for r in records if r["meta"]["script"] == "multi30k"]
    for record in runs:
        curve = record["result"]["curve"]
        label = f"{short_machine(record)}, {record['meta']['commit']}"
        ax.plot([p["minutes"] for p in curve], [p["bleu"] for p in curve], marker="o",
                label=label)  # fmt: skip
    if runs:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no multi30k.py result file yet", ha="center", transform=ax.transAxes)
    ax.set(xlabel="training minutes", ylabel="sacreBLEU, val (dev set)",
           title="Multi30k En→De, configs/multi30k.yaml")  # fmt: skip
    ax.grid(alpha=0.3)
    _save(fig, path)


def plot_ratios(records: list[dict], path: Path) -> None:
    """aiayn / peer speed ratios of the latest results, one bar each, grouped by machine."""
    plt = _figure()
    bars = [(f"{short_machine(r)} | {r['meta']['script']} | {figure}", float(value))
            for r in latest(records) if r["meta"]["script"] != "multi30k"
            for figure, value in figures(r)
            if " / " in figure and "aiayn" in figure and " / " not in str(value)]  # fmt: skip
    # (a figure of several values, "0.998 / 1.000", is a list of shares, not a ratio)
    fig, ax = plt.subplots(figsize=(8.0, 1.0 + 0.32 * max(len(bars), 1)), dpi=100)
    ax.barh(range(len(bars)), [v for _, v in bars], color="tab:blue")
    ax.set_yticks(range(len(bars)), [label for label, _ in bars], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    if not bars:
        ax.text(1.0, 0.0, "no speed result file yet", ha="center", va="center")
    ax.set(xlabel="speed ratio, aiayn / peer (> 1: aiayn faster)", title="Speed ratios")
    _save(fig, path)


def plot_extrapolation(records: list[dict], path: Path) -> None:
    """sacreBLEU per source-length bucket of the latest `length_extrapolation.py` result,
    a line for sinusoids and one for learned positions."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    runs = [r for r in records if r["meta"]["script"] == "length_extrapolation"]
    if runs:
        result = runs[-1]["result"]
        labels = [_tokens(b) for b in result["buckets"]]
        for positions, name in (("sinusoidal", "sinusoids (sec. 3.5)"),
                                ("learned", "learned (Table 3 row E)")):  # fmt: skip
            ax.plot(labels, [b[positions]["bleu"] for b in result["buckets"]], marker="o",
                    label=name)  # fmt: skip
        ax.axvspan(-0.5, 0.5, color="grey", alpha=0.15, label="lengths seen in training")
        ax.legend(fontsize=8)
        ax.set_title(f"Trained on at most {result['max_train_tokens']} tokens a side, "
                     f"{short_machine(runs[-1])}", fontsize=10)  # fmt: skip
    else:
        ax.text(0.5, 0.5, "no length_extrapolation.py result file yet", ha="center",
                transform=ax.transAxes)  # fmt: skip
    ax.set(xlabel="source length, subword tokens", ylabel="sacreBLEU")
    ax.grid(alpha=0.3)
    _save(fig, path)


def plot_table3(records: list[dict], path: Path) -> None:
    """Dev BLEU against parameters, a point per row, ours (with the base's noise as a band)
    beside the paper's (rows whose parameters the paper leaves blank: the base's)."""
    plt = _figure()
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.4), dpi=100)
    runs = table3_budgets(records)
    if runs:
        r = runs[0]["result"]
        ours = [(row["params"] / 1e6, row["dev"]["bleu"], row["row"]) for row in r["rows"]]
        base = r["paper"]["base"]["params_m"]
        paper = [(p["params_m"] or base, p["bleu"], name) for name, p in r["paper"].items()]
        low, high = r["noise"]["dev_bleu"]["interval"]
        axes[0].axhspan(low, high, color="grey", alpha=0.2, label="base: 95% interval of a run")
        axes[0].legend(fontsize=8)
        where = f"Multi30k val, {r['updates']:,} updates, {short_machine(runs[0])}"
        for ax, points, title in ((axes[0], ours, where),
                                  (axes[1], paper, "the paper: newstest2013")):  # fmt: skip
            ax.scatter([p[0] for p in points], [p[1] for p in points], s=14)
            at: dict[tuple[float, float], list[str]] = {}  # rows at one point: one label
            for x, y, name in points:
                at.setdefault((x, y), []).append(name)
            for (x, y), names in at.items():
                ax.annotate(", ".join(names), (x, y), fontsize=6, xytext=(3, 2),
                            textcoords="offset points")  # fmt: skip
            ax.set(xscale="log", xlabel="parameters ×10⁶", ylabel="dev BLEU", title=title)
            ax.grid(alpha=0.3)
    else:
        axes[0].text(0.5, 0.5, "no table3.py result file yet", ha="center",
                     transform=axes[0].transAxes)  # fmt: skip
    _save(fig, path)


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})  # no version stamp
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a README or page differs from the results")
    args = parser.parse_args(argv)
    try:
        records = load(RESULTS, ROOT)
        texts = readmes(records, READMES)
    except ReportError as error:
        print(f"report.py: {error}", file=sys.stderr)
        return 2
    for record in records:
        problem = provenance_problem(record)
        if problem:
            print(f"report.py: not published: {record['file']}: {problem}", file=sys.stderr)
    stale = [p for p, text in texts.items() if p.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path} differs from benchmarks/report.py's output",
                  file=sys.stderr)  # fmt: skip
        return 1 if stale else 0
    for path in stale:
        path.write_text(texts[path], encoding="utf-8")
    plot_bleu(published(records), PLOTS / "multi30k_bleu.png")
    plot_ratios(published(records), PLOTS / "speed_ratios.png")
    plot_extrapolation(published(records), PLOTS / "length_extrapolation.png")
    plot_table3(published(records), PLOTS / "table3.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
