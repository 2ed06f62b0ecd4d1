"""What the routes share: the handler (loaded in the background), the work queue, the jobs and the settings."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup
from starlette.applications import Starlette
from starlette.requests import Request

from config import ModelSettings, ServerSettings
from handler import EndpointHandler
from service.jobs import JobStore
from service.webhooks import Webhooks
from speech.errors import RequestCancelledError, ServiceUnavailableError
from speech.types import Progress, Response

logger = logging.getLogger("server")
T = TypeVar("T")

DISCONNECT_POLL_S = 0.25
SWEEP_INTERVAL_S = 60.0
SUBMISSIONS = 2


class WorkQueue:
    """Runs at most ``workers`` handler calls at once in threads, with ``queue_length`` more admitted to wait.

    A request beyond that is refused at once (``ServiceUnavailableError``), before its body is read, instead of
    piling up in memory.
    """

    def __init__(self, workers: int, queue_length: int):
        self.limiter = anyio.CapacityLimiter(workers)
        self.capacity = workers + queue_length
        self.pending = 0

    def admit(self) -> Admission:
        """A place among the requests running or waiting, held until the admission is released."""
        if self.pending >= self.capacity:
            raise ServiceUnavailableError(f"the server is busy ({self.pending} requests in progress); retry later")
        self.pending += 1
        return Admission(self)

    async def run(self, function: Callable[[], T]) -> T:
        """``function()`` in a worker thread, once one is free (the caller holds an admission)."""
        return await anyio.to_thread.run_sync(function, limiter=self.limiter)


class Admission:
    """A request's place in the ``WorkQueue``, and what to close with it (its spooled body); released when the
    ``with`` block ends, unless ``hand_over`` gave it to work that outlives the block (a streamed answer)."""

    def __init__(self, queue: WorkQueue):
        self._queue = queue
        self._closing: list[Callable[[], object]] = []
        self._handed_over = False
        self._released = False

    def closing(self, close: Callable[[], object]) -> None:
        self._closing.append(close)

    def hand_over(self) -> Admission:
        self._handed_over = True
        return self

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._queue.pending -= 1
            for close in self._closing:
                close()

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exception: object) -> None:
        if not self._handed_over or exception[0] is not None:
            self.release()


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


@dataclass
class ServerContext:
    """The app's shared state, handed to each module's ``routes``; ``body_limit`` bounds a request body."""

    server_settings: ServerSettings
    model_settings: ModelSettings
    slot: HandlerSlot
    queue: WorkQueue
    store: JobStore
    webhooks: Webhooks
    body_limit: int
    background: list[TaskGroup] = field(default_factory=list)
    """The app's task group, from start-up to shutdown."""
    submissions: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(SUBMISSIONS))
    """Job bodies parsed and kept at the same time (each may hold its decoded audio)."""

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Load the models, run the jobs' workers and remove expired jobs while the app runs; stop the jobs and the
        webhooks at shutdown."""
        self.slot.start()
        async with anyio.create_task_group() as tasks:
            self.background.append(tasks)
            for _ in range(self.server_settings.workers):
                tasks.start_soon(self.store.work, self.slot.get, self.queue.limiter)
            tasks.start_soon(self.store.sweep_every, min(SWEEP_INTERVAL_S, self.store.ttl_s / 4))
            yield
            self.store.stop()
            self.webhooks.close()
            tasks.cancel_scope.cancel()

    def admit(self) -> Admission:
        """A place in the work queue for a request, from its headers alone: 503 while the models load or when every
        worker and queue place is taken."""
        self.slot.get()
        return self.queue.admit()

    async def run(self, request: Request, data: Callable[[], dict]) -> dict:
        """The handler's JSON response (``EndpointHandler.__call__``) to the request ``data()`` reads (in the
        worker thread, once it is this request's turn), run in the work queue."""
        result = await self._call(request, lambda endpoint, progress: endpoint(data(), progress=progress))
        request.state.audio_s = result.get("duration")
        return result

    async def respond(self, request: Request, data: Callable[[], dict]) -> Response:
        """The handler's typed response (``EndpointHandler.respond``) to ``data()``, run in the work queue."""
        response = await self._call(request, lambda endpoint, progress: endpoint.respond(data(), progress=progress))
        request.state.audio_s = response.duration
        return response

    async def _call(self, request: Request, call: Callable[[EndpointHandler, Progress], T]) -> T:
        """Run ``call`` on the handler in the work queue; stop it at its next checkpoint if the client disconnects."""
        endpoint = self.slot.get()
        disconnected = threading.Event()

        def stop_if_disconnected(stage: str, completed: int, total: int) -> None:
            if disconnected.is_set():
                raise RequestCancelledError(f"the client disconnected (during {stage})")

        async def watch() -> None:
            while not await request.is_disconnected():
                await anyio.sleep(DISCONNECT_POLL_S)
            disconnected.set()

        result = None
        failure: Exception | None = None
        async with anyio.create_task_group() as tasks:  # raised in here, an error would come out grouped
            tasks.start_soon(watch)
            try:
                result = await self.queue.run(lambda: call(endpoint, stop_if_disconnected))
            except Exception as error:
                failure = error
            tasks.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return result
