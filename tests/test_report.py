"""`benchmarks/report.py`: the committed READMEs and documentation pages are what it makes of
the committed results (their words from the templates beside the pages); it is deterministic;
its tables show the latest result of committed code of each command per machine, marked
stale where the files its run exercised have changed since, and the README's BLEU rows only
from result files, in short cells, their details and files on the results page. The plots' bytes are compared run against run on this
installation only (they depend on matplotlib's and FreeType's versions)."""

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import report  # noqa: E402


def _state(dirty: bool = False, commit: str = "abc1234" + "0" * 33) -> dict:
    return {"commit": commit, "dirty": dirty, "diff": "0123abcd" if dirty else None,
            "changed": ["src/aiayn/x.py"] if dirty else []}  # fmt: skip


def _provenance(start: dict | None = None, end: dict | None = None, exercised=None) -> dict:
    start, end = start or _state(), end or _state()
    return {"start": start, "end": end, "exercised": exercised or {},
            "changed_during_run": (start["commit"], start["diff"]) != (end["commit"], end["diff"])}


def _record(script: str, utc: str, result: dict, command: str = "", note: str = "",
            provenance: dict | None = None) -> dict:  # fmt: skip
    """A result of committed code, unless `provenance` says otherwise."""
    return {
        "meta": {"script": script, "utc": utc, "commit": "abc1234", "dirty": False, "note": note,
                 "command": f".venv/bin/python benchmarks/{script}.py {command}".strip(),
                 "cpu": {"name": "Test CPU", "family": "6", "model": "1", "logical_cpus": 2},
                 "gpu": None, "provenance": provenance or _provenance()},
        "result": result,
    }  # fmt: skip


def _speed(ratio: float) -> dict:
    return {"results": {"small": {"tokens_per_s_median": {"aiayn": 100.0},
                                  "ratio_aiayn_over_hf_marian": ratio}}}  # fmt: skip


MULTI30K = {"test": {"bleu": 37.04, "bp": 0.95}, "test_set": "test_2016_flickr", "steps": 2299,
            "total_minutes": 55.8, "dev_set": "val", "chosen": {"average_last": 3, "alpha": 1.0},
            "dev_tried": [{"average_last": 3, "alpha": 1.0, "bleu": 38.5, "bp": 0.96}],
            "curve": [{"minutes": 10.0, "bleu": 30.0}, {"minutes": 20.0, "bleu": 35.0}]}


def _bucket(low: int, high: int, sinusoidal: float, learned: float) -> dict:
    return {"tokens": [low, high], "sentences": 200, "longest": high,
            "sinusoidal": {"bleu": sinusoidal, "length_ratio": 1.0},
            "learned": {"bleu": learned, "length_ratio": 0.9}}  # fmt: skip


DEMO = {"bleu": 97.28, "train_minutes": 4.3, "train_steps": 900, "test_set": "demo test",
        "model": {"n_layers": 3, "d_model": 128}}


EXTRAPOLATION = {"max_train_tokens": 8, "train_pairs": 35823, "steps": 900, "beam": 4,
                 "model": {"n_layers": 3, "d_model": 128},
                 "buckets": [_bucket(1, 8, 96.5, 97.25), _bucket(17, 24, 61.5, 12.75)]}


def _write(directory: Path, records: list[dict]) -> None:
    directory.mkdir()
    for k, record in enumerate(records):
        (directory / f"{k}.json").write_text(json.dumps(record))


def test_committed_readmes_are_what_report_makes_of_the_committed_results():
    assert report.main(["--check"]) == 0, "run .venv/bin/python benchmarks/report.py"


def test_every_published_result_is_listed_with_its_file_and_no_other():
    records = report.load()
    summary = report.READMES["summary"].read_text(encoding="utf-8")
    shown = report.latest(report.published(records))
    for record in shown:
        assert f"(results/{record['file']})" in summary
    for record in records:
        if record not in shown:
            assert f"(results/{record['file']})" not in summary


def test_report_is_deterministic(tmp_path):
    records = report.load()
    assert report.readmes(records) == report.readmes(copy.deepcopy(records))
    sample = [_record("train_speed", "2026-01-01T00:00:00Z", _speed(1.5)),
              _record("multi30k", "2026-01-01T00:00:00Z", MULTI30K),
              _record("length_extrapolation", "2026-01-01T00:00:00Z", EXTRAPOLATION)]  # fmt: skip
    for draw in (report.plot_bleu, report.plot_ratios, report.plot_extrapolation):
        draw(sample, tmp_path / "a.png")
        draw(sample, tmp_path / "b.png")
        assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
        assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_latest_result_of_each_command_per_machine_and_its_note(tmp_path):
    records = [
        _record("train_speed", "2026-01-01T00:00:00Z", _speed(1.11), "--sizes small"),
        _record("train_speed", "2026-01-02T00:00:00Z", _speed(1.22),
                "--sizes small --note x --out /tmp/y", note="loaded machine"),
        _record("train_speed", "2026-01-01T12:00:00Z", _speed(1.33), "--sizes small --steps 9"),
    ]  # fmt: skip
    _write(tmp_path / "results", records)
    table = report.summary_tables(report.load(tmp_path / "results"))
    assert "1.11" not in table  # the same command, later, on the same machine replaces it
    assert "1.22" in table and "loaded machine" in table and "(results/1.json)" in table
    assert "1.33" in table  # another command stays
    assert "#### Test CPU (family 6, model 1), 2 logical CPUs" in table


def test_a_run_with_capped_kernels_has_rows_of_its_own(tmp_path):
    capped = _record("train_speed", "2026-01-02T00:00:00Z", _speed(0.77), "--sizes small")
    capped["meta"]["kernel_caps"] = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    own = _record("train_speed", "2026-01-01T00:00:00Z", _speed(1.11), "--sizes small")
    own["meta"]["kernel_caps"] = {}
    _write(tmp_path / "results", [own, capped])
    table = report.summary_tables(report.load(tmp_path / "results"))
    assert "1.11" in table and "0.77" in table  # the later, capped run hides no row
    assert "#### Test CPU (family 6, model 1), 2 logical CPUs, kernels capped: " \
           "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2" in table  # fmt: skip
    assert report.short_machine(capped) == "Test CPU, kernels capped avx2"
    assert report.short_machine(own) == "Test CPU"


def test_a_result_without_headline_figures_is_still_listed(tmp_path):
    _write(tmp_path / "results", [_record("attention_backends", "2026-01-01T00:00:00Z", {})])
    assert "(results/0.json)" in report.summary_tables(report.load(tmp_path / "results"))


def test_attention_window_rows_set_each_length_full_against_the_window(tmp_path):
    def case(ms_256, mib_256, ms_1024, mib_1024):
        return {"256": {"ms": ms_256, "peak_growth_mib": mib_256},
                "1024": {"ms": ms_1024, "peak_growth_mib": mib_1024}}  # fmt: skip

    result = {"window": 16,
              "results": {"full": case(76.2, 17.0, 375.9, 49.6),
                          "window_16": case(86.4, 13.1, 250.4, 47.1)},
              "growth_per_step": {"full": {"1024": {"ms": 4.93}},
                                  "window_16": {"1024": {"ms": 2.9}}}}  # fmt: skip
    _write(tmp_path / "results", [_record("attention_window", "2026-01-01T00:00:00Z", result)])
    table = report.summary_tables(report.load(tmp_path / "results"))
    assert "| n=1024: ms, full / window 16 | 375.9 / 250.4 |" in table
    assert "| n=256: peak MiB, full / window 16 | 17 / 13.1 |" in table
    assert "| window 16: time growth from the previous n | 2.9 |" in table


def test_bleu_rows_only_from_result_files():
    for table in (report.results_table, report.results_details):
        assert "Multi30k" not in table([])
        assert "offline demo" not in table([])
    record = {**_record("multi30k", "2026-01-01T00:00:00Z", MULTI30K), "file": "m.json"}
    row = report.results_details([record])
    assert "| Multi30k En→De |" in row and "**37.04**" in row and "2,299 updates" in row
    assert "last 3 averaged, alpha 1 (chosen on val)" in row
    rows = dict(report.figures(record))
    assert rows["dev sacreBLEU (BP), last 3 averaged, alpha 1"] == "38.50 (0.960)"
    assert "(../benchmarks/results/m.json)" in row  # the results page is in docs/
    assert "[reproduce.md](reproduce.md)" in row
    short = report.results_table([record])  # the README's: short cells, no file, no notes
    assert ("| Multi30k En→De | `configs/multi30k.yaml` | test_2016_flickr | **37.04** BLEU | "
            "Test CPU, 2 CPUs, 55.8 min end to end | — |") in short  # fmt: skip
    assert "m.json" not in short and "[docs/reproduce.md](docs/reproduce.md)" in short


def test_the_short_table_says_stale_and_the_details_say_what_changed():
    record = {**_record("demo", "2026-01-01T00:00:00Z", DEMO), "file": "d.json",
              "stale": ["src/aiayn/x.py"]}  # fmt: skip
    assert ("| offline demo (embedded En→De corpus) | 3+3 layers, d_model 128 | demo test | "
            "**97.28** BLEU | Test CPU, 2 CPUs, 4.3 min of training (stale) | — |"
            in report.results_table([record]))  # fmt: skip
    assert ("(../benchmarks/results/d.json) (stale: changed since, src/aiayn/x.py)"
            in report.results_details([record]))  # fmt: skip


def test_each_block_links_the_result_files_from_the_page_that_holds_it(tmp_path):
    assert report.bench_prefix(report.ROOT / "README.md") == "benchmarks/"
    assert report.bench_prefix(report.ROOT / "docs" / "experiments.md") == "../benchmarks/"
    assert report.bench_prefix(report.ROOT / "benchmarks" / "README.md") == ""
    record = {**_record("length_extrapolation", "2026-01-01T00:00:00Z", EXTRAPOLATION),
              "file": "e.json"}  # fmt: skip
    page = report.ROOT / "docs" / "experiments.md"
    text = report.readmes([record], {"extrapolation": page})[page]
    assert "(../benchmarks/results/e.json)" in text
    assert "[../benchmarks/plots/length_extrapolation.png](../benchmarks/plots/length_extrapolation.png)" in text


def test_extrapolation_paragraph_is_the_latest_result_s_figures():
    assert report.extrapolation_text([]).startswith("No `length_extrapolation.py` result")
    older = _record("length_extrapolation", "2026-01-01T00:00:00Z",
                    {**EXTRAPOLATION, "buckets": [_bucket(1, 8, 11.0, 11.0)]})
    newer = _record("length_extrapolation", "2026-01-02T00:00:00Z", EXTRAPOLATION)
    text = report.extrapolation_text([{**older, "file": "o.json"}, {**newer, "file": "n.json"}])
    assert "11.00" not in text and "(../benchmarks/results/n.json)" in text
    assert "sinusoids scores 96.50 sacreBLEU on held-out sources of 1–8 tokens and 61.50" in text
    assert "on sources of 17–24 tokens, 64% of it; " in text  # 61.5 / 96.5
    assert "12.75, 13% of it. " in text  # 12.75 / 97.25
    assert "sinusoids are 48.75 BLEU ahead of learned positions" in text
    assert "There the translations are 100% (sinusoids) and 90% (learned) as long" in text
    assert "| 17–24 | 200 | 61.50 | 12.75 | 1.00 | 0.90 |" in text


def test_two_generated_parts_of_one_readme_are_both_rebuilt(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- report:begin results -->\n<!-- report:end results -->\n"
                      "<!-- report:begin extrapolation -->\nold\n"
                      "<!-- report:end extrapolation -->\n")
    text = report.readmes([], {"results": readme, "extrapolation": readme})[readme]
    assert "| task |" in text and "No `length_extrapolation.py` result" in text


def test_readme_without_markers_is_a_clear_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    with pytest.raises(report.ReportError, match="report:begin results"):
        report.readmes([], {"results": readme})
    marked = "a\n<!-- report:begin results -->\nold\n<!-- report:end results -->\nb\n"
    readme.write_text(marked)
    text = report.readmes([], {"results": readme})[readme]
    assert text.startswith("a\n<!-- report:begin results -->\n| task |") and text.endswith(
        "<!-- report:end results -->\nb\n"
    )


def test_a_file_that_is_not_a_result_is_named(tmp_path):
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(report.ReportError, match="bad.json"):
        report.load(tmp_path)


def test_precision_curves_rows_are_the_middle_and_last_validations():
    dev = lambda *nll: [{"step": 25 * (i + 1), "dev_nll": x} for i, x in enumerate(nll)]  # noqa: E731
    result = {"curves": {"fp32": {"dev": dev(7.0, 6.0, 5.2146)}, "bf16": {"dev": dev(7.1, 6.1, 5.2171)}}}
    record = _record("precision_curves", "2026-01-01T00:00:00Z", result)
    assert report.figures(record) == [("dev NLL after 50 updates, fp32 / bf16", "6.0000 / 6.1000"),
                                      ("dev NLL after 75 updates, fp32 / bf16", "5.2146 / 5.2171")]


def test_brevity_rows_give_each_search_and_the_models_early_stop():
    searches = [{"beam": 1, "alpha": 0.0, "bleu": 37.1, "bp": 0.937},
                {"beam": 4, "alpha": 0.6, "bleu": 37.7, "bp": 0.908}]
    result = {"checkpoints": {"runs/x/avg5": {"search": searches, "p_stop_early_sampling": 0.1234}}}
    assert report.figures(_record("brevity", "2026-01-01T00:00:00Z", result)) == [
        ("avg5, greedy: sacreBLEU (BP)", "37.10 (0.937)"),
        ("avg5, beam 4, alpha 0.6: sacreBLEU (BP)", "37.70 (0.908)"),
        ("avg5: P(stop before the reference ends), sampling", "0.123"),
    ]


def test_serve_load_rows_are_its_summary():
    summary = {"clients": 32, "throughput_ratio": 4.95, "p99_ms_dynamic": 286.7,
               "p99_ms_one_at_a_time": 744.2, "errors": 0, "dynamic_rss_mb_min_max": [350.2, 474.3],
               "dynamic_rss_mb_growth_repeat": 20.4}
    rows = dict(report.figures(_record("serve_load", "2026-01-01T00:00:00Z", {"summary": summary})))
    assert rows["32 clients: sentences/s, dynamic batching / one at a time"] == "4.95"
    assert rows["32 clients: p99 ms, dynamic / one at a time"] == "286.7 / 744.2"
    assert rows["resident MB over the run, dynamic batching"] == "350.2 to 474.3"
    assert rows["resident MB growth over the repeated 32-client cell"] == "20.4"
    peer = {**summary, "libretranslate_p99_ms": 900.0, "dynamic_vs_libretranslate_throughput": 2.5}
    rows = dict(report.figures(_record("serve_load", "2026-01-01T00:00:00Z", {"summary": peer})))
    assert rows["32 clients: sentences/s, dynamic batching / libretranslate (same model)"] == "2.50"
    peer["dynamic_vs_libretranslate_p50_at_1_client"] = 1.62
    model = {"d_model": 512, "layers": 6, "heads": 8, "d_ff": 2048, "parameters": 45_120_000}
    result = {"summary": peer, "model": model, "weights": "int8"}
    rows = dict(report.figures(_record("serve_load", "2026-01-01T00:00:00Z", result)))
    assert rows["p50 ms at 1 client, dynamic batching / libretranslate"] == "1.62"
    assert rows["model served, weights"] == "d_model 512, 6 + 6 layers, 45.1 M parameters; int8"


def test_serve_load_with_two_models_adds_the_mixed_rows():
    summary = {"clients": 32, "throughput_ratio": 4.95, "p99_ms_dynamic": 286.7,
               "p99_ms_one_at_a_time": 744.2, "errors": 0, "dynamic_rss_mb_min_max": [350.2, 474.3],
               "dynamic_rss_mb_growth_repeat": 20.4}
    mixed = {"models": ["en-de", "de-en"], "clients_per_model": 16,
             "rss_mb": {"one_model_ready": 300.5, "two_models_ready": 420.25},
             "summary": {"throughput_mixed_over_alone_a": 0.91, "throughput_mixed_over_alone_b": 0.875,
                         "lighter_p99_ms_mixed": 120.5, "lighter_p99_bound_ms": 140.0, "errors": 0}}
    rows = dict(report.figures(_record("serve_load", "2026-01-01T00:00:00Z",
                                       {"summary": summary, "mixed": mixed})))  # fmt: skip
    key = "two models (en-de, de-en), 16 clients each: sentences/s mixed / alone, en-de / de-en"
    assert rows[key] == "0.91 / 0.88"
    assert rows["two models: the lighter one's p99 ms mixed / its bound (alone + max wait + a batch)"] == "120.5 / 140"
    assert rows["resident MB once ready, one model / two models"] == "300.5 / 420.25"
    plain = dict(report.figures(_record("serve_load", "2026-01-01T00:00:00Z", {"summary": summary})))
    assert not any(name.startswith("two models") for name in plain)


def _noisy(trained: bool) -> dict:
    """A noisy_corpus.py result: the filters (always) and the trainings (`trained`)."""
    kinds = {"clean": {"pairs": 1000, "removed": 2, "share_removed": 0.002},
             "misaligned": {"pairs": 100, "removed": 14, "share_removed": 0.14},
             "wrong_language": {"pairs": 100, "removed": 100, "share_removed": 1.0}}
    filters = {"language": {"removed": 101, "precision": 0.9901,
                            "kinds": {"wrong_language": 100, "clean": 1}},
               "char_ratio": {"removed": 15, "precision": 0.9333,
                              "kinds": {"misaligned": 14, "clean": 1}}}
    result = {"updates": 300, "noise": {"share": 0.3, "seed": 1, "pairs": 1200},
              "filters": {"filters": filters, "kinds": kinds, "seconds": 4.5,
                          "targeted_recall": {"wrong_language": 1.0}, "clean_removed_share": 0.002}}
    if trained:
        seeds = [{"seed": 1}, {"seed": 2}]
        result["runs"] = {name: {"seeds": seeds} for name in ("clean", "noisy", "cleaned")}
        result["summary"] = {"mean_bleu": {"clean": {"test": 30.0}, "noisy": {"test": 25.5},
                                           "cleaned": {"test": 29.75}},
                             "test_gaps": {"noisy_minus_clean": -4.5, "cleaned_minus_clean": -0.25},
                             "seed_spread_test": 0.6}
    return {**_record("noisy_corpus", "2026-01-01T00:00:00Z", result), "file": "noisy.json"}


def test_noisy_corpus_rows_and_the_cleaning_page_read_the_result():
    rows = dict(report.figures(_noisy(trained=True)))
    assert rows["share removed of the wrong language pairs"] == "1.000"
    assert rows["share removed of the clean pairs"] == "0.0020"
    assert rows["test sacreBLEU, cleaned (300 updates)"] == "29.75"
    text = report.cleaning_text([_noisy(trained=False)])
    assert "| wrong language | 100 | 100.00% | language 100 |" in text
    assert "| misaligned (no filter targets it) | 100 | 14.00% | char_ratio 14 |" in text
    assert "| clean | 1,000 | 0.20% | language 1, char_ratio 1 |" in text  # most removed first
    assert "language 99.0% of 101; char_ratio 93.3% of 15. The trainings have not run" in text
    assert "have not run for this result" in text
    assert "[2026-01-01, abc1234](../benchmarks/results/noisy.json)" in text
    trained = report.cleaning_text([_noisy(trained=True)])
    assert "of 15. Trained 300 updates each (configs/multi30k.yaml, seeds 1, 2)" in trained
    assert "30.00 on the clean corpus, 25.50 on the noisy one and 29.75 on the noisy one cleaned" in trained
    assert "(-0.25 against clean; noisy -4.50; the seeds of a corpus differ by up to 0.60)" in trained
    chosen = _noisy(trained=True)
    for run, alphas in zip(chosen["result"]["runs"].values(), ((1.0, 0.6), (1.5, 1.0), (0.6, 0.6))):
        run["seeds"] = [{**seed, "alpha": a} for seed, a in zip(run["seeds"], alphas)]
    assert ("seeds 1, 2), each model's length penalty chosen on val (chosen: clean 1.0 / 0.6, "
            "noisy 1.5 / 1.0, cleaned 0.6 / 0.6), test_2016_flickr") in report.cleaning_text([chosen])
    assert "chosen on val" not in trained  # results from before the choice say nothing of it
    assert report.cleaning_text([]) == report.none_yet("noisy_corpus")


def test_gpu_levers_rows_give_each_lever_the_profile_and_the_loss_gap():
    result = {"rows": {"fast_compiled": {"tokens_per_s": 603543, "mfu_vs_989": 0.246,
                                         "projected_base_run_hours": 1.2},
                       "fast_compiled_100000": "out of memory"},
              "profile": {"share_by_kind": {"matrix_products": 0.38, "compiled_elementwise": 0.40},
                          "mfu_if_only_matrix_products": 0.647},
              "loss_curve": {"updates": 200, "eager_vs_compiled": {"mean": 0.0123},
                             "eager_vs_eager_other_dropout": {"mean": 0.0134}}}  # fmt: skip
    rows = report.figures(_record("gpu_levers", "2026-01-01T00:00:00Z", result))
    assert rows == [
        ("fast_compiled: target tokens/s, MFU (989 TFLOP/s), hours for 100k updates",
         "603,543, 0.246, 1.2"),
        ("fast_compiled_100000: target tokens/s, MFU (989 TFLOP/s), hours for 100k updates",
         "out of memory"),
        ("fast_compiled: GPU time by kernel kind", "compiled_elementwise 40%, matrix_products 38%"),
        ("fast_compiled: MFU if only its matrix products ran", "0.647"),
        ("loss over 200 updates, mean abs. difference: eager vs compiled / eager vs eager with "
         "other dropout masks", "0.0123 / 0.0134"),
    ]  # fmt: skip


def test_recipe_search_rows_rank_the_variants_by_dev_bleu():
    best = lambda bleu, k, apart: {"bleu": bleu, "bp": 0.99, "average_last": k, "apart": apart,
                                   "alpha": 1.5}  # noqa: E731
    result = {"stage": "search", "variants": [
        {"variant": "base", "updates": 5100, "best": best(39.5, 5, 1)},
        {"variant": "layers_6", "failed": 1},
        {"variant": "dropout_0.3", "updates": 5100, "best": best(40.1, 5, 2)}]}  # fmt: skip
    assert report.figures(_record("recipe_search", "2026-01-01T00:00:00Z", result)) == [
        ("dropout_0.3 (5100 updates): best dev sacreBLEU (BP), last 5 averaged, 2 saves apart, "
         "alpha 1.5", "40.10 (0.990)"),
        ("base (5100 updates): best dev sacreBLEU (BP), last 5 averaged, alpha 1.5", "39.50 (0.990)"),
    ]  # fmt: skip
    costs = {"stage": "costs", "seconds_per_update": {"base": 0.63, "layers_6": 1.1}}
    assert report.figures(_record("recipe_search", "2026-01-01T00:00:00Z", costs)) == [
        ("base: CPU seconds per update", "0.630"), ("layers_6: CPU seconds per update", "1.100")]


def test_before_after_lists_each_speed_ratio_against_the_named_commit():
    result = {"before": "265f22e", "train_small_tokens_per_s": {"before/aiayn": 2016},
              "train_small_after_over_before": 1.013, "train_base_after_over_before": 1.068,
              "translate_seconds": {"before/aiayn_float32": 10.4},
              "translate_aiayn_float32_after_over_before": 0.984}  # fmt: skip
    assert report.figures(_record("before_after", "2026-01-01T00:00:00Z", result)) == [
        ("training small: speed after / before 265f22e", "1.01"),
        ("training base: speed after / before 265f22e", "1.07"),
        ("beam search, aiayn_float32: speed after / before 265f22e", "0.98")]


def test_export_agreement_lists_identical_shares_and_each_systems_bleu():
    result = {"identical_to_aiayn": {"greedy": {"ctranslate2": 0.998, "argos": 1.0}},
              "bleu_beam4_alpha0.6": {"ctranslate2": 97.23, "aiayn": 97.28}}  # fmt: skip
    assert report.figures(_record("export_agreement", "2026-01-01T00:00:00Z", result)) == [
        ("identical to aiayn, greedy: ctranslate2 / argos", "0.998 / 1.000"),
        ("sacreBLEU, beam4_alpha0.6: ctranslate2 / aiayn", "97.23 / 97.28")]


def test_the_speed_plot_draws_ratios_only_not_lists_of_shares(tmp_path, monkeypatch):
    result = {"identical_to_aiayn": {"greedy": {"ctranslate2": 0.998, "argos": 1.0}}}
    drawn = []
    monkeypatch.setattr(report, "_save", lambda fig, path: drawn.append(fig))
    records = [_record("export_agreement", "2026-01-01T00:00:00Z", result),
               _record("train_speed", "2026-01-01T00:00:00Z", _speed(1.5))]  # fmt: skip
    report.plot_ratios(records, tmp_path / "ratios.png")
    (ax,) = drawn[0].axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels and all("train_speed" in label for label in labels)


def test_results_of_uncommitted_code_are_not_published_and_committed_ones_stand_in(tmp_path):
    dirty = _provenance(start=_state(dirty=True), end=_state(dirty=True))
    records = [
        _record("train_speed", "2026-01-01T00:00:00Z", _speed(1.11)),
        _record("train_speed", "2026-01-02T00:00:00Z", _speed(1.22), provenance=dirty),
        _record("serve_load", "2026-01-02T00:00:00Z", {}, provenance=dirty),
        {k: v for k, v in _record("demo", "2026-01-02T00:00:00Z", {}).items()},
    ]  # fmt: skip
    del records[3]["meta"]["provenance"]  # a file of the old layout: its dirty=False is not trusted
    _write(tmp_path / "results", records)
    loaded = report.load(tmp_path / "results")
    assert [r["file"] for r in report.published(loaded)] == ["0.json"]
    table = report.summary_tables(loaded)
    assert "1.11" in table and "1.22" not in table  # the newest result of committed code
    assert "Run here, not measured on committed code yet: `demo.py`, `serve_load.py`." in table
    assert "| `serve_load.py` |" not in table and "| `demo.py` |" not in table
    assert "(results/1.json)" not in table and "(results/2.json)" not in table
    readme = report.results_table(loaded)
    assert "| offline demo" not in readme
    assert "\nOffline demo (embedded En→De corpus): not measured on committed code yet.\n" in readme
    assert readme.split("\n\n")[1] in report.results_details(loaded)  # the same sentence there
    assert "Multi30k" not in readme  # never run: no row
    assert "of committed code yet" in report.extrapolation_text(
        [{**_record("length_extrapolation", "2026-01-01T00:00:00Z", EXTRAPOLATION, provenance=dirty),
          "file": "x.json"}])  # fmt: skip


@pytest.mark.parametrize(
    "provenance, reason",
    [(None, "no provenance (written before results.py recorded it): treated as uncommitted"),
     (_provenance(start=_state(dirty=True)), "uncommitted changes to code when it started: "
      "src/aiayn/x.py"),
     (_provenance(end=_state(dirty=True)), "the code changed during the run"),
     (_provenance(end=_state(commit="f" * 40)), "the code changed during the run"),
     (_provenance(start=_state(commit=None), end=_state(commit=None)), "not run in a git checkout"),
     ({**_provenance(), "aiayn_outside_checkout": "/elsewhere/src/aiayn"},
      "aiayn was imported from outside this checkout (/elsewhere/src/aiayn)"),
     (_provenance(), None)],
)  # fmt: skip
def test_why_a_result_is_not_one_of_committed_code(provenance, reason):
    record = _record("demo", "2026-01-01T00:00:00Z", {})
    record["meta"]["provenance"] = provenance
    if provenance is None:
        del record["meta"]["provenance"]
    assert report.provenance_problem(record) == reason


def test_a_row_whose_exercised_files_changed_since_says_it_is_stale(tmp_path):
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    for name in ("a.py", "b.py", "c.py", "d.py", "same.py"):
        (root / "src" / name).write_text(f"# {name}\n")
    blobs = {f"src/{name}": report.blob_id(f"# {name}\n".encode())
             for name in ("a.py", "b.py", "c.py", "d.py", "same.py")}  # fmt: skip
    fresh = _record("train_speed", "2026-01-01T00:00:00Z", _speed(1.5), "--sizes small",
                    provenance=_provenance(exercised=dict(blobs)))  # fmt: skip
    _write(tmp_path / "results", [fresh])
    assert "stale" not in report.summary_tables(report.load(tmp_path / "results", root))
    for name in ("a.py", "b.py", "c.py"):
        (root / "src" / name).write_text("# changed\n")
    (root / "src" / "d.py").unlink()  # removed counts as changed
    record = report.load(tmp_path / "results", root)[0]
    assert record["stale"] == ["src/a.py", "src/b.py", "src/c.py", "src/d.py"]
    table = report.summary_tables([record])
    assert "(results/0.json) (stale: changed since, src/a.py, src/b.py, src/c.py and 1 more)" in table
    assert report.provenance_problem(record) is None  # stale, yet published


def test_a_change_to_the_recorder_alone_stales_no_row(tmp_path):
    root = tmp_path / "root"
    (root / "benchmarks").mkdir(parents=True)
    (root / report.RECORDER).write_text("# changed since\n")
    exercised = {report.RECORDER: report.blob_id(b"# as it was\n")}
    record = _record("train_speed", "2026-01-01T00:00:00Z", _speed(1.5), "--sizes small",
                     provenance=_provenance(exercised=exercised))  # fmt: skip
    _write(tmp_path / "results", [record])
    assert report.load(tmp_path / "results", root)[0]["stale"] == []


def test_blob_id_is_gits():
    import subprocess

    text = b"x = 1\n"
    git = subprocess.run(["git", "hash-object", "--stdin"], input=text, capture_output=True,
                         check=True).stdout.decode().strip()  # fmt: skip
    assert report.blob_id(text) == git


def test_a_note_added_after_the_run_is_shown_as_such(tmp_path):
    record = _record("train_speed", "2026-01-01T00:00:00Z", _speed(1.5), note="quiet machine")
    record["annotation"] = "the note's machine was another job's"
    _write(tmp_path / "results", [record])
    table = report.summary_tables(report.load(tmp_path / "results"))
    assert ("(results/0.json): quiet machine (note added after the run: the note's machine was "
            "another job's)") in table  # fmt: skip


def test_report_prints_why_it_skips_a_file(tmp_path, monkeypatch, capsys):
    dirty = _provenance(start=_state(dirty=True), end=_state(dirty=True))
    _write(tmp_path / "results", [_record("demo", "2026-01-01T00:00:00Z", {}, provenance=dirty)])
    readme = tmp_path / "README.md"
    readme.write_text("<!-- report:begin results -->\n<!-- report:end results -->\n")
    monkeypatch.setattr(report, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(report, "READMES", {"results": readme})
    monkeypatch.setattr(report, "PLOTS", tmp_path / "plots")
    assert report.main([]) == 0
    err = capsys.readouterr().err
    assert "not published: 0.json: uncommitted changes to code when it started: src/aiayn/x.py" in err
    assert "Offline demo (embedded En→De corpus): not measured on committed code yet." in readme.read_text()
    assert report.main(["--check"]) == 0


PARSE_DEMO = {"benchmark": "parse_demo", "test_set": "demo treebank test split, 300 trees",
              "model": {"n_layers": 2, "d_model": 128, "n_heads": 4, "d_ff": 512},
              "train_steps": 3000, "strict_f1": 95.05,
              "evalb": {"f1": 99.87, "recall": 99.9, "precision": 99.84, "sentences": 300,
                        "error_sentences": 31, "skip_sentences": 0, "valid_sentences": 269,
                        "tagging_accuracy": 98.5},
              "evalb_max_error_stops_at": 57, "train_minutes": 4.1, "total_minutes": 4.6}  # fmt: skip


def test_parse_demo_row_gives_the_strict_f1_and_evalbs_beside_it():
    assert "parse demo" not in report.results_table([])
    record = {**_record("parse_demo", "2026-01-01T00:00:00Z", PARSE_DEMO), "file": "p.json"}
    row = report.results_details([record])
    assert "| offline parse demo (demo grammar treebank) | 2+2 layers, d_model 128, 3000 steps" in row
    assert ("F1 **95.05** strict; EVALB (COLLINS.prm) 99.87 over 269 of 300, 31 error, 0 skip"
            in row and "(../benchmarks/results/p.json)" in row)  # fmt: skip
    assert ("| offline parse demo (demo grammar treebank) | 2+2 layers, d_model 128 | demo "
            "treebank test split, 300 trees | F1 **95.05** | Test CPU, 2 CPUs, 4.1 min of "
            "training | — |") in report.results_table([record])  # fmt: skip
    rows = dict(report.figures(record))
    assert rows["sentences: valid / error / skip"] == "269 / 31 / 0 of 300"
    no_f1 = {**PARSE_DEMO, "evalb": {**PARSE_DEMO["evalb"], "f1": None}}
    assert dict(report.figures({**record, "result": no_f1}))["EVALB (COLLINS.prm) F1"] == "none"


def _mixed(mixed_total: float | None, worker: str | None = None) -> dict:
    """A serve_load.py --mixed result; `mixed_total`: the cores kept busy both at once (None:
    a result from before the cores were measured); `worker`: the server's `--worker` (None:
    a result from before the flag, whose models decoded in threads)."""
    cell = {"alone_a": (40.0, 350.0, 670.0), "alone_b": (41.0, 378.0, 547.5),
            "mixed_a": (30.0, 520.0, 1000.0), "mixed_b": (27.5, 576.0, 892.0)}
    mixed = {"models": ["en-de", "de-en"], "clients_per_model": 16, "max_wait_ms": 10,
             "cells": {k: {"sentences_per_s": s, "p50_ms": p50, "p99_ms": p99}
                       for k, (s, p50, p99) in cell.items()},
             "rss_mb": {"one_model_ready": 480.0, "two_models_ready": 580.0},
             "summary": {"throughput_mixed_over_alone_a": 0.75, "throughput_mixed_over_alone_b": 0.67,
                         "lighter_p99_ms_mixed": 892.0, "lighter_p99_bound_ms": 913.5,
                         "p99_target_met": True}}  # fmt: skip
    if mixed_total is not None:
        one = {"server": 0.98, "clients": 0.02, "total": 1.0}
        mixed["busy_cores"] = {"logical_cpus": 2, "alone_a": one, "alone_b": one,
                               "mixed": {"server": mixed_total, "clients": 0.0, "total": mixed_total}}
    result = {"server_threads": 1, "mixed": mixed}
    if worker is not None:
        result["server_worker"] = worker
    return {**_record("serve_load", "2026-01-01T00:00:00Z", result), "file": "load.json"}


def test_the_serve_many_page_reads_the_mixed_run_and_says_what_held_it_back():
    gil = report.serve_mixed_text([_mixed(1.5)])
    assert "| sentences/s both at once | 30 | 27.5 |" in gil
    assert "| both at once / alone (target 0.8) | 0.75 | 0.67 |" in gil
    assert "| p50 / p99 ms both at once | 520 / 1000 | 576 / 892 |" in gil
    assert "892 ms, is within its bound of 913.5 ms" in gil
    assert "1.00 with en-de alone, 1.00 with de-en alone and 1.50 with both" in gil
    assert "left 0.50 of a core idle" in gil and "interpreter lock" in gil
    assert "`--worker thread`" in gil and "`--worker process` gives each model" in gil
    assert report.serve_mixed_text([_mixed(1.5, "thread")]) == gil
    apart = report.serve_mixed_text([_mixed(1.5, "process")])
    assert "`--worker process`" in apart and "interpreter lock" not in apart
    assert "left 0.50 of a core idle, each model decoding in its own process" in apart
    busy = report.serve_mixed_text([_mixed(1.9)])
    assert "there the cores were the limit" in busy and "interpreter lock" not in busy
    older = report.serve_mixed_text([_mixed(None)])
    assert "Cores kept busy" not in older and "[2026-01-01, abc1234](../benchmarks/results/load.json)" in older
    plain = _record("serve_load", "2026-01-01T00:00:00Z", {"server_threads": 1})  # no --mixed
    assert report.serve_mixed_text([{**plain, "file": "x.json"}]) == report.none_yet("serve_load")
