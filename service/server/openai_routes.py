"""OpenAI-compatible routes: ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` (OpenAI's multipart
API), answered in OpenAI's response formats, or streamed with ``stream=true`` (``openai_stream``)."""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from service.server.errors import route
from service.server.openai_form import read_openai_form
from service.server.openai_stream import stream
from service.server.state import ServerContext
from speech.formats import openai_json, write_srt, write_vtt
from speech.types import Response as TypedResponse


def routes(context: ServerContext) -> list[Route]:
    return [
        route("/v1/audio/transcriptions", partial(openai, context, "transcribe"), ["POST"], openai_errors=True),
        route("/v1/audio/translations", partial(openai, context, "translate"), ["POST"], openai_errors=True),
    ]


async def openai(context: ServerContext, task: str, request: Request) -> Response:
    """A transcription or translation (``task``) as OpenAI's API answers it; admitted from the headers."""
    with context.admit() as admission:
        asked = await read_openai_form(request, task, context.body_limit, admission)
        if asked.stream:
            segments = asked.response_format == "diarized_json"
            return await stream(context, request, admission.hand_over(), asked.data, segments)
        response = await context.respond(request, asked.data)
        return _openai_response(response, asked.response_format, task, asked.word_granularity)


def _openai_response(response: TypedResponse, response_format: str, task: str, words: bool) -> Response:
    """The handler's response in one of OpenAI's formats (``speech.formats``)."""
    if response_format == "text":
        return PlainTextResponse(response.transcript.text + "\n")
    if response_format == "srt":
        return PlainTextResponse(write_srt(response.speaker_transcript))
    if response_format == "vtt":
        return PlainTextResponse(write_vtt(response.speaker_transcript), media_type="text/vtt")
    return JSONResponse(openai_json(response, response_format, task, words))
