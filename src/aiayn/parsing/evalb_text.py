"""EVALB's report as text: its error messages and summary blocks, where EVALB itself would
differ (`notes`), and the strict figure beside them (sec. 6.3; `evalb.py` scores)."""

from __future__ import annotations

from aiayn.parsing.evalb import CUTOFF_LEN, MAX_ERROR, Counts, EvalbResult


_LINES = [("Number of sentence        ", "sentences"), ("Number of Error sentence  ", "errors"),
          ("Number of Skip  sentence  ", "skips"), ("Number of Valid sentence  ", "valid"),
          ("Bracketing Recall         ", "recall"), ("Bracketing Precision      ", "precision"),
          ("Bracketing FMeasure       ", "f1"), ("Complete match            ", "complete_match"),
          ("Average crossing          ", "average_crossing"),
          ("No crossing               ", "no_crossing"),
          ("2 or less crossing        ", "two_or_less_crossing"),
          ("Tagging accuracy          ", "tagging_accuracy")]  # fmt: skip


def summary_block(title: str, counts: Counts) -> list[str]:
    """One block of EVALB's "=== Summary ===", line for line (an undefined F1 is ``nan``)."""
    figures = counts.figures()
    lines = [f"-- {title} --"]
    for name, key in _LINES:
        value = getattr(counts, key) if key not in figures else figures[key]
        lines.append(f"{name}= {value:6d}" if isinstance(value, int) else f"{name}= {value:6.2f}")
    return lines


def format_result(result: EvalbResult) -> str:
    """EVALB's error messages and summary, notes where EVALB itself would differ, the strict
    figure, and last ``F1 <strict F1>``."""
    lines = [f"{s.line} : {message}" for s in result.sentences for message in s.errors]
    lines += [f"{len(result.sentences) + 1} : {m}" for m in result.line_errors]
    lines += ["EVALB, COLLINS.prm, MAX_ERROR raised (evalb -p COLLINS.prm -e N):", ""]
    lines += summary_block("All", result.all) + [""]
    lines += summary_block(f"len<={CUTOFF_LEN}", result.short) + [""]
    lines += notes(result)
    s = result.strict
    lines += ["Strict, every error and skip sentence scored as a parse with no matching bracket:",
              f"Strict Recall             = {s.recall:6.2f}",
              f"Strict Precision          = {s.precision:6.2f}",
              f"Strict FMeasure           = {s.f1:6.2f}", f"F1 {s.f1:.2f}"]  # fmt: skip
    return "\n".join(lines)


def notes(result: EvalbResult) -> list[str]:
    """Where EVALB run as COLLINS.prm says would not print these figures, and why."""
    found = []
    if result.stops_at is not None and result.stops_at not in result.unreadable:
        found.append(f"note: EVALB with COLLINS.prm's MAX_ERROR {MAX_ERROR} stops at line "
                     f"{result.stops_at} and prints no summary")  # fmt: skip
    if result.unreadable:
        found.append(f"note: EVALB cannot read line(s) {_some(result.unreadable)} and stops "
                     "there whatever MAX_ERROR; each is counted here as an error sentence")
    beyond = [s.line for s in result.sentences if s.beyond_limits]
    if beyond:
        found.append(f"note: line(s) {_some(beyond)} exceed EVALB's limits (4,998 characters, "
                     "200 words or brackets, 29-character labels, 99-character words)")
    if result.line_errors:
        found.append(f"note: {result.gold_lines} gold lines, {result.test_lines} parse lines: "
                     f"EVALB scores the first {len(result.sentences)}; the strict figure counts "
                     "every gold line")  # fmt: skip
    return found + [""] * bool(found)


def _some(lines: list[int]) -> str:
    shown = ", ".join(map(str, lines[:10]))
    return shown + (f" and {len(lines) - 10} more" if len(lines) > 10 else "")


def format_brief(result: EvalbResult) -> str:
    """One line: EVALB's F1 and sentence counts, and the strict F1."""
    a, f1 = result.all, result.all.figures()["f1"]
    return (f"EVALB (COLLINS.prm): F1 {f1:.2f} over {a.valid} valid of {a.sentences} sentences "
            f"({a.errors} error, {a.skips} skip); strict F1 {result.strict.f1:.2f} (error and "
            "skip sentences scored as parses with no matching bracket)")
