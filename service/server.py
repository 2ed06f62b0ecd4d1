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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from config import InferenceConfig, ModelSettings, ServerSettings
from handler import EndpointHandler
from service.jobs import JobStore
from service.streaming import StreamEvent, TextDelta, TurnUpdate
from speech.audio import request_bytes
from speech.errors import (
    AudioTooLongError,
    EndpointError,
    InvalidAudioError,
    InvalidParametersError,
    RequestCancelledError,
    RequestError,
    ServiceUnavailableError,
)
from speech.formats import WRITERS, write_srt, write_vtt
from speech.speakers.voiceprints import MAX_REFERENCE_BYTES

logger = logging.getLogger("server")

DEMO_PAGE = Path(__file__).resolve().parent / "demo.html"
_RAW_AUDIO_TYPES = ("audio/", "video/", "application/octet-stream")
_OPENAI_FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
_STREAMED_FORMATS = ("json", "text", "diarized_json")  # OpenAI streams these; segments with diarized_json
_OPENAI_LIST_FIELDS = ("known_speaker_names", "known_speaker_references")
"""Form fields that may repeat (``known_speaker_names[]``, as OpenAI's SDK sends lists), passed on as lists."""
_FORM_PART_BYTES = MAX_REFERENCE_BYTES * 4 // 3 + 1024  # one form field: a reference's data URL
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
            body = _openai_error(status, message, error_id) if openai_errors else {"error": message}
            if not openai_errors:
                body["error_type"] = type(error).__name__
                if error_id is not None:
                    body["error_id"] = error_id
            response = JSONResponse(body, status_code=status, headers=headers)
        elapsed_ms = (time.perf_counter() - started) * 1000
        logger.info("%s %s -> %d in %.0f ms", request.method, request.url.path, response.status_code, elapsed_ms)
        return response

    return wrapped


def _openai_error(status: int, message: str, error_id: str | None) -> dict:
    """An error body as OpenAI's API writes it (``error_id`` for server errors)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    detail = {"message": message, "type": kind, "param": None, "code": status}
    return {"error": detail if error_id is None else {**detail, "id": error_id}}


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
    store = JobStore(server_settings.jobs_dir)
    demo_page_html = DEMO_PAGE.read_text().replace(
        "{{DEMO_JOB_MIN_DURATION_S}}", f"{server_settings.demo_job_min_duration_s:g}"
    )
    background: list[TaskGroup] = []  # the app's task group, from start-up to shutdown

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

    async def stream(data: dict, segments: bool) -> Response:
        """Run the handler in the background and answer its events as they come (OpenAI's transcription stream,
        speaker turns as ``transcript.text.segment`` when ``segments``). The answer starts once the audio is decoded,
        so that a bad file or parameter still gets its status; a client that goes away stops the work."""
        endpoint = slot.get()
        send, receive = anyio.create_memory_object_stream[_Streamed](math.inf)
        stopped = threading.Event()

        def report(item: _Streamed) -> None:
            if stopped.is_set():
                raise RequestCancelledError("the client disconnected")
            anyio.from_thread.run_sync(send.send_nowait, item)

        def call() -> dict:
            return endpoint(data, progress=lambda *stage: report(_Stage(*stage)), emit=report)

        async def work() -> None:
            with send:
                try:
                    send.send_nowait(await queue.run(call))
                except Exception as error:
                    send.send_nowait(error)

        background[0].start_soon(work)
        first = await receive.receive()
        while isinstance(first, _Stage) and first.stage == "decoding":
            first = await receive.receive()
        if isinstance(first, Exception):
            raise first
        return StreamingResponse(_sse(first, receive, stopped, segments), media_type="text/event-stream")

    async def request_data(request: Request) -> dict:
        """``{"inputs", "parameters"}`` from a body of ``POST /``: JSON, or the audio with the query's parameters."""
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
        return data

    async def predict(request: Request) -> Response:
        return JSONResponse(await run(request, await request_data(request)))

    async def submit_job(request: Request) -> Response:
        data = await request_data(request)
        parameters = data.get("parameters") or {}
        InferenceConfig.from_parameters(parameters)
        job = store.submit(request_bytes(data["inputs"], model_settings.max_request_bytes), parameters)
        return JSONResponse(asdict(job), status_code=202, headers={"Location": f"/jobs/{job.id}"})

    async def list_jobs(request: Request) -> Response:
        return JSONResponse({"jobs": [asdict(job) for job in store.all()]})

    async def job_state(request: Request) -> Response:
        return JSONResponse(asdict(store.get(request.path_params["job_id"])))

    async def job_result(request: Request) -> Response:
        return JSONResponse(store.result(request.path_params["job_id"]))

    async def cancel_job(request: Request) -> Response:
        return JSONResponse(asdict(store.cancel(request.path_params["job_id"])))

    async def delete_job(request: Request) -> Response:
        store.delete(request.path_params["job_id"])
        return Response(status_code=204)

    async def convert(request: Request) -> Response:
        name = request.path_params["format"]
        if name not in WRITERS:
            raise InvalidParametersError(f"format: {name!r} is not one of {', '.join(WRITERS)}")
        try:
            transcript = ConvertibleTranscript.model_validate_json(await _read_body(request, body_limit))
        except ValidationError as error:
            raise InvalidParametersError(f"the transcript is not one this server wrote: {_problems(error)}") from None
        text = WRITERS[name](transcript.model_dump(), "audio")
        disposition = {"Content-Disposition": f'attachment; filename="transcript.{name}"'}
        return PlainTextResponse(text, media_type=_MEDIA_TYPES.get(name, "text/plain"), headers=disposition)

    async def openai(request: Request, task: str) -> Response:
        if _media_type(request) != "multipart/form-data":
            raise InvalidParametersError("send the request as multipart/form-data with the audio as 'file'")
        body = await _read_body(request, body_limit)
        try:
            form = await _replayed(request, body).form(max_files=1, max_fields=64, max_part_size=_FORM_PART_BYTES)
        except (HTTPException, MultiPartException) as error:
            raise RequestError(f"the multipart body could not be read ({getattr(error, 'detail', error)})") from None
        try:
            asked = await _openai_request(form, task)
        finally:
            await form.close()
        data = {"inputs": asked.audio, "parameters": asked.parameters}
        if asked.stream:
            return await stream(data, segments=asked.response_format == "diarized_json")
        response = await run(request, data)
        return _openai_response(response, asked.response_format, task, asked.word_granularity)

    async def transcriptions(request: Request) -> Response:
        return await openai(request, "transcribe")

    async def translations(request: Request) -> Response:
        return await openai(request, "translate")

    async def demo_page(request: Request) -> Response:
        return HTMLResponse(demo_page_html)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        slot.start()
        async with anyio.create_task_group() as tasks:
            background.append(tasks)
            for _ in range(server_settings.workers):
                tasks.start_soon(store.work, slot.get, queue.limiter)
            yield
            store.stop()
            tasks.cancel_scope.cancel()

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
            route("/jobs", submit_job, ["POST"]),
            route("/jobs", list_jobs, ["GET"]),
            route("/jobs/{job_id}", job_state, ["GET"]),
            route("/jobs/{job_id}", delete_job, ["DELETE"]),
            route("/jobs/{job_id}/result", job_result, ["GET"]),
            route("/jobs/{job_id}/cancel", cancel_job, ["POST"]),
            route("/convert/{format}", convert, ["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.handler_slot = slot
    app.state.work_queue = queue
    app.state.job_store = store
    return app


@dataclass(frozen=True)
class _Stage:
    """A progress report of the handler: ``(stage, completed, total)``."""

    stage: str
    completed: int
    total: int


_Streamed = _Stage | StreamEvent | dict | Exception
"""What a streamed request's handler call sends: progress, transcript events, then its response or its failure."""


async def _sse(
    first: _Streamed, rest: MemoryObjectReceiveStream[_Streamed], stopped: threading.Event, segments: bool
) -> AsyncIterator[str]:
    """The handler's stream as Server-Sent Events: OpenAI's ``transcript.text.delta``, ``transcript.text.segment``
    (with ``segments``; a revision, an id sent before, has ``"revision": true``) and ``transcript.text.done``, or an
    ``error`` event; progress as comment lines (``: transcription 2/5``), which clients skip."""
    item = first
    try:
        while True:
            if isinstance(item, Exception):
                status, message, error_id, _ = _failure(item)
                yield _event({"type": "error", **_openai_error(status, message, error_id)})
                return
            if isinstance(item, dict):
                yield _event({"type": "transcript.text.done", "text": item["text"]})
                return
            if isinstance(item, _Stage):
                yield f": {item.stage} {item.completed}/{item.total}\n\n"
            elif isinstance(item, TextDelta):
                yield _event({"type": "transcript.text.delta", "delta": item.text})
            elif isinstance(item, TurnUpdate) and segments:
                turn = item.turn
                segment = {"id": f"seg_{item.index}", "start": turn.start, "end": turn.end, "text": turn.text}
                revision = {"revision": True} if item.revision else {}
                yield _event({"type": "transcript.text.segment", **segment, "speaker": turn.speaker, **revision})
            item = await rest.receive()
    finally:
        stopped.set()
        rest.close()


def _problems(error: ValidationError) -> str:
    """A validation error's problems, each with where it is (``speakers.0.timestamp: ...``)."""
    return "; ".join(f"{'.'.join(str(part) for part in e['loc']) or 'body'}: {e['msg']}" for e in error.errors())


def _event(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


_MEDIA_TYPES = {"json": "application/json", "vtt": "text/vtt", "srt": "application/x-subrip"}


class _Turn(BaseModel):
    speaker: str | None
    text: str
    timestamp: tuple[float, float]


class _Word(BaseModel):
    word: str
    start: float
    end: float
    speaker: str | None


class _Task(BaseModel):
    task: Literal["transcribe", "translate"] = "transcribe"


class ConvertibleTranscript(BaseModel):
    """What the writers of ``formats`` read from a response: speaker turns, words if any, language and task."""

    speakers: list[_Turn]
    words: list[_Word] | None = None
    language: str | None = None
    parameters: _Task = _Task()


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


@dataclass(frozen=True)
class OpenAIRequest:
    """An OpenAI transcription or translation form, read: the audio, the response format, the handler's
    parameters, whether words were asked for and whether the answer is streamed."""

    audio: bytes
    response_format: str
    parameters: dict
    word_granularity: bool
    stream: bool


class ServerVad(BaseModel):
    """OpenAI's ``server_vad`` chunking strategy, validated; windows are cut here as with ``"auto"``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["server_vad"]
    prefix_padding_ms: int = Field(default=300, ge=0)
    silence_duration_ms: int = Field(default=200, ge=0)
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)


def _check_chunking_strategy(values: dict) -> None:
    """Take ``chunking_strategy`` out of the form's ``values``: ``auto``, or a ``server_vad`` object given as JSON
    or as ``chunking_strategy[field]`` fields (as OpenAI's SDK sends it). Either is accepted and changes nothing
    here: long audio is always cut into windows of at most ``chunk_length_s`` at its quietest moments, and the
    diarization's segmentation is the voice activity detection that leaves out text away from speech."""
    prefix = "chunking_strategy"
    given = {key: values.pop(key) for key in [key for key in values if key.split("[")[0] == prefix]}
    if not given or given == {prefix: "auto"}:
        return
    try:
        if prefix in given:
            strategy = json.loads(given.pop(prefix))
            if given or not isinstance(strategy, dict):
                raise ValueError("expected 'auto' or one server_vad object")
        else:
            strategy = {key[len(prefix) + 1 : -1]: value for key, value in given.items()}
        ServerVad.model_validate(strategy)
    except (ValueError, ValidationError) as error:
        problem = _problems(error) if isinstance(error, ValidationError) else str(error)
        raise InvalidParametersError(f"chunking_strategy: 'auto' or a server_vad object ({problem})") from None


async def _openai_request(form, task: str) -> OpenAIRequest:
    """The request an OpenAI form makes."""
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
    stream = values.pop("stream", "false").lower()
    if stream not in ("true", "1", "false", "0"):
        raise InvalidParametersError(f"stream: {stream!r} is not true or false")
    if stream in ("true", "1") and response_format not in _STREAMED_FORMATS:
        raise InvalidParametersError(f"stream: use response_format {' or '.join(_STREAMED_FORMATS)}")
    _check_chunking_strategy(values)
    if task == "translate" and "language" in values:
        raise InvalidParametersError("language: translations always produce English; do not set a language")
    word_granularity = "word" in granularities
    if word_granularity or response_format in ("srt", "vtt"):
        values["return_timestamps"] = "word"
    parameters = {**values, "task": task}
    return OpenAIRequest(await upload.read(), response_format, parameters, word_granularity, stream in ("true", "1"))


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
