"""The Inference Endpoints toolkit's contract: ``POST /`` and ``/predict`` (JSON with base64 ``inputs``, or the
audio itself), ``GET /`` and ``/health``; and ``POST /convert/{format}``, a response written as subtitles."""

from __future__ import annotations

from functools import partial
from typing import Literal

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from service.server.bodies import read_body, request_body
from service.server.errors import problems, route
from service.server.state import ServerContext
from speech.errors import InvalidParametersError
from speech.formats import WRITERS

_MEDIA_TYPES = {"json": "application/json", "vtt": "text/vtt", "srt": "application/x-subrip"}


def routes(context: ServerContext) -> list[Route]:
    return [
        Route("/", partial(health, context), methods=["GET"]),
        Route("/health", partial(health, context), methods=["GET"]),
        route("/", partial(predict, context), ["POST"]),
        route("/predict", partial(predict, context), ["POST"]),
        route("/convert/{format}", partial(convert, context), ["POST"]),
    ]


async def health(context: ServerContext, request: Request) -> Response:
    """200 once the models are loaded; 503 while they load, or if they failed to."""
    if context.slot.handler is not None:
        return JSONResponse({"status": "ok"})
    status = "failed" if context.slot.failure else "loading"
    return JSONResponse({"status": status}, status_code=503, headers={"Retry-After": "5"})


async def predict(context: ServerContext, request: Request) -> Response:
    """Admitted from the headers (or refused: 503, 413, 415), then the body is spooled and read in the worker."""
    with context.admit() as admission:
        body = await request_body(request, context.body_limit)
        admission.closing(body.close)
        return JSONResponse(await context.run(request, body.data))


async def convert(context: ServerContext, request: Request) -> Response:
    """A transcript (a response of this server, e.g. with its speakers renamed) in one of the ``WRITERS``' formats."""
    name = request.path_params["format"]
    if name not in WRITERS:
        raise InvalidParametersError(f"format: {name!r} is not one of {', '.join(WRITERS)}")
    try:
        transcript = ConvertibleTranscript.model_validate_json(await read_body(request, context.body_limit))
    except ValidationError as error:
        raise InvalidParametersError(f"the transcript is not one this server wrote: {problems(error)}") from None
    text = WRITERS[name](transcript.model_dump(), "audio")
    disposition = {"Content-Disposition": f'attachment; filename="transcript.{name}"'}
    return PlainTextResponse(text, media_type=_MEDIA_TYPES.get(name, "text/plain"), headers=disposition)


class _Turn(BaseModel):
    speaker: str | None
    text: str
    timestamp: tuple[float, float]
    channel: int | None = None


class _Word(BaseModel):
    word: str
    start: float
    end: float
    speaker: str | None
    channel: int | None = None


class _Task(BaseModel):
    task: Literal["transcribe", "translate"] = "transcribe"


class ConvertibleTranscript(BaseModel):
    """What the writers of ``formats`` read from a response: speaker turns, words if any, language and task."""

    speakers: list[_Turn]
    words: list[_Word] | None = None
    language: str | None = None
    parameters: _Task = _Task()
