"""A streamed OpenAI transcription (``stream=true``): the handler's progress and transcript events, as they come,
answered as OpenAI's Server-Sent Events."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
import anyio.from_thread
from anyio.streams.memory import MemoryObjectReceiveStream
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from service.server.errors import failure, openai_error
from service.server.state import Admission, ServerContext
from service.streaming import StreamEvent, TextDelta, TurnUpdate
from speech.errors import RequestCancelledError


@dataclass(frozen=True)
class _Stage:
    """A progress report of the handler: ``(stage, completed, total)``."""

    stage: str
    completed: int
    total: int


_Streamed = _Stage | StreamEvent | dict | Exception
"""What a streamed request's handler call sends: progress, transcript events, then its response or its failure."""


async def stream(
    context: ServerContext, request: Request, admission: Admission, data: Callable[[], dict], segments: bool
) -> Response:
    """Run the handler on ``data()`` in the background and answer its events as they come (OpenAI's transcription
    stream, speaker turns as ``transcript.text.segment`` when ``segments``); ``admission`` is released when the
    work ends. The answer starts once the audio is decoded, so that a bad file or parameter still gets its status;
    a client that goes away stops the work."""
    endpoint = context.slot.get()
    send, receive = anyio.create_memory_object_stream[_Streamed](math.inf)
    stopped = threading.Event()

    def report(item: _Streamed) -> None:
        if stopped.is_set():
            raise RequestCancelledError("the client disconnected")
        anyio.from_thread.run_sync(send.send_nowait, item)

    def call() -> dict:
        return endpoint(data(), progress=lambda *stage: report(_Stage(*stage)), emit=report)

    async def work() -> None:
        with send:
            try:
                result = await context.queue.run(call)
                request.state.audio_s = result.get("duration")
                send.send_nowait(result)
            except Exception as error:
                send.send_nowait(error)
            finally:
                admission.release()

    context.background[0].start_soon(work)
    first = await receive.receive()
    while isinstance(first, _Stage) and first.stage == "decoding":
        first = await receive.receive()
    if isinstance(first, Exception):
        raise first
    return StreamingResponse(_sse(first, receive, stopped, segments), media_type="text/event-stream")


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
                status, message, error_id, _ = failure(item)
                yield _event({"type": "error", **openai_error(status, message, error_id)})
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
                if turn.channel is not None:
                    segment["channel"] = turn.channel
                revision = {"revision": True} if item.revision else {}
                yield _event({"type": "transcript.text.segment", **segment, "speaker": turn.speaker, **revision})
            item = await rest.receive()
    finally:
        stopped.set()
        rest.close()


def _event(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
