"""Request bodies, read within a size limit and spooled to disk beyond a few MB: the JSON or raw audio of
``POST /`` (and ``POST /jobs``). Reading the body off the event loop (``RequestBody.data``) happens in the worker
thread, once the request's turn has come."""

from __future__ import annotations

import binascii
import io
import json
import re
import tempfile
from dataclasses import dataclass
from typing import IO

import anyio.to_thread
from starlette.requests import Request

from speech.errors import AudioTooLongError, InvalidAudioError, RequestError

RAW_AUDIO_TYPES = ("audio/", "video/", "application/octet-stream")
BODY_OVERHEAD_BYTES = 1024 * 1024  # JSON or multipart framing around the audio
SPOOL_MEMORY_BYTES = 4 * 1024 * 1024
"""A body larger than this goes to a temporary file as it arrives."""
_WRITE_BYTES = 1024 * 1024
_BASE64_CHUNK = 4 * 1024 * 1024  # a multiple of 4: whole base64 quanta
_INPUTS_FIRST = re.compile(rb'\s*\{\s*"inputs"\s*:\s*"')
_QUOTE_OR_ESCAPE = re.compile(rb'["\\]')


def body_limit(max_request_bytes: int) -> int:
    """The largest body accepted for audio files of up to ``max_request_bytes``: base64 and the framing around it."""
    return max_request_bytes * 4 // 3 + BODY_OVERHEAD_BYTES


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def spool(request: Request, limit: int) -> IO[bytes]:
    """The request body in a temporary file (in memory up to ``SPOOL_MEMORY_BYTES``), refused with 413 as soon as
    it exceeds ``limit`` bytes, from the declared length before anything is read. The caller closes it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise AudioTooLongError(f"the request body ({declared} bytes) is larger than the {limit}-byte limit")
    file = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115 (the caller closes it)
    try:
        size, pending = 0, bytearray()
        async for piece in request.stream():
            size += len(piece)
            if size > limit:
                raise AudioTooLongError(f"the request body is larger than the {limit}-byte limit")
            pending += piece
            if len(pending) >= _WRITE_BYTES:
                await anyio.to_thread.run_sync(file.write, pending)
                pending = bytearray()
        await anyio.to_thread.run_sync(file.write, pending)
        file.seek(0)
    except BaseException:
        file.close()
        raise
    return file


async def read_body(request: Request, limit: int) -> bytes:
    """A small body (a transcript to convert) whole, within ``limit`` bytes."""
    with await spool(request, limit) as file:
        return await anyio.to_thread.run_sync(file.read)


@dataclass
class RequestBody:
    """A spooled ``POST /`` body: JSON with base64 ``inputs``, or the audio itself with the query's parameters."""

    file: IO[bytes]
    is_json: bool
    query: dict[str, str]

    def data(self, audio: IO[bytes] | None = None, max_parsed: int | None = None) -> dict:
        """``{"inputs", "parameters"}`` (blocking: call it off the event loop); see ``json_request`` for ``audio``
        and ``max_parsed``."""
        self.file.seek(0)
        data = json_request(self.file, audio, max_parsed) if self.is_json else {"inputs": self.file.read()}
        if "parameters" not in data and self.query:
            data["parameters"] = dict(self.query)
        return data

    def close(self) -> None:
        self.file.close()


async def request_body(request: Request, limit: int) -> RequestBody:
    """The body of ``POST /``, spooled; an unaccepted content type is refused before the body is read."""
    kind = media_type(request)
    if kind != "application/json" and not kind.startswith(RAW_AUDIO_TYPES):
        raise InvalidAudioError(
            f"content type {kind or 'missing'!r}: send JSON (application/json) with base64 'inputs', "
            "or the audio file itself as audio/* or application/octet-stream"
        )
    return RequestBody(await spool(request, limit), kind == "application/json", dict(request.query_params))


def json_request(file: IO[bytes], audio: IO[bytes] | None = None, max_parsed: int | None = None) -> dict:
    """The JSON object of ``file``. When it starts with a large base64 ``"inputs"`` string (as clients write it),
    that string is decoded piece by piece, never held whole as text: to bytes, or written to ``audio`` (``inputs``
    is then ``None``). Anything else is parsed whole, refused when larger than ``max_parsed`` bytes."""
    head = file.read(1024)
    match = _INPUTS_FIRST.match(head)
    if match is not None:
        out = io.BytesIO() if audio is None else audio
        rest = _base64_string(file, match.end(), out)
        if rest is not None:
            data = json_object(b'{"inputs": null' + rest)
            data["inputs"] = out.getvalue() if audio is None else None
            return data
        out.seek(0)
        out.truncate()
    size = file.seek(0, io.SEEK_END)
    if max_parsed is not None and size > max_parsed:
        raise AudioTooLongError(
            f'a JSON body over {max_parsed} bytes must start with "inputs" as one plain base64 string '
            "(no escapes or data URI); or send the audio file itself as audio/* or application/octet-stream"
        )
    file.seek(0)
    return json_object(file.read())


def _base64_string(file: IO[bytes], start: int, out: IO[bytes]) -> bytes | None:
    """Decode the plain base64 JSON string starting at ``start`` into ``out``; the text after the string, or
    ``None`` when the string has escapes, whitespace, a data URI or anything but base64 (read whole then)."""
    file.seek(start)
    carry = b""
    while True:
        chunk = file.read(_BASE64_CHUNK)
        if not chunk:
            return None  # the string never ends: not JSON
        found = _QUOTE_OR_ESCAPE.search(chunk)
        text = carry + (chunk if found is None else chunk[: found.start()])
        whole = len(text) - len(text) % 4 if found is None else len(text)
        try:
            out.write(binascii.a2b_base64(text[:whole], strict_mode=True))
        except binascii.Error:
            return None
        carry = text[whole:]
        if found is not None:
            if chunk[found.start() : found.start() + 1] == b"\\":
                return None
            return chunk[found.end() :] + file.read()


def json_object(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RequestError(f"the body is not valid JSON ({error})") from None
    if not isinstance(data, dict) or "inputs" not in data:
        raise RequestError('the body must be a JSON object with "inputs" (base64 audio) and optional "parameters"')
    return data
