"""The HTTP layer of `aiayn serve` (FastAPI on uvicorn): routes, request checks, errors.

    POST /v1/translate  texts in, translations out (`v1.py`)
    GET  /health        alive;  GET /ready: 503 until the model has loaded and translated once
    GET  /info          model, languages, decoding defaults, limits, counts; every model
    GET  /heads         what each head does (`aiayn heads --json`, given as --heads), or 404
    GET  /              the web page (`web/serve.html`), nothing loaded from elsewhere
    GET  /openapi.json  every route, body, field and status (`schema.py`)

and LibreTranslate's routes (`libre.py`). Every error, on every route, is `{"error": message}`
with its status: 413 (too big), 422 (not valid), 403 / 429 (`keys.py`), 503 (not ready, queue
full: with Retry-After), 504 (past --timeout), 404 / 405 (no such route or method); on
LibreTranslate's routes 413 and 422 are 400, as there. None stops the server.
"""

from __future__ import annotations

import socket
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException

from aiayn.errors import CheckpointError, ConfigError
from aiayn.serve import schema, v1
from aiayn.serve.body import client_address, read_json, unless_gone
from aiayn.serve.keys import Access, read_api_keys
from aiayn.serve.libre import is_libre_path, libre_router
from aiayn.serve.service import ApiError, ServeConfig, Service
from aiayn.web import page

if TYPE_CHECKING:
    import uvicorn


def _error(request: Request, status: int, message: str, headers: dict | None = None
           ) -> JSONResponse:  # fmt: skip
    """The one error shape; LibreTranslate's routes answer 400 where ours say 413 or 422."""
    if status in (413, 422) and is_libre_path(request.url.path):
        status = 400
    return JSONResponse({"error": message}, status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def refused(request: Request, err: ApiError) -> JSONResponse:
        return _error(request, err.status, err.message, err.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        """Starlette's own: no such route (404), method (405), a malformed form (400)."""
        message = {404: f"no such route: {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(
            err.status_code, str(err.detail))  # fmt: skip
        return _error(request, err.status_code, message, err.headers)

    @app.exception_handler(Exception)
    async def crashed(request: Request, err: Exception) -> JSONResponse:
        """A bug: 500 in the same shape (uvicorn logs the traceback)."""
        return JSONResponse({"error": f"internal error: {type(err).__name__}: {err}"}, 500)


def create_app(service: Service) -> FastAPI:
    """The app; its lifespan starts the model's worker thread and stops it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        yield
        service.stop()

    config = service.config
    keys = read_api_keys(config.api_keys) if config.api_keys else None
    access = Access(keys, config.req_limit)
    app = FastAPI(title="aiayn", lifespan=lifespan, docs_url=None, redoc_url=None)
    _add_error_handlers(app)

    @app.post(
        "/v1/translate", response_model=None,
        openapi_extra=schema.json_body(schema.v1_request(config, service.models.codes())),
        responses=schema.responses(schema.V1_RESPONSE, 403, 413, 422, 429, 503, 504),
    )  # fmt: skip
    async def translate_v1(request: Request) -> dict:
        """Translate texts: the n best of each, with scores and, when asked, attention,
        word alignments and per-token log-probabilities."""
        data = await read_json(request, config.max_body_bytes)
        asked = v1.parse_v1(data, service)
        access.check(data.get("api_key"), client_address(request))
        work = service.translate_texts(asked.texts, asked.options, asked.wants,
                                       split=asked.split, html=asked.html,
                                       route=asked.route)  # fmt: skip
        results = await unless_gone(request, work)
        several = len(service.models.all) > 1
        return {"translations": [v1.answer(r, asked.wants, several) for r in results]}

    @app.get("/health", response_model=None,
             responses=schema.responses(schema.obj({"status": {"const": "ok"}}, ("status",))))
    async def health() -> dict:
        """Alive (the model may still be loading)."""
        return {"status": "ok"}

    @app.get("/ready", response_model=None,
             responses=schema.responses(schema.obj({"ready": {"const": True}}, ("ready",)), 503))
    async def ready() -> dict:
        """200 once the model has loaded and translated once."""
        service.check_ready()
        return {"ready": True}

    @app.get("/info", response_model=None, responses=schema.responses(schema.INFO))
    async def info() -> dict:
        """The (first) model, its languages, decoding defaults, limits, batching and counts;
        each model's under `models`."""
        return service.info()

    @app.get("/heads", response_model=None, responses=schema.responses(schema.HEADS, 404))
    async def heads() -> dict:
        """What each attention head does: the `aiayn heads` report given as --heads."""
        return service.head_report()

    @app.get("/", response_class=HTMLResponse,
             responses=schema.responses(schema.STRING, media="text/html"))
    async def index() -> str:
        """The web page."""
        return page("serve.html")

    app.include_router(libre_router(service, access))
    return app


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening socket (port 0: a free one); a clear error if it cannot be had.

    With TCP_NODELAY, which the connections it accepts inherit: a reply written in more than
    one piece goes out at once, instead of its last piece waiting for the client to
    acknowledge the first (Nagle's algorithm), which a client on a kept-alive connection
    holds back (delayed ACKs): that wait was most of a short request's time."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=2048)
    except OSError as err:
        raise ConfigError(f"cannot listen on {host}:{port} ({err.strerror or err})") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def server_config(app: FastAPI) -> uvicorn.Config:
    """uvicorn's settings for `app`: quiet, and on its fast protocol and loop, which the
    `serve` extra installs: httptools' C parser of HTTP and uvloop's event loop (libuv) in
    place of h11's parser (pure Python) and asyncio's selector loop (uvicorn's
    "auto" picks them where they are installed; on Windows, which uvloop lacks, asyncio's)."""
    import uvicorn

    return uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                          http="auto", loop="auto")  # fmt: skip


def serve(config: ServeConfig, announce=print) -> None:
    """Run the service until interrupted; `announce` gets the address line once listening.
    A model that cannot be loaded stops the server and raises CheckpointError."""
    import uvicorn

    service = Service(config)
    app = create_app(service)  # a bad --api-keys file fails here, before the port is taken
    sock = listening_socket(config.host, config.port)
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(server_config(app))
    for batcher in service.batchers:
        batcher.on_error = lambda message: setattr(server, "should_exit", True)
    shown = f"[{host}]" if ":" in host else host
    announce(f"aiayn serve: listening on http://{shown}:{port}/ (GET /ready: 200 once loaded)")
    server.run(sockets=[sock])
    if service.error:
        raise CheckpointError(service.error)
