"""What cleaning removed, and the parent process's part of it (`Cleaning`).

The encoding workers judge each pair on its own (`clean.PairFilter`); the parent receives
their verdicts chunk by chunk, in input order, and here finds the duplicates, counts each
filter's removals with a few examples, writes every removed pair to the `--removed` file
(a TSV line: the pair's 1-based line in the training input, the filter, the two sides),
and stops `prepare` when one filter removes more than half the pairs: that is rarely noise
and often a mistake, such as --src and --tgt given the wrong way round.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from aiayn.data.clean import Deduplicator, Pair, PairFilter, Verdicts
from aiayn.data.prepare_options import FILTERS
from aiayn.errors import DataError
from aiayn.outfile import AtomicOutput

EXAMPLES = 3  # kept per filter, for the report
EXAMPLE_CHARS = 200  # of each side, in an example
HEAVY_SHARE = 0.5  # a filter removing more than this share of the pairs stops `prepare`
EARLY_CHECK = 100_000  # pairs after which a heavy filter is reported without reading on
RUN_ALWAYS = ("empty", "too_long", "ratio")


class Cleaning:
    """The parent's side of cleaning one training split (see the module docstring).

    `dry_run`: a heavy filter is a warning in the report instead of an error (the report is
    what a dry run is for). Use as a context manager: the `--removed` file is published
    only if the split was read to its end without error."""

    def __init__(self, pair_filter: PairFilter, removed: str | None = None,
                 dry_run: bool = False) -> None:  # fmt: skip
        self.pair_filter, self.dry_run = pair_filter, dry_run
        self.dedup = Deduplicator(pair_filter.options)
        self.read = 0
        self.counts = dict.fromkeys(self._filters_run(), 0)
        self.examples: dict[str, list[dict]] = {name: [] for name in self.counts}
        self.heavy: list[str] = []
        self._early_checked = False
        try:  # a file that cannot be written fails now, not after the corpus is read
            self._removed = AtomicOutput(removed) if removed is not None else None
        except OSError as err:
            raise DataError(f"{removed}: cannot write the removed pairs ({err.strerror})") from err

    def _filters_run(self) -> list[str]:
        """The filters this pass runs (a dry run has no vocabulary for the token filters)."""
        options = self.pair_filter.options
        token_filters = ("too_long", "ratio") if self.dry_run else ()
        return [name for name in FILTERS if name not in token_filters
                and (name in RUN_ALWAYS or options.runs(name))]  # fmt: skip

    def __enter__(self) -> Cleaning:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        if self._removed is not None:
            self._removed.close(complete=kind is None)

    def settle(self, chunk: list[Pair], verdicts: Verdicts) -> np.ndarray:
        """Record one chunk's removals (duplicates found here); return, over the pairs the
        worker kept (reason None), which stay: a duplicate of an earlier pair does not."""
        kept_by_worker = [r is None for r in verdicts.reasons]
        self.dedup.apply(verdicts)
        for i, reason in enumerate(verdicts.reasons):
            if reason is not None:
                self._remove(self.read + i + 1, reason, chunk[i])
        self.read += len(chunk)
        if self.read >= EARLY_CHECK and not self._early_checked:
            self._early_checked = True
            self.check_heavy()
        stays = [r is None for r in verdicts.reasons]
        return np.array([s for s, k in zip(stays, kept_by_worker) if k], bool)

    def _remove(self, line: int, reason: str, pair: Pair) -> None:
        self.counts[reason] += 1
        if len(self.examples[reason]) < EXAMPLES:
            src, tgt = (side[:EXAMPLE_CHARS] for side in pair)
            self.examples[reason].append({"line": line, "src": src, "tgt": tgt})
        if self._removed is not None:
            src, tgt = (side.replace("\t", " ") for side in pair)  # keep it 4 columns
            self._removed.handle.write(f"{line}\t{reason}\t{src}\t{tgt}\n")

    def check_heavy(self) -> None:
        """Stop (DataError naming the filter) if a cleaning filter removed more than half the
        pairs read, unless the options allow it or this is a dry run (then it is noted). The
        empty and token-length filters are not cleaning: the user sets their limits."""
        heavy = [n for n, c in self.counts.items()
                 if n not in RUN_ALWAYS and c > HEAVY_SHARE * max(self.read, 1)]  # fmt: skip
        self.heavy = heavy
        if not heavy or self.pair_filter.options.allow_heavy or self.dry_run:
            return
        name = heavy[0]
        hint = ""
        if name in ("language", "script"):
            hint = (f" are --src {self.pair_filter.src} and --tgt {self.pair_filter.tgt} the "
                    "languages of the two sides, in that order?")  # fmt: skip
        examples = "; ".join(f"line {e['line']}: {e['src'][:60]!r} -> {e['tgt'][:60]!r}"
                             for e in self.examples[name][:2])  # fmt: skip
        raise DataError(
            f"the {name} filter removed {self.counts[name]:,} of the first {self.read:,} "
            f"training pairs ({self.counts[name] / self.read:.0%}), more than half:{hint} "
            f"e.g. {examples}. See what it removes with --dry-run (or --removed FILE); "
            f"--skip-filter {name} turns it off, --allow-heavy-filtering goes on anyway"
        )

    def as_dict(self) -> dict:
        """The report kept in the manifest: options, notes, per filter count, share, examples."""
        read = max(self.read, 1)
        removed = {name: {"count": count, "share": round(count / read, 6),
                          "examples": self.examples[name]}
                   for name, count in self.counts.items()}  # fmt: skip
        return {"options": asdict(self.pair_filter.options), "notes": list(self.pair_filter.notes),
                "read": self.read, "kept": self.read - sum(self.counts.values()),
                "removed": removed, "heavy": list(self.heavy)}  # fmt: skip


def format_cleaning(report: dict) -> list[str]:
    """The report's lines as `prepare` prints them: one per filter, with examples."""
    read, kept = report["read"], report["kept"]
    gone = read - kept
    lines = [f"  cleaning of train: {read:,} pairs read, {gone:,} removed "
             f"({gone / max(read, 1):.1%}), {kept:,} kept"]  # fmt: skip
    for name, entry in report["removed"].items():
        lines.append(f"    {name:<15} {entry['count']:>10,}  {entry['share']:6.1%}")
        for example in entry["examples"][:2]:
            src, tgt = (_clip(example[side]) for side in ("src", "tgt"))
            lines.append(f"      line {example['line']}: {src} ||| {tgt}")
    lines += [f"    note: {note}" for note in report["notes"]]
    for name in report["heavy"]:
        lines.append(f"    warning: {name} removes more than half the pairs")
    return lines


def _clip(text: str, width: int = 50) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
