"""Requests: their bodies read within `--max-body-bytes` (JSON, and the forms LibreTranslate
takes), and their clients watched while they wait for the model.

Every failure is an `ApiError` (413 past the limit, 422 for a body that cannot be read), so
that no body, however odd, reaches a handler as anything but a dict, a list or a value. A
client that leaves while its sentences wait in the queue takes them out of it unrun.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from starlette.datastructures import UploadFile
from starlette.requests import ClientDisconnect, Request

from aiayn.serve.service import ApiError


async def read_body(request: Request, limit: int) -> bytes:
    """The body's bytes; 413 past `limit` bytes, declared or read (it stops reading there)."""
    too_big = f"the body is larger than --max-body-bytes {limit}"
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, too_big)
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise ApiError(413, too_big)
    except ClientDisconnect:  # nobody to answer: an error that no traceback reports
        raise ApiError(400, "the client left before sending its whole body") from None
    return bytes(body)


T = TypeVar("T")


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; if the client disconnects first, `work` is cancelled (its queued
    sentences are dropped unrun) and the answer, an error, goes nowhere."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(gone())
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watch.cancel()
    if task not in done:
        task.cancel()
        raise ApiError(400, "the client left before its answer")
    return task.result()


MAX_DEPTH = 100  # JSON nesting a body may have: the APIs' bodies are 3 levels deep


def _check_text(value: Any, depth: int = 0) -> None:
    """Strings that UTF-8 can carry: JSON's escapes can spell lone surrogates ("\\ud800");
    and nesting within MAX_DEPTH, whatever recursion limit the process runs under (the
    parser's own limit moves with it: a test library may raise it)."""
    if depth > MAX_DEPTH:
        raise ApiError(422, f"invalid JSON: nested too deeply (over {MAX_DEPTH} levels)")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ApiError(422, f"invalid JSON: a string holds a lone surrogate ({err.reason} "
                                f"at {err.start})") from None  # fmt: skip
    elif isinstance(value, list):
        for item in value:
            _check_text(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, depth + 1)
            _check_text(item, depth + 1)


def parse_json(body: bytes) -> Any:
    """The body as JSON; 422 if it is not JSON, or nests deeper than Python can parse."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(422, f"invalid JSON: {err}") from None
    except RecursionError:
        raise ApiError(422, "invalid JSON: nested too deeply") from None
    try:
        _check_text(data)
    except RecursionError:
        raise ApiError(422, "invalid JSON: nested too deeply") from None
    return data


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body (whatever its Content-Type, as curl's `-d` sends a form's)."""
    return parse_json(await read_body(request, limit))


def is_json(request: Request) -> bool:
    """Whether the body is declared JSON (`application/json`, `application/*+json`)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or (
        kind.startswith("application/") and kind.endswith("+json"))  # fmt: skip


async def read_fields(request: Request, limit: int) -> dict[str, Any]:
    """LibreTranslate's request fields: the JSON object of a JSON body, else the query
    string's and the form's (url-encoded or multipart), as Flask's `request.values`; a
    repeated field is a list, an uploaded file an `UploadFile`."""
    body = await read_body(request, limit)
    if is_json(request):
        data = parse_json(body)
        if not isinstance(data, dict):
            raise ApiError(400, "Invalid JSON format: the body must be a JSON object")
        return data

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    form = await Request(request.scope, receive).form(max_part_size=limit)
    fields: dict[str, Any] = {}
    for source in (request.query_params, form):
        for name in source:
            values = source.getlist(name)
            fields[name] = values[0] if len(values) == 1 else values
    return fields


def client_address(request: Request) -> str:
    """The client's address, as the connection gives it (X-Forwarded-For is not trusted)."""
    return request.client.host if request.client else ""


def upload(fields: dict[str, Any], name: str) -> UploadFile | None:
    """The file uploaded as `name`, if one was."""
    value = fields.get(name)
    return value if isinstance(value, UploadFile) else None
