"""Request bodies, read within a size limit: the JSON or raw audio of ``POST /`` (and ``POST /jobs``)."""

from __future__ import annotations

import json

from starlette.requests import Request

from speech.errors import AudioTooLongError, InvalidAudioError, RequestError

RAW_AUDIO_TYPES = ("audio/", "video/", "application/octet-stream")
BODY_OVERHEAD_BYTES = 1024 * 1024  # JSON or multipart framing around the audio


def body_limit(max_request_bytes: int) -> int:
    """The largest body accepted for audio files of up to ``max_request_bytes``: base64 and the framing around it."""
    return max_request_bytes * 4 // 3 + BODY_OVERHEAD_BYTES


async def read_body(request: Request, limit: int) -> bytes:
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


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def request_data(request: Request, limit: int) -> dict:
    """``{"inputs", "parameters"}`` from a body of ``POST /``: JSON, or the audio with the query's parameters."""
    kind = media_type(request)
    body = await read_body(request, limit)
    if kind == "application/json":
        data = json_object(body)
    elif kind.startswith(RAW_AUDIO_TYPES):
        data = {"inputs": body}
    else:
        raise InvalidAudioError(
            f"content type {kind or 'missing'!r}: send JSON (application/json) with base64 'inputs', "
            "or the audio file itself as audio/* or application/octet-stream"
        )
    if "parameters" not in data and request.query_params:
        data["parameters"] = dict(request.query_params)
    return data


def json_object(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RequestError(f"the body is not valid JSON ({error})") from None
    if not isinstance(data, dict) or "inputs" not in data:
        raise RequestError('the body must be a JSON object with "inputs" (base64 audio) and optional "parameters"')
    return data


def replayed(request: Request, body: bytes) -> Request:
    """A copy of ``request`` whose body (already read and size-checked) is ``body``."""
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)
