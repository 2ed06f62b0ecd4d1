"""Jobs, for long recordings (``service.jobs``): ``POST /jobs`` (a body of ``POST /``, and an optional
``webhook_url``), ``GET /jobs``, ``GET /jobs/{id}``, ``GET /jobs/{id}/result``, ``POST /jobs/{id}/cancel`` and
``DELETE /jobs/{id}``. Each key sees and touches only its own jobs."""

from __future__ import annotations

import io
import tempfile
from functools import partial

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from config import InferenceConfig
from service.jobs import Job
from service.server.bodies import RequestBody, body_limit, request_body
from service.server.errors import route
from service.server.state import ServerContext
from speech.audio import check_size, request_bytes


def routes(context: ServerContext) -> list[Route]:
    return [
        route("/jobs", partial(submit_job, context), ["POST"]),
        route("/jobs", partial(list_jobs, context), ["GET"]),
        route("/jobs/{job_id}", partial(job_state, context), ["GET"]),
        route("/jobs/{job_id}", partial(delete_job, context), ["DELETE"]),
        route("/jobs/{job_id}/result", partial(job_result, context), ["GET"]),
        route("/jobs/{job_id}/cancel", partial(cancel_job, context), ["POST"]),
    ]


def owner(request: Request) -> str:
    """The caller's key id (``service.server.auth.RequireKey``); ``""`` when the server needs no key."""
    return getattr(request.state, "owner", "")


async def submit_job(context: ServerContext, request: Request) -> Response:
    """Keep the audio and queue it (its parameters and webhook checked first); 202 with the job and its
    ``Location``. A key with ``JOBS_MAX_QUEUED`` jobs waiting is refused (429) before the body is read. Job audio
    may be up to ``MAX_FILE_BYTES``: it goes to disk as it arrives and is decoded from there."""
    context.store.admit(owner(request))
    body = await request_body(request, body_limit(context.model_settings.max_file_bytes))
    try:
        job = await anyio.to_thread.run_sync(_submit, context, body, owner(request), limiter=context.submissions)
    finally:
        body.close()
    return JSONResponse(job.public(), status_code=202, headers={"Location": f"/jobs/{job.id}"})


def _submit(context: ServerContext, body: RequestBody, key: str) -> Job:
    """The job of a spooled body (blocking): raw audio copied as it is, base64 decoded to a file first."""
    settings = context.model_settings
    with tempfile.TemporaryFile() as decoded:
        data = body.data(decoded, body_limit(settings.max_request_bytes)) if body.is_json else {}
        parameters = dict(data.get("parameters") or body.query)
        given = parameters.pop("webhook_url", None)  # a raw body's query parameters hold it too
        webhook_url = body.query.get("webhook_url") or given
        InferenceConfig.from_parameters(parameters)
        if webhook_url is not None:
            context.webhooks.check(str(webhook_url))
        if data.get("inputs") is not None:  # a JSON body parsed whole
            decoded.write(request_bytes(data["inputs"], settings.max_request_bytes))
        audio = decoded if body.is_json else body.file
        check_size(audio.seek(0, io.SEEK_END), settings.max_file_bytes)
        audio.seek(0)
        return context.store.submit(audio, parameters, key, webhook_url)


async def list_jobs(context: ServerContext, request: Request) -> Response:
    return JSONResponse({"jobs": [job.public() for job in context.store.all(owner(request))]})


async def job_state(context: ServerContext, request: Request) -> Response:
    return JSONResponse(context.store.get(request.path_params["job_id"], owner(request)).public())


async def job_result(context: ServerContext, request: Request) -> Response:
    result = await anyio.to_thread.run_sync(context.store.result, request.path_params["job_id"], owner(request))
    return JSONResponse(result)


async def cancel_job(context: ServerContext, request: Request) -> Response:
    return JSONResponse(context.store.cancel(request.path_params["job_id"], owner(request)).public())


async def delete_job(context: ServerContext, request: Request) -> Response:
    await anyio.to_thread.run_sync(context.store.delete, request.path_params["job_id"], owner(request))
    return Response(status_code=204)
