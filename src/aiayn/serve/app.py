"""The HTTP layer of `aiayn serve` (FastAPI on uvicorn): routes, request checks, errors.

    POST /v1/translate  {"text": str | [str], "beam", "alpha", "nbest", "attention": bool}
                        -> {"translations": [{"text", "score", "nbest", "attention"?}]}
    POST /translate     LibreTranslate's shape: {"q", "source", "target"} -> {"translatedText"}
    GET  /health        alive;  GET /ready: 503 until the model has loaded and translated once
    GET  /info          model, languages, decoding defaults, limits, counts
    GET  /              the web page (`web/serve.html`), nothing loaded from elsewhere

Every error is `{"error": message}` with its status: 413 (too big), 422 (not valid), 503
(not ready, queue full: with Retry-After), 504 (past --timeout). None stops the server.
"""

from __future__ import annotations

import json
import socket
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse

from aiayn.errors import CheckpointError, ConfigError
from aiayn.serve.runner import Options, Result
from aiayn.serve.service import ApiError, ServeConfig, Service
from aiayn.web import page

V1_FIELDS = {"text", "beam", "alpha", "nbest", "attention"}


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body; 413 past `limit` bytes (declared or read), 422 if invalid."""
    too_big = f"the body is larger than --max-body-bytes {limit}"
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, too_big)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, too_big)
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(422, f"invalid JSON: {err}") from None


def _texts(data: dict, name: str) -> list[str]:
    value = data.get(name)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return value
    raise ApiError(422, f'"{name}" must be a string or a list of strings')


def _int(data: dict, name: str, default: int, low: int, high: int, limit: str) -> int:
    value = data.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(422, f'"{name}" must be an integer, got {json.dumps(value)}')
    if not low <= value <= high:
        raise ApiError(422, f'"{name}" must be in {low}..{high} ({limit}), got {value}')
    return value


def parse_v1(data: Any, service: Service) -> tuple[list[str], Options, bool]:
    """The texts, decoding options and attention flag of a /v1/translate body; 422 if bad."""
    if not isinstance(data, dict):
        raise ApiError(422, "the body must be a JSON object")
    unknown = sorted(set(data) - V1_FIELDS)
    if unknown:
        raise ApiError(422, f"unknown field(s) {', '.join(unknown)}; known: {sorted(V1_FIELDS)}")
    defaults = service.defaults()
    beam = _int(data, "beam", defaults.beam, 1, service.config.max_beam, "--max-beam")
    nbest = _int(data, "nbest", 1, 1, beam, "at most the beam")
    alpha = data.get("alpha", defaults.alpha)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 <= alpha < 1e3:
        raise ApiError(422, f'"alpha" must be a number >= 0, got {json.dumps(alpha)}')
    attention = data.get("attention", False)
    if not isinstance(attention, bool):
        raise ApiError(422, f'"attention" must be true or false, got {json.dumps(attention)}')
    return _texts(data, "text"), Options(beam, float(alpha), nbest), attention


def _v1_result(result: Result) -> dict:
    text, score = result.nbest[0]
    out = {"text": text, "score": score, "nbest": [{"text": t, "score": s} for t, s in result.nbest]}
    if result.attention is not None:
        out["attention"] = result.attention
    return out


def _check_language(code: Any, ours: str | None, name: str) -> None:
    if not isinstance(code, str):
        raise ApiError(422, f'"{name}" must be a language code')
    if ours is not None and code != ours and not (name == "source" and code == "auto"):
        raise ApiError(422, f'"{name}" is {code!r}, but this model translates into and from '
                            f"its own languages only ({name}: {ours!r})")  # fmt: skip


def create_app(service: Service) -> FastAPI:
    """The app; its lifespan starts the model's worker thread and stops it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        yield
        service.stop()

    app = FastAPI(title="aiayn", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, err: ApiError) -> JSONResponse:
        return JSONResponse({"error": err.message}, err.status, headers=err.headers)

    @app.post("/v1/translate")
    async def translate_v1(request: Request) -> dict:
        service.check_ready()
        texts, options, attention = parse_v1(
            await read_json(request, service.config.max_body_bytes), service
        )
        results = await service.translate(texts, options, attention)
        return {"translations": [_v1_result(r) for r in results]}

    @app.post("/translate")
    async def translate_libre(request: Request) -> dict:
        service.check_ready()
        data = await read_json(request, service.config.max_body_bytes)
        if not isinstance(data, dict):
            raise ApiError(422, "the body must be a JSON object")
        _check_language(data.get("source", "auto"), service.languages[0], "source")
        _check_language(data.get("target", service.languages[1] or ""), service.languages[1],
                        "target")  # fmt: skip
        if data.get("format", "text") != "text":
            raise ApiError(422, '"format" must be "text" (HTML is not supported)')
        texts = _texts(data, "q")
        results = await service.translate(texts, service.defaults(), False)
        translated = [r.nbest[0][0] for r in results]
        return {"translatedText": translated[0] if isinstance(data["q"], str) else translated}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready")
    async def ready() -> dict:
        service.check_ready()
        return {"ready": True}

    @app.get("/info")
    async def info() -> dict:
        return service.info()

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return page("serve.html")

    return app


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening socket (port 0: a free one); a clear error if it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as err:
        raise ConfigError(f"cannot listen on {host}:{port} ({err.strerror or err})") from None


def serve(config: ServeConfig, announce=print) -> None:
    """Run the service until interrupted; `announce` gets the address line once listening.
    A model that cannot be loaded stops the server and raises CheckpointError."""
    import uvicorn

    service = Service(config)
    sock = listening_socket(config.host, config.port)
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn.Config(
        create_app(service), log_level="warning", access_log=False,
        timeout_graceful_shutdown=5,
    ))  # fmt: skip
    service.batcher.on_error = lambda message: setattr(server, "should_exit", True)
    shown = f"[{host}]" if ":" in host else host
    announce(f"aiayn serve: listening on http://{shown}:{port}/ (GET /ready: 200 once loaded)")
    server.run(sockets=[sock])
    if service.batcher.error:
        raise CheckpointError(service.batcher.error)
