"""What the server reports about itself: ``/metrics`` in the Prometheus text format, and one structured log line per
request (route, status, duration, audio seconds, the key's id), never transcript text, audio, keys or secrets."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger("server")

DURATION_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class Metrics:
    """The server's metrics, in a registry of their own (one per app)."""

    def __init__(self, queue_depth: Callable[[], int], job_counts: Callable[[], dict[str, int]]):
        self.registry = CollectorRegistry()
        labels = ("method", "route")
        self.requests = Counter(
            "speech_requests", "HTTP requests answered", [*labels, "status"], registry=self.registry
        )
        self.duration = Histogram(
            "speech_request_duration_seconds", "Time to answer a request", labels, registry=self.registry,
            buckets=DURATION_BUCKETS_S,
        )  # fmt: skip
        self.audio = Counter(
            "speech_audio_seconds", "Seconds of audio transcribed (requests and jobs)", registry=self.registry
        )
        self.webhooks = Counter(
            "speech_webhook_deliveries", "Webhook deliveries by outcome (delivered, retried, failed, refused)",
            ["outcome"], registry=self.registry,
        )  # fmt: skip
        queue = Gauge("speech_queue_depth", "Requests running or waiting for a worker", registry=self.registry)
        queue.set_function(queue_depth)
        self.registry.register(_JobsCollector(job_counts))

    def page(self, request: Request) -> Response:
        """``GET /metrics``."""
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class _JobsCollector(Collector):
    def __init__(self, counts: Callable[[], dict[str, int]]):
        self.counts = counts

    def collect(self) -> Iterable[GaugeMetricFamily]:
        jobs = GaugeMetricFamily("speech_jobs", "Jobs kept on the server by status", labels=["status"])
        for status, count in self.counts().items():
            jobs.add_metric([status], count)
        yield jobs


class Observed:
    """ASGI middleware (outermost): count, time and log every HTTP request, refused ones included.

    Routes report the audio they transcribed as ``request.state.audio_s``; the key's id comes from ``RequireKey``
    (``request.state.owner``)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: list[BaseRoute]):
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # unless the app starts an answer

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            elapsed = time.perf_counter() - started
            route, method = self._route(scope), scope["method"]
            state = scope.get("state", {})
            audio_s = state.get("audio_s")
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.duration.labels(method, route).observe(elapsed)
            if audio_s:
                self.metrics.audio.inc(audio_s)
            line = {"method": method, "route": route, "status": status, "duration_ms": round(elapsed * 1000)}
            line |= {"audio_s": audio_s, "key": state.get("owner") or None}
            logger.info("request %s", json.dumps(line))

    def _route(self, scope: Scope) -> str:
        """The route's path template (``/jobs/{job_id}``), so that ids do not make new series."""
        for route in self.routes:
            if route.matches(scope)[0] is not Match.NONE:
                return getattr(route, "path", "?")
        return "unmatched"
