"""The app factory: the shared context, each module's routes on one Starlette app, the keys and the metrics."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

import service.server.job_routes as job_routes
import service.server.openai_routes as openai_routes
import service.server.toolkit_routes as toolkit_routes
import service.server.ui_routes as ui_routes
from config import ModelSettings, ServerSettings
from handler import EndpointHandler
from service.jobs import Job, JobStore
from service.server.auth import ApiKeys, RequireKey
from service.server.bodies import body_limit
from service.server.observe import Metrics, Observed
from service.server.state import HandlerSlot, ServerContext, WorkQueue
from service.webhooks import Webhooks


def create_app(
    handler: EndpointHandler | None = None,
    model_settings: ModelSettings | None = None,
    server_settings: ServerSettings | None = None,
) -> Starlette:
    """The ASGI app. Without ``handler``, one is loaded from ``model_settings`` in the background at start-up."""
    server_settings = server_settings or ServerSettings()
    model_settings = handler.settings if handler is not None else model_settings or ModelSettings()
    queue = WorkQueue(server_settings.workers, server_settings.queue_length)
    webhooks = Webhooks(
        server_settings.webhook_secret and server_settings.webhook_secret.get_secret_value(),
        server_settings.webhook_allowed_hosts.split(","),
    )

    def finished(job: Job) -> None:
        if job.audio_s:
            metrics.audio.inc(job.audio_s)
        if job.webhook_url:
            webhooks.send(job.webhook_url, f"job.{job.status}", job.public())

    store = JobStore(server_settings.jobs_dir, server_settings.jobs_ttl_s, server_settings.jobs_max_queued, finished)
    metrics = Metrics(lambda: queue.pending, store.counts)
    webhooks.outcome = lambda outcome: metrics.webhooks.labels(outcome).inc()
    context = ServerContext(
        server_settings=server_settings,
        model_settings=model_settings,
        slot=HandlerSlot(lambda: handler or EndpointHandler(settings=model_settings)),
        queue=queue,
        store=store,
        webhooks=webhooks,
        body_limit=body_limit(model_settings.max_request_bytes),
    )
    routes = [
        *toolkit_routes.routes(context),
        *ui_routes.routes(context),
        *openai_routes.routes(context),
        *job_routes.routes(context),
        Route("/metrics", metrics.page, methods=["GET"]),
    ]
    middleware = [
        Middleware(Observed, metrics=metrics, routes=routes),
        Middleware(RequireKey, keys=ApiKeys(server_settings.keys())),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=context.lifespan)
    app.state.handler_slot = context.slot
    app.state.work_queue = context.queue
    app.state.job_store = context.store
    return app
