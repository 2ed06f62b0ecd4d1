"""Local server around ``EndpointHandler``: the Inference Endpoints contract, OpenAI-compatible routes, a demo page.

``python -m service.cli serve`` (or ``make serve``) listens on 127.0.0.1:8000 (``HOST``/``PORT``). Routes:

- ``POST /`` and ``/predict``: JSON ``{"inputs": base64, "parameters": {...}}``, or raw audio bytes (``audio/*``,
  ``application/octet-stream``) with the parameters in the query string;
- ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``: OpenAI's multipart API, with ``stream=true``
  answered as OpenAI's Server-Sent Events while the windows are decoded (``streaming``);
- ``POST /jobs`` (the bodies of ``POST /``), ``GET /jobs``, ``GET /jobs/{id}``, ``GET /jobs/{id}/result``,
  ``POST /jobs/{id}/cancel``, ``DELETE /jobs/{id}``: long recordings in the background, kept on disk (``jobs``);
- ``POST /convert/{format}``: a transcript (a response, e.g. with speakers renamed) as SRT, WebVTT, RTTM or text;
- ``GET /health`` (and ``GET /``): 503 until the models are loaded, then 200;
- ``GET /ui``: a page to upload or record audio and see who said what;
- ``GET /metrics``: Prometheus metrics.

With ``API_KEYS``, every route but ``/health`` and ``/ui`` needs ``Authorization: Bearer <key>``, and each key has its
own jobs. A request is admitted or refused from its headers; an admitted body is spooled and read in the worker.

Request errors are answered with their status code and a message; server errors with a 5xx and an error id that
is logged with the exception's type and stack, never with transcript text or audio.

The app (``app.create_app``) is built from one module per concern, each with its ``routes(context)``:

- ``state``: what the routes share (``ServerContext``): the handler, loaded in the background (``HandlerSlot``), the
  work queue and its admissions (``WorkQueue``), the jobs, the webhooks, the settings and the app's lifespan;
- ``auth``: API keys; ``observe``: metrics and the log line of each request;
- ``bodies``: request bodies spooled within a size limit; ``errors``: error bodies and error ids;
- ``toolkit_routes``: the Inference Endpoints contract (``/``, ``/predict``, ``/health``) and ``/convert``;
- ``openai_routes``: OpenAI's routes, with the form read by ``openai_form`` and the stream by ``openai_stream``;
- ``job_routes``: ``/jobs``; ``ui_routes``: ``/ui``.
"""

from service.server.app import create_app
from service.server.state import HandlerSlot, WorkQueue

__all__ = ["HandlerSlot", "WorkQueue", "create_app"]
