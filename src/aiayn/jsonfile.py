"""Reading the small JSON files aiayn writes (manifests, vocabulary and checkpoint metadata)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiayn.errors import AiaynError


def read_object(path: Path, error: type[AiaynError]) -> dict[str, Any]:
    """The JSON object in `path`; `error` (naming the file) if it cannot be read, is cut
    short or is not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{path}: unreadable or not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: not a JSON object")
    return data
