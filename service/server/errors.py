"""How the routes answer failures: request errors with their status and message, server errors with a 5xx and an
error id that is logged with the exception's types and stack (never its message, which may quote the request)."""

from __future__ import annotations

import logging
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from speech.errors import EndpointError, RequestError, ServiceUnavailableError

logger = logging.getLogger("server")

Endpoint = Callable[[Request], Awaitable[Response]]


def error_id(error: BaseException) -> str:
    """Log a server error by id: exception types and stack only (messages may quote request content)."""
    new_id = uuid.uuid4().hex[:12]
    chain, cause = [], error
    while cause is not None:
        chain.append(type(cause).__name__)
        cause = cause.__cause__
    stack = "".join(traceback.format_tb(error.__traceback__))
    logger.error("error %s: %s\n%s", new_id, " <- ".join(chain), stack)
    return new_id


def failure(error: Exception) -> tuple[int, str, str | None, dict[str, str]]:
    """Status, message, error id (server errors only) and headers for an exception."""
    if isinstance(error, ServiceUnavailableError):
        return error.status_code, str(error), None, {"Retry-After": str(error.retry_after_s)}
    if isinstance(error, RequestError):
        return error.status_code, str(error), None, {}
    message = str(error) if isinstance(error, EndpointError) else "internal server error"
    return 500, message, error_id(error), {}


def openai_error(status: int, message: str, server_error_id: str | None) -> dict:
    """An error body as OpenAI's API writes it (``error_id`` for server errors)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    detail = {"message": message, "type": kind, "param": None, "code": status}
    return {"error": detail if server_error_id is None else {**detail, "id": server_error_id}}


def problems(error: ValidationError) -> str:
    """A validation error's problems, each with where it is (``speakers.0.timestamp: ...``)."""
    return "; ".join(f"{'.'.join(str(part) for part in e['loc']) or 'body'}: {e['msg']}" for e in error.errors())


def handled(endpoint: Endpoint, openai_errors: bool) -> Endpoint:
    """Wrap a route: time it, log it, and answer the project's errors in the route's error format."""

    async def wrapped(request: Request) -> Response:
        started = time.perf_counter()
        try:
            response = await endpoint(request)
        except Exception as error:
            status, message, server_error_id, headers = failure(error)
            body = openai_error(status, message, server_error_id) if openai_errors else {"error": message}
            if not openai_errors:
                body["error_type"] = type(error).__name__
                if server_error_id is not None:
                    body["error_id"] = server_error_id
            response = JSONResponse(body, status_code=status, headers=headers)
        elapsed_ms = (time.perf_counter() - started) * 1000
        logger.info("%s %s -> %d in %.0f ms", request.method, request.url.path, response.status_code, elapsed_ms)
        return response

    return wrapped


def route(path: str, endpoint: Endpoint, methods: list[str], openai_errors: bool = False) -> Route:
    """A route whose endpoint is timed, logged and answers errors (OpenAI's error body with ``openai_errors``)."""
    return Route(path, handled(endpoint, openai_errors), methods=methods)
