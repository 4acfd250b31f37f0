"""Who may translate, and how often: LibreTranslate's `--api-keys` and `--req-limit`.

`--api-keys FILE` names the keys a client may send as `api_key`, one a line, each optionally
followed by its limit in requests a minute (none: no limit; `#` starts a comment):

    team-a-secret 600
    team-b-secret

An unknown key is refused (403). Requests without a key may make `--req-limit` requests a
minute from each client address (none: no limit; 0: a key is required, 403). Requests are
counted over the last minute, as LibreTranslate's moving window counts them; past the
limit, 429 with Retry-After. Without `--api-keys` a key is ignored, as LibreTranslate does.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from aiayn.errors import ConfigError
from aiayn.serve.service import ApiError

WINDOW_S = 60.0  # the limits are requests a minute


def read_api_keys(path: str | Path) -> dict[str, int | None]:
    """{key: its requests a minute, or None for no limit}; errors name the file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"--api-keys {path}: cannot read it ({err})") from None
    keys: dict[str, int | None] = {}
    for number, line in enumerate(lines, 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        limit = fields[1] if len(fields) == 2 else None
        if len(fields) > 2 or (limit is not None and not (limit.isdigit() and int(limit) > 0)):
            raise ConfigError(f"{path}:{number}: expected 'KEY' or 'KEY REQUESTS_PER_MINUTE' "
                              f"(at least 1), got {line.strip()!r}")  # fmt: skip
        keys[fields[0]] = None if limit is None else int(limit)
    if not keys:
        raise ConfigError(f"--api-keys {path}: the file names no key")
    return keys


class Access:
    """The check each translating request passes first; it runs in the event loop only."""

    def __init__(
        self,
        keys: dict[str, int | None] | None,
        default_limit: int | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys, self.default_limit, self.clock = keys, default_limit, clock
        self._recent: dict[str, deque[float]] = {}  # who -> times of their requests this minute

    def check(self, key: object, client: str) -> None:
        """Count one request of `key` (None: none sent) from `client`, or refuse it."""
        if key is not None and not isinstance(key, str):
            raise ApiError(422, '"api_key" must be a string')
        known = bool(key) and self.keys is not None  # without --api-keys a key means nothing
        if known and key not in self.keys:
            raise ApiError(403, "Invalid API key")
        limit = self.keys[key] if known else self.default_limit
        if limit is None:
            return
        if limit == 0:
            raise ApiError(403, "this server serves requests with an api_key only (--req-limit 0)")
        who = f"key {key}" if known else f"client {client}"
        now = self.clock()
        recent = self._recent.setdefault(who, deque())
        while recent and recent[0] <= now - WINDOW_S:
            recent.popleft()
        if len(recent) >= limit:
            wait = math.ceil(recent[0] + WINDOW_S - now)
            raise ApiError(429, f"Slowdown: {limit} per 1 minute",
                           {"Retry-After": str(max(wait, 1))})  # fmt: skip
        recent.append(now)
        self._forget_idle(now)

    def _forget_idle(self, now: float) -> None:
        """Drop who made no request this minute, so that memory follows the active clients."""
        if len(self._recent) > 1024:
            self._recent = {w: r for w, r in self._recent.items() if r and r[-1] > now - WINDOW_S}
