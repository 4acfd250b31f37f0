"""`aiayn serve`: a trained model behind HTTP (FastAPI + uvicorn, the `serve` extra).

- `batcher.py`: the queue and the worker thread; dynamic token-budget batches;
- `runner.py`: what the worker runs: a `Translator`, and attention maps when asked;
- `service.py`: `ServeConfig` (options and limits) and `Service` (checks, queueing, waits);
- `app.py`: the routes, the request checks, the errors; `serve(config)` runs it all.

The web page is `aiayn/web/serve.html`.
"""
