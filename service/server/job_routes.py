"""Jobs, for long recordings (``service.jobs``): ``POST /jobs`` (a body of ``POST /``), ``GET /jobs``,
``GET /jobs/{id}``, ``GET /jobs/{id}/result``, ``POST /jobs/{id}/cancel`` and ``DELETE /jobs/{id}``."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from config import InferenceConfig
from service.server.bodies import request_data
from service.server.errors import route
from service.server.state import ServerContext
from speech.audio import request_bytes


def routes(context: ServerContext) -> list[Route]:
    return [
        route("/jobs", partial(submit_job, context), ["POST"]),
        route("/jobs", partial(list_jobs, context), ["GET"]),
        route("/jobs/{job_id}", partial(job_state, context), ["GET"]),
        route("/jobs/{job_id}", partial(delete_job, context), ["DELETE"]),
        route("/jobs/{job_id}/result", partial(job_result, context), ["GET"]),
        route("/jobs/{job_id}/cancel", partial(cancel_job, context), ["POST"]),
    ]


async def submit_job(context: ServerContext, request: Request) -> Response:
    """Keep the audio and queue it (its parameters checked first); 202 with the job and its ``Location``."""
    data = await request_data(request, context.body_limit)
    parameters = data.get("parameters") or {}
    InferenceConfig.from_parameters(parameters)
    job = context.store.submit(request_bytes(data["inputs"], context.model_settings.max_request_bytes), parameters)
    return JSONResponse(asdict(job), status_code=202, headers={"Location": f"/jobs/{job.id}"})


async def list_jobs(context: ServerContext, request: Request) -> Response:
    return JSONResponse({"jobs": [asdict(job) for job in context.store.all()]})


async def job_state(context: ServerContext, request: Request) -> Response:
    return JSONResponse(asdict(context.store.get(request.path_params["job_id"])))


async def job_result(context: ServerContext, request: Request) -> Response:
    return JSONResponse(context.store.result(request.path_params["job_id"]))


async def cancel_job(context: ServerContext, request: Request) -> Response:
    return JSONResponse(asdict(context.store.cancel(request.path_params["job_id"])))


async def delete_job(context: ServerContext, request: Request) -> Response:
    context.store.delete(request.path_params["job_id"])
    return Response(status_code=204)
