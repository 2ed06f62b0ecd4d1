"""The app factory: the shared context, and each module's routes on one Starlette app."""

from __future__ import annotations

from starlette.applications import Starlette

import service.server.job_routes as job_routes
import service.server.openai_routes as openai_routes
import service.server.toolkit_routes as toolkit_routes
import service.server.ui_routes as ui_routes
from config import ModelSettings, ServerSettings
from handler import EndpointHandler
from service.jobs import JobStore
from service.server.bodies import body_limit
from service.server.state import HandlerSlot, ServerContext, WorkQueue


def create_app(
    handler: EndpointHandler | None = None,
    model_settings: ModelSettings | None = None,
    server_settings: ServerSettings | None = None,
) -> Starlette:
    """The ASGI app. Without ``handler``, one is loaded from ``model_settings`` in the background at start-up."""
    server_settings = server_settings or ServerSettings()
    model_settings = handler.settings if handler is not None else model_settings or ModelSettings()
    context = ServerContext(
        server_settings=server_settings,
        model_settings=model_settings,
        slot=HandlerSlot(lambda: handler or EndpointHandler(settings=model_settings)),
        queue=WorkQueue(server_settings.workers, server_settings.queue_length),
        store=JobStore(server_settings.jobs_dir),
        body_limit=body_limit(model_settings.max_request_bytes),
    )
    routes = [
        *toolkit_routes.routes(context),
        *ui_routes.routes(context),
        *openai_routes.routes(context),
        *job_routes.routes(context),
    ]
    app = Starlette(routes=routes, lifespan=context.lifespan)
    app.state.handler_slot = context.slot
    app.state.work_queue = context.queue
    app.state.job_store = context.store
    return app
