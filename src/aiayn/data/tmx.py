"""TMX (Translation Memory eXchange), the format OPUS offers every corpus in: one stream of
translation units, each with one `<tuv xml:lang="..."><seg>text</seg></tuv>` per language.

    <tmx version="1.4">
      <header srclang="en" adminlang="en" segtype="sentence" datatype="PlainText" .../>
      <body>
        <tu><tuv xml:lang="de"><seg>Hallo Welt</seg></tuv>
            <tuv xml:lang="en"><seg>Hello world</seg></tuv></tu>
        ...

The sides are found by their `xml:lang` (TMX 1.1's `lang` too), not by their order:
`--src en` takes each unit's English segment, whatever its place; "en-GB" is English. The
file is parsed as a stream (each unit is dropped once read), so a multi-gigabyte `.tmx.gz`
never sits in memory. Inline codes (`<bpt>`, `<ept>`, `<ph>`, `<it>`, `<ut>`: the source
document's formatting) are left out of the text; the text of `<hi>` and `<sub>` is kept. A
unit without one of the two languages gives that side as empty (dropped from training,
kept in evaluation splits as an empty line, so that line numbers stay unit numbers).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from aiayn.data.language import base_code
from aiayn.errors import DataError

_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_CODES = {"bpt", "ept", "ph", "it", "ut"}  # inline native codes: not text


def seg_text(seg: ET.Element) -> str:
    """The text of a `<seg>`: its own text and that of `<hi>`/`<sub>`, not inline codes."""
    parts = [seg.text or ""]
    for child in seg:
        if child.tag not in _CODES:
            parts.append(seg_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _unit_segments(tu: ET.Element) -> dict[str, str]:
    """A unit's text by language (base codes; the first segment of each language)."""
    segments: dict[str, str] = {}
    for tuv in tu.iter("tuv"):
        lang = tuv.get(_XML_LANG) or tuv.get("lang")
        seg = tuv.find("seg")
        if lang is not None and seg is not None:
            segments.setdefault(base_code(lang), seg_text(seg))
    return segments


def read_tmx(handle: BinaryIO, path: Path, src: str, tgt: str) -> Iterator[tuple[str, str]]:
    """Stream the (src, tgt) segment pairs of the TMX file open as `handle` (named `path`).

    DataError if it is not XML, or if its first unit lacks either language (naming the
    languages it has: --src/--tgt mistyped, or the wrong file)."""
    wanted = (base_code(src), base_code(tgt))
    body: ET.Element | None = None
    count = 0
    try:
        for event, elem in ET.iterparse(handle, events=("start", "end")):
            if event == "start":
                if elem.tag == "body":
                    body = elem
                continue
            if elem.tag != "tu":
                continue
            count += 1
            segments = _unit_segments(elem)
            if count == 1 and not set(wanted) <= set(segments):
                found = ", ".join(sorted(segments)) or "none"
                raise DataError(f"{path}: its first translation unit has the languages "
                                f"{found}, not {src} and {tgt} (--src/--tgt)")  # fmt: skip
            yield segments.get(wanted[0], ""), segments.get(wanted[1], "")
            if body is not None:
                body.clear()  # the units read so far: memory stays flat
    except ET.ParseError as err:
        raise DataError(f"{path}: not a readable TMX file: {err}") from err
    if count == 0:
        raise DataError(f"{path}: no translation units (<tu>) in this TMX file")
