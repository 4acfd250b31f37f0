"""LibreTranslate's API over the same service, as its clients (libretranslatepy,
libretranslate-aio) call it: JSON or form-encoded bodies, LibreTranslate's fields, answers,
errors (`{"error": ...}`, 400 for a bad request, 403 for a bad key, 429 past the limit).

    GET  /languages           [{"code", "name", "targets"}]: every language the models read
                              or write, with the targets each reaches (through English too)
    POST /translate           q (string or list), source ("auto" too), target, format
                              ("text" | "html"), alternatives, api_key -> {"translatedText",
                              "detectedLanguage" (source "auto": each text's, as
                              LibreTranslate detects them), "alternatives", "models" (a
                              server of several: those that translated, in order)}
    POST /detect              [{"confidence", "language"}], most likely first
    POST /translate_file      multipart: file (.txt, .html), source, target, api_key ->
                              {"translatedFileUrl"}, served by GET /download_file/NAME
    GET  /frontend/settings   the settings LibreTranslate's page reads
    POST /suggest             403: suggestions are not taken

Each model translates one pair (`models.py`); a pair without its own model goes through
English. `/detect` (and `source: "auto"`) tells apart the languages the models translate
from (`text.language`); a server of one source language names it with confidence 0, as
LibreTranslate answers when its detector finds nothing: an honest "not detected, assumed".
"""

from __future__ import annotations

import re
import uuid
from collections import OrderedDict
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile

from aiayn.serve import schema
from aiayn.serve.body import client_address, read_fields, unless_gone, upload
from aiayn.serve.keys import Access
from aiayn.serve.models import Model
from aiayn.serve.runner import Options
from aiayn.serve.service import ApiError, Service

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "hi": "Hindi",
    "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip
FILE_TYPES = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8"}
PATHS = ("/languages", "/translate", "/detect", "/translate_file", "/download_file/",
         "/frontend/settings", "/suggest")  # fmt: skip


def is_libre_path(path: str) -> bool:
    """Whether `path` is one of LibreTranslate's routes (whose refusals are all 400)."""
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in PATHS)


def _name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def _required(fields: dict, name: str) -> Any:
    value = fields.get(name)
    if value in (None, "", []):
        raise ApiError(400, f"Invalid request: missing {name} parameter")
    return value


def _code(fields: dict, name: str) -> str:
    value = _required(fields, name)
    if not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a language code")
    return value


def _alternatives(fields: dict, most: int) -> int:
    value = fields.get("alternatives", 0)
    text = value if isinstance(value, str) else None
    if isinstance(value, bool) or not (isinstance(value, int) or (text and text.strip().isdigit())):
        raise ApiError(400, "Invalid request: alternatives parameter is not a number")
    count = int(value)
    if count < 0:
        raise ApiError(400, "Invalid request: alternatives parameter must be >= 0")
    if count > most:
        raise ApiError(400, f"Invalid request: alternatives parameter must be <= {most} "
                            "(--max-beam - 1)")  # fmt: skip
    return count


def _file_type(file: UploadFile) -> str | None:
    """".txt" or ".html" by the file's name, else by its declared type; None if neither."""
    suffix = "." + (file.filename or "").rpartition(".")[2].lower()
    if suffix in FILE_TYPES:
        return suffix
    declared = (file.content_type or "").split(";")[0].strip().lower()
    return {"text/plain": ".txt", "text/html": ".html"}.get(declared)


def _unique(texts: list[str], best: str) -> list[str]:
    """The alternatives: each once, neither the translation itself nor empty."""
    seen, out = {best, ""}, []
    for text in texts:
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


class FileStore:
    """Translated files kept in memory for `/download_file`: the newest `capacity`."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._files: OrderedDict[str, tuple[str, bytes, str]] = OrderedDict()

    def add(self, filename: str, data: bytes, media_type: str) -> str:
        """Keep a file; the name to download it by (unguessable, the file's name last)."""
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", filename)[-100:] or "file"
        name = f"{uuid.uuid4().hex}.{safe}"
        self._files[name] = (filename, data, media_type)
        while len(self._files) > self.capacity:
            self._files.popitem(last=False)
        return name

    def get(self, name: str) -> tuple[str, bytes, str]:
        if name not in self._files:
            raise ApiError(404, f"no such file: {name} (files are kept for the newest "
                                f"{self.capacity} translations)")  # fmt: skip
        return self._files[name]


def libre_router(service: Service, access: Access) -> APIRouter:
    """LibreTranslate's routes over `service`, behind `access`'s keys and limits."""
    router, files = APIRouter(), FileStore()
    codes, config = service.models.codes(), service.config
    limit = config.max_body_bytes
    several = len(service.models.all) > 1

    async def fields_of(request: Request) -> dict:
        fields = await read_fields(request, limit)
        access.check(fields.get("api_key"), client_address(request))
        return fields

    @router.get("/languages", responses=schema.responses(schema.LANGUAGES), response_model=None)
    async def languages() -> list:
        """Each language, with the targets it reaches, directly or through English."""
        return service.models.languages(_name)

    @router.post(
        "/translate", response_model=None,
        openapi_extra=schema.json_body(schema.libre_translate_request(config, codes), form=True),
        responses=schema.responses(schema.LIBRE_TRANSLATION, 400, 403, 429, 503, 504),
    )  # fmt: skip
    async def translate(request: Request) -> dict:
        """Translate text(s) in LibreTranslate's shape."""
        fields = await fields_of(request)
        q = _required(fields, "q")
        texts = [q] if isinstance(q, str) else q
        if not isinstance(texts, list) or not all(isinstance(x, str) for x in texts):
            raise ApiError(400, "Invalid request: q must be a string or a list of strings")
        source, target = _code(fields, "source"), _code(fields, "target")
        text_format = fields.get("format", "text")
        if text_format not in ("text", "html"):
            raise ApiError(400, f"{text_format!r} format is not supported (text, html)")
        alternatives = _alternatives(fields, config.max_beam - 1)
        found = service.detect_each(texts) if source == "auto" else None
        sources = [code for code, _ in found] if found else [source] * len(texts)
        html, one = text_format == "html", isinstance(q, str)
        work = service.translate_each(texts, sources, target, html=html,
                                      options_for=lambda r: _options(service, alternatives, r))
        results = await unless_gone(request, work)
        best = [r.text for r in results]
        out: dict[str, Any] = {"translatedText": best[0] if one else best}
        if found is not None:
            detected = [_detection(*each) for each in found]
            out["detectedLanguage"] = detected[0] if one else detected
        if several:  # which models translated each text, e.g. two through English
            out["models"] = results[0].models if one else [r.models for r in results]
        if alternatives:  # none for HTML, as LibreTranslate
            others = [[] if html else _unique([t for t, _ in r.nbest[1:]], r.text) for r in results]
            out["alternatives"] = others[0] if isinstance(q, str) else others
        return out

    @router.post(
        "/detect", response_model=None, openapi_extra=schema.json_body(schema.DETECT_REQUEST,
                                                                      form=True),
        responses=schema.responses(schema.DETECTIONS, 400, 403, 429),
    )  # fmt: skip
    async def detect(request: Request) -> list:
        """The languages the server translates from, most likely first, confidence in
        percent (a server of one source language: that one, confidence 0)."""
        fields = await fields_of(request)
        q = _required(fields, "q")
        if not isinstance(q, str):
            raise ApiError(400, "Invalid request: q must be a string")
        return [_detection(code, p) for code, p in service.detect(q)]

    @router.post(
        "/translate_file", response_model=None, openapi_extra=schema.file_request(codes),
        responses=schema.responses(schema.obj({"translatedFileUrl": schema.STRING},
                                              ("translatedFileUrl",)), 400, 403, 429, 503, 504),
    )  # fmt: skip
    async def translate_file(request: Request) -> dict:
        """Translate a .txt or .html file; its URL to download it from."""
        fields = await fields_of(request)
        file = upload(fields, "file")
        if file is None:
            raise ApiError(400, "Invalid request: missing file parameter")
        source, target = _code(fields, "source"), _code(fields, "target")
        suffix = _file_type(file)
        if suffix is None:
            raise ApiError(400, "Invalid request: file format not supported (.txt, .html)")
        try:
            text = (await file.read()).decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise ApiError(400, f"Invalid request: the file is not UTF-8 ({err})") from None
        route = service.pick(source, target, [text])[0]
        work = service.translate_file(text, suffix == ".html", route)
        translated = await unless_gone(request, work)
        name = files.add(file.filename or "file", translated.encode(), FILE_TYPES[suffix])
        return {"translatedFileUrl": str(request.url_for("download_file", name=name))}

    @router.get(
        "/download_file/{name}", openapi_extra=schema.path_parameter("name"),
        responses={**schema.responses(None, 404),
                   200: {"description": "the translated file", "content": {
                       media: {"schema": schema.STRING} for media in FILE_TYPES.values()}}},
    )  # fmt: skip
    async def download_file(request: Request) -> Response:
        """A file /translate_file translated, as an attachment under its own name."""
        filename, data, media_type = files.get(request.path_params["name"])
        plain = re.sub(r'[^ -~]|["\\]', "_", filename)  # printable ASCII, then RFC 6266's
        disposition = f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(filename)}"
        return Response(data, media_type=media_type, headers={"Content-Disposition": disposition})

    @router.get("/frontend/settings", response_model=None,
                responses=schema.responses(schema.FRONTEND_SETTINGS))  # fmt: skip
    async def frontend_settings() -> dict:
        """The settings LibreTranslate's own page reads."""
        pair = [{"code": code or "", "name": _name(code) if code else "unknown"}
                for code in service.languages]  # the first model's
        return {
            "charLimit": -1, "frontendTimeout": int(config.timeout_s * 1000),
            "apiKeys": config.api_keys is not None, "keyRequired": config.req_limit == 0,
            "suggestions": False, "filesTranslation": True,
            "supportedFilesFormat": list(FILE_TYPES),
            "language": dict(zip(("source", "target"), pair)),
        }  # fmt: skip

    @router.post("/suggest", status_code=403, response_model=None,
                 responses={403: schema.responses(None, 403)[403]})  # fmt: skip
    async def suggest() -> dict:
        """Suggestions are not taken (LibreTranslate's answer when they are disabled)."""
        raise ApiError(403, "Suggestions are disabled on this server.")

    return router


def _detection(code: str, probability: float) -> dict:
    """LibreTranslate's detection: the language, its confidence in percent."""
    return {"confidence": round(100 * probability, 1), "language": code}


def _options(service: Service, alternatives: int, route: list[Model]) -> Options:
    """The (last) model's decoding, with a beam wide enough for `alternatives` more."""
    defaults = service.defaults(route[-1])
    if not alternatives:
        return defaults
    beam = max(defaults.beam, alternatives + 1)
    return Options(beam=beam, alpha=defaults.alpha, nbest=alternatives + 1)
