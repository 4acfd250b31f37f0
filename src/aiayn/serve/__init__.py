"""`aiayn serve`: trained models behind HTTP (FastAPI + uvicorn, the `serve` extra).

- `batcher.py`: the queue and the worker thread; dynamic token-budget batches; the turns
  the models' batchers take on the device;
- `models.py`: the checkpoints served, by pair; a request's route (through English where
  no model translates the pair);
- `pivot.py`: a sentence translated through English, its alignment composed;
- `runner.py`: what the worker runs: a `Translator`, and attention maps, word alignments
  and per-token log-probabilities when asked;
- `worker.py`: a model in a process of its own (`--worker process`, the default), the
  batcher's runner talking to it in JSON;
- `service.py`: `ServeConfig` (options and limits) and `Service` (checks, queueing, waits);
- `texts.py`: a request's texts cut into sentences (plain or HTML) and put back together;
- `body.py`: request bodies read within the limits; clients that leave;
- `keys.py`: `--api-keys` and `--req-limit`;
- `schema.py`: the OpenAPI description of every route, body and status;
- `v1.py`: `POST /v1/translate`'s fields and answer;
- `libre.py`: LibreTranslate's API over the same service;
- `app.py`: the routes, the errors; `serve(config)` runs it all.

The web page is `aiayn/web/serve.html`; language identification is `aiayn.text.language`.
"""
