"""The web pages' files (HTML, CSS, plain JS) and the one function that inlines them, so
every page aiayn writes or serves is a single file that loads nothing from elsewhere."""

from __future__ import annotations

import json
import re
from importlib import resources


def asset(name: str) -> str:
    """The text of one file of this folder, e.g. "attention.js"."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def script_json(data: object) -> str:
    """`data` as JSON that is safe inside a <script> element: "</" cannot end it early."""
    return json.dumps(data, ensure_ascii=False).replace("</", "<\\/")


def page(template: str, **parts: str) -> str:
    """`template` with each `{{NAME}}` replaced by `parts[NAME]`; "{{CSS}}" and "{{JS}}"
    are the attention view's own stylesheet and script unless given."""
    parts = {"CSS": asset("attention.css"), "JS": asset("attention.js"), **parts}
    # one pass: a part's own text (a sentence holding "{{TITLE}}", say) is never replaced
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: parts.get(m[1], m[0]), asset(template))
