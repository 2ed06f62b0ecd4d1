"""Local server around ``EndpointHandler``: the Inference Endpoints contract, OpenAI-compatible routes, a demo page.

``python -m cli serve`` (or ``make serve``) listens on 127.0.0.1:8000 (``HOST``/``PORT``). Routes:

- ``POST /`` and ``/predict``: JSON ``{"inputs": base64, "parameters": {...}}``, or raw audio bytes (``audio/*``,
  ``application/octet-stream``) with the parameters in the query string;
- ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``: OpenAI's multipart API;
- ``GET /health`` (and ``GET /``): 503 until the models are loaded, then 200;
- ``GET /ui``: a page to upload or record audio and see who said what.

Request errors are answered with their status code and a message; server errors with a 5xx and an error id that
is logged with the exception's type and stack, never with transcript text or audio.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from config import ModelSettings, ServerSettings
from errors import (
    AudioTooLongError,
    EndpointError,
    InvalidAudioError,
    InvalidParametersError,
    RequestCancelledError,
    RequestError,
    ServiceUnavailableError,
)
from formats import write_srt, write_vtt
from handler import EndpointHandler

logger = logging.getLogger("server")

DEMO_PAGE = Path(__file__).resolve().parent / "demo.html"
_RAW_AUDIO_TYPES = ("audio/", "video/", "application/octet-stream")
_OPENAI_FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
_OPENAI_LIST_FIELDS = ("known_speaker_names", "known_speaker_references")
"""Form fields that may repeat (``known_speaker_names[]``, as OpenAI's SDK sends lists), passed on as lists."""
_FORM_PART_BYTES = 4 * 1024 * 1024  # one form field: a known speaker reference's data URL (2 MiB of audio)
_BODY_OVERHEAD_BYTES = 1024 * 1024  # JSON or multipart framing around the audio
_DISCONNECT_POLL_S = 0.25


class WorkQueue:
    """Runs at most ``workers`` handler calls at once in threads, with ``queue_length`` more waiting.

    A request beyond that is refused at once (``ServiceUnavailableError``) instead of piling up in memory.
    """

    def __init__(self, workers: int, queue_length: int):
        self.limiter = anyio.CapacityLimiter(workers)
        self.capacity = workers + queue_length
        self.pending = 0

    async def run(self, function: Callable[[], dict]) -> dict:
        if self.pending >= self.capacity:
            raise ServiceUnavailableError(f"the server is busy ({self.pending} requests in progress); retry later")
        self.pending += 1
        try:
            return await anyio.to_thread.run_sync(function, limiter=self.limiter)
        finally:
            self.pending -= 1


class HandlerSlot:
    """The endpoint handler, loaded in a background thread so the server answers ``/health`` meanwhile."""

    def __init__(self, load: Callable[[], EndpointHandler]):
        self._load = load
        self.handler: EndpointHandler | None = None
        self.failure: str | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="load-models", daemon=True).start()

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            self.handler = self._load()
        except Exception as error:
            self.failure = f"{type(error).__name__}: {error}"
            logger.error("loading the models failed: %s", self.failure)
            return
        logger.info("models loaded in %.1f s", time.perf_counter() - started)

    def get(self) -> EndpointHandler:
        if self.handler is None:
            raise ServiceUnavailableError(
                "the models failed to load; see the server log" if self.failure else "the models are still loading"
            )
        return self.handler


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it exceeds ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise AudioTooLongError(f"the request body ({declared} bytes) is larger than the {limit}-byte limit")
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise AudioTooLongError(f"the request body is larger than the {limit}-byte limit")
    return bytes(body)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _error_id(error: BaseException) -> str:
    """Log a server error by id: exception types and stack only (messages may quote request content)."""
    error_id = uuid.uuid4().hex[:12]
    chain, cause = [], error
    while cause is not None:
        chain.append(type(cause).__name__)
        cause = cause.__cause__
    stack = "".join(traceback.format_tb(error.__traceback__))
    logger.error("error %s: %s\n%s", error_id, " <- ".join(chain), stack)
    return error_id


def _failure(error: Exception) -> tuple[int, str, str | None, dict[str, str]]:
    """Status, message, error id (server errors only) and headers for an exception."""
    if isinstance(error, ServiceUnavailableError):
        return error.status_code, str(error), None, {"Retry-After": str(error.retry_after_s)}
    if isinstance(error, RequestError):
        return error.status_code, str(error), None, {}
    message = str(error) if isinstance(error, EndpointError) else "internal server error"
    return 500, message, _error_id(error), {}


def _endpoint_route(
    route: Callable[[Request], Awaitable[Response]], openai_errors: bool
) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a route: time it, log it, and answer the project's errors in the route's error format."""

    async def wrapped(request: Request) -> Response:
        started = time.perf_counter()
        try:
            response = await route(request)
        except Exception as error:
            status, message, error_id, headers = _failure(error)
            if openai_errors:
                kind = "invalid_request_error" if status < 500 else "server_error"
                detail = {"message": message, "type": kind, "param": None, "code": status}
                body: dict = {"error": detail if error_id is None else {**detail, "id": error_id}}
            else:
                body = {"error": message, "error_type": type(error).__name__}
                if error_id is not None:
                    body["error_id"] = error_id
            response = JSONResponse(body, status_code=status, headers=headers)
        elapsed_ms = (time.perf_counter() - started) * 1000
        logger.info("%s %s -> %d in %.0f ms", request.method, request.url.path, response.status_code, elapsed_ms)
        return response

    return wrapped


def create_app(
    handler: EndpointHandler | None = None,
    model_settings: ModelSettings | None = None,
    server_settings: ServerSettings | None = None,
) -> Starlette:
    """The ASGI app. Without ``handler``, one is loaded from ``model_settings`` in the background at start-up."""
    server_settings = server_settings or ServerSettings()
    model_settings = handler.settings if handler is not None else model_settings or ModelSettings()
    slot = HandlerSlot(lambda: handler or EndpointHandler(settings=model_settings))
    queue = WorkQueue(server_settings.workers, server_settings.queue_length)
    body_limit = model_settings.max_request_bytes * 4 // 3 + _BODY_OVERHEAD_BYTES

    async def run(request: Request, data: dict) -> dict:
        """Run the handler in the work queue; stop it at its next checkpoint if the client disconnects."""
        endpoint = slot.get()
        disconnected = threading.Event()

        def stop_if_disconnected(stage: str, completed: int, total: int) -> None:
            if disconnected.is_set():
                raise RequestCancelledError(f"the client disconnected (during {stage})")

        async def watch() -> None:
            while not await request.is_disconnected():
                await anyio.sleep(_DISCONNECT_POLL_S)
            disconnected.set()

        result: dict = {}
        failure: Exception | None = None
        async with anyio.create_task_group() as tasks:  # raised in here, an error would come out grouped
            tasks.start_soon(watch)
            try:
                result = await queue.run(lambda: endpoint(data, progress=stop_if_disconnected))
            except Exception as error:
                failure = error
            tasks.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return result

    async def health(request: Request) -> Response:
        if slot.handler is not None:
            return JSONResponse({"status": "ok"})
        status = "failed" if slot.failure else "loading"
        return JSONResponse({"status": status}, status_code=503, headers={"Retry-After": "5"})

    async def predict(request: Request) -> Response:
        media_type = _media_type(request)
        body = await _read_body(request, body_limit)
        if media_type == "application/json":
            data = _json_object(body)
        elif media_type.startswith(_RAW_AUDIO_TYPES):
            data = {"inputs": body}
        else:
            raise InvalidAudioError(
                f"content type {media_type or 'missing'!r}: send JSON (application/json) with base64 'inputs', "
                "or the audio file itself as audio/* or application/octet-stream"
            )
        if "parameters" not in data and request.query_params:
            data["parameters"] = dict(request.query_params)
        return JSONResponse(await run(request, data))

    async def openai(request: Request, task: str) -> Response:
        if _media_type(request) != "multipart/form-data":
            raise InvalidParametersError("send the request as multipart/form-data with the audio as 'file'")
        body = await _read_body(request, body_limit)
        try:
            form = await _replayed(request, body).form(max_files=1, max_fields=64, max_part_size=_FORM_PART_BYTES)
        except (HTTPException, MultiPartException) as error:
            raise RequestError(f"the multipart body could not be read ({getattr(error, 'detail', error)})") from None
        try:
            audio, response_format, parameters, word_granularity = await _openai_request(form, task)
        finally:
            await form.close()
        response = await run(request, {"inputs": audio, "parameters": parameters})
        return _openai_response(response, response_format, task, word_granularity)

    async def transcriptions(request: Request) -> Response:
        return await openai(request, "transcribe")

    async def translations(request: Request) -> Response:
        return await openai(request, "translate")

    async def demo_page(request: Request) -> Response:
        return FileResponse(DEMO_PAGE, media_type="text/html")

    @asynccontextmanager
    async def lifespan(app: Starlette):
        slot.start()
        yield

    def route(path: str, endpoint, methods: list[str], openai_errors: bool = False) -> Route:
        return Route(path, _endpoint_route(endpoint, openai_errors), methods=methods)

    app = Starlette(
        routes=[
            Route("/", health, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/ui", demo_page, methods=["GET"]),
            route("/", predict, ["POST"]),
            route("/predict", predict, ["POST"]),
            route("/v1/audio/transcriptions", transcriptions, ["POST"], openai_errors=True),
            route("/v1/audio/translations", translations, ["POST"], openai_errors=True),
        ],
        lifespan=lifespan,
    )
    app.state.handler_slot = slot
    app.state.work_queue = queue
    return app


def _json_object(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RequestError(f"the body is not valid JSON ({error})") from None
    if not isinstance(data, dict) or "inputs" not in data:
        raise RequestError('the body must be a JSON object with "inputs" (base64 audio) and optional "parameters"')
    return data


def _replayed(request: Request, body: bytes) -> Request:
    """A copy of ``request`` whose body (already read and size-checked) is ``body``."""
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)


async def _openai_request(form, task: str) -> tuple[bytes, str, dict, bool]:
    """Audio, response format, handler parameters and whether words were asked for, from an OpenAI form."""
    fields = {key: form.getlist(key) for key in form}
    upload = fields.pop("file", [None])[0]
    if not isinstance(upload, UploadFile):
        raise InvalidParametersError("file: the audio file is missing (multipart field 'file')")
    granularities = fields.pop("timestamp_granularities[]", []) + fields.pop("timestamp_granularities", [])
    fields.pop("model", None)  # the server transcribes with the model it loaded, whatever the name
    lists = {name: fields.pop(f"{name}[]", []) + fields.pop(name, []) for name in _OPENAI_LIST_FIELDS}
    repeated = sorted(key for key, items in fields.items() if len(items) > 1)
    if repeated:
        raise InvalidParametersError(f"fields given more than once: {', '.join(repeated)}")
    files = sorted(key for key, items in {**fields, **lists}.items() if not all(isinstance(i, str) for i in items))
    if files:
        raise InvalidParametersError(f"only 'file' may be a file; got a file as {', '.join(files)}")
    values = {key: items[0] for key, items in fields.items()} | {name: items for name, items in lists.items() if items}
    response_format = values.pop("response_format", "json")
    if response_format not in _OPENAI_FORMATS:
        raise InvalidParametersError(f"response_format: {response_format!r} is not one of {', '.join(_OPENAI_FORMATS)}")
    unknown = set(granularities) - {"segment", "word"}
    if unknown:
        raise InvalidParametersError(f"timestamp_granularities[]: {sorted(unknown)} (use 'segment' and/or 'word')")
    if granularities and response_format not in ("verbose_json", "diarized_json"):
        raise InvalidParametersError(
            "timestamp_granularities[] needs response_format 'verbose_json' or 'diarized_json'"
        )
    if values.pop("stream", "false").lower() not in ("false", "0"):
        raise InvalidParametersError("stream: streaming is not supported by this server")
    if task == "translate" and "language" in values:
        raise InvalidParametersError("language: translations always produce English; do not set a language")
    word_granularity = "word" in granularities
    if word_granularity or response_format in ("srt", "vtt"):
        values["return_timestamps"] = "word"
    parameters = {**values, "task": task}
    return await upload.read(), response_format, parameters, word_granularity


def _openai_response(response: dict, response_format: str, task: str, words: bool) -> Response:
    """The handler's response in one of OpenAI's formats."""
    text, duration = response["text"], response["duration"]
    usage = {"type": "duration", "seconds": math.ceil(duration)}
    if response_format == "text":
        return PlainTextResponse(text + "\n")
    if response_format == "srt":
        return PlainTextResponse(write_srt(response))
    if response_format == "vtt":
        return PlainTextResponse(write_vtt(response), media_type="text/vtt")
    if response_format == "json":
        return JSONResponse({"text": text, "usage": usage})
    segments = [
        {"id": i, "start": t["timestamp"][0], "end": t["timestamp"][1], "text": t["text"], "speaker": t["speaker"]}
        for i, t in enumerate(response["speakers"])
    ]
    if response_format == "diarized_json":
        segments = [{"type": "transcript.text.segment", **s, "id": f"seg_{s['id']}"} for s in segments]
        body = {"task": task, "duration": duration, "text": text, "segments": segments, "usage": usage}
    else:
        language = LANGUAGES.get(response["language"], response["language"])
        body = {
            "task": task,
            "language": language,
            "duration": duration,
            "text": text,
            "segments": segments,
            "usage": usage,
        }
    if words:
        body["words"] = response["words"]
    return JSONResponse(body)
