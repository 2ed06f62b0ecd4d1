"""OpenAI's multipart transcription and translation forms, read into the handler's request: the audio, the
response format, the parameters, word timestamps and streaming."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import IO, Literal

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request

from service.server.bodies import media_type, spool
from service.server.errors import problems
from service.server.state import Admission
from speech.errors import InvalidParametersError, RequestError
from speech.speakers.voiceprints import MAX_REFERENCE_BYTES

OPENAI_FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
STREAMED_FORMATS = ("json", "text", "diarized_json")  # OpenAI streams these; segments with diarized_json
_LIST_FIELDS = ("known_speaker_names", "known_speaker_references")
"""Form fields that may repeat (``known_speaker_names[]``, as OpenAI's SDK sends lists), passed on as lists."""
_FORM_PART_BYTES = MAX_REFERENCE_BYTES * 4 // 3 + 1024  # one form field: a reference's data URL
_REPLAY_BYTES = 1024 * 1024


@dataclass(frozen=True)
class OpenAIRequest:
    """An OpenAI transcription or translation form, read: the audio file (spooled), the response format, the
    handler's parameters, whether words were asked for and whether the answer is streamed."""

    audio: IO[bytes]
    response_format: str
    parameters: dict
    word_granularity: bool
    stream: bool

    def data(self) -> dict:
        """The handler's request (blocking: it reads the audio; call it in the worker)."""
        self.audio.seek(0)
        return {"inputs": self.audio.read(), "parameters": self.parameters}


class ServerVad(BaseModel):
    """OpenAI's ``server_vad`` chunking strategy, validated; windows are cut here as with ``"auto"``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["server_vad"]
    prefix_padding_ms: int = Field(default=300, ge=0)
    silence_duration_ms: int = Field(default=200, ge=0)
    threshold: float = Field(default=0.5, ge=0.0, le=1.0)


async def read_openai_form(request: Request, task: str, limit: int, admission: Admission) -> OpenAIRequest:
    """The request a multipart body of at most ``limit`` bytes makes, for ``task`` (transcribe or translate); the
    body and the audio are spooled, and closed with ``admission``."""
    if media_type(request) != "multipart/form-data":
        raise InvalidParametersError("send the request as multipart/form-data with the audio as 'file'")
    body = await spool(request, limit)
    admission.closing(body.close)
    try:
        form = await replayed(request, body).form(max_files=1, max_fields=64, max_part_size=_FORM_PART_BYTES)
    except (HTTPException, MultiPartException) as error:
        raise RequestError(f"the multipart body could not be read ({getattr(error, 'detail', error)})") from None
    admission.closing(partial(_close_uploads, form))
    return openai_request(form, task)


def _close_uploads(form: FormData) -> None:
    for _, item in form.multi_items():
        if isinstance(item, UploadFile):
            item.file.close()


def replayed(request: Request, body: IO[bytes]) -> Request:
    """A copy of ``request`` whose body is the spooled ``body``, read in pieces off the event loop."""

    async def receive() -> dict:
        piece = await anyio.to_thread.run_sync(body.read, _REPLAY_BYTES)
        return {"type": "http.request", "body": piece, "more_body": bool(piece)}

    return Request(request.scope, receive)


def openai_request(form: FormData, task: str) -> OpenAIRequest:
    """The request an OpenAI form makes."""
    fields = {key: form.getlist(key) for key in form}
    upload = fields.pop("file", [None])[0]
    if not isinstance(upload, UploadFile):
        raise InvalidParametersError("file: the audio file is missing (multipart field 'file')")
    granularities = fields.pop("timestamp_granularities[]", []) + fields.pop("timestamp_granularities", [])
    fields.pop("model", None)  # the server transcribes with the model it loaded, whatever the name
    lists = {name: fields.pop(f"{name}[]", []) + fields.pop(name, []) for name in _LIST_FIELDS}
    repeated = sorted(key for key, items in fields.items() if len(items) > 1)
    if repeated:
        raise InvalidParametersError(f"fields given more than once: {', '.join(repeated)}")
    files = sorted(key for key, items in {**fields, **lists}.items() if not all(isinstance(i, str) for i in items))
    if files:
        raise InvalidParametersError(f"only 'file' may be a file; got a file as {', '.join(files)}")
    values = {key: items[0] for key, items in fields.items()} | {name: items for name, items in lists.items() if items}
    response_format = values.pop("response_format", "json")
    if response_format not in OPENAI_FORMATS:
        raise InvalidParametersError(f"response_format: {response_format!r} is not one of {', '.join(OPENAI_FORMATS)}")
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
    if stream in ("true", "1") and response_format not in STREAMED_FORMATS:
        raise InvalidParametersError(f"stream: use response_format {' or '.join(STREAMED_FORMATS)}")
    _check_chunking_strategy(values)
    if task == "translate" and "language" in values:
        raise InvalidParametersError("language: translations always produce English; do not set a language")
    word_granularity = "word" in granularities
    if word_granularity or response_format in ("srt", "vtt"):
        values["return_timestamps"] = "word"
    parameters = {**values, "task": task}
    return OpenAIRequest(upload.file, response_format, parameters, word_granularity, stream in ("true", "1"))


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
        problem = problems(error) if isinstance(error, ValidationError) else str(error)
        raise InvalidParametersError(f"chunking_strategy: 'auto' or a server_vad object ({problem})") from None
