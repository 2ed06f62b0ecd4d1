"""How the routes answer failures: request errors with their status and message, server errors with a 5xx and an
error id that is logged with the exception's types and stack (never its message, which may quote the request)."""

from __future__ import annotations

import logging
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
    """Status, message, error id (server errors only) and headers (``Retry-After`` where it helps) for an
    exception."""
    retry = getattr(error, "retry_after_s", None)
    headers = {"Retry-After": str(retry)} if retry is not None else {}
    if isinstance(error, (RequestError, ServiceUnavailableError)):
        return error.status_code, str(error), None, headers
    message = str(error) if isinstance(error, EndpointError) else "internal server error"
    return 500, message, error_id(error), {}


def openai_error(status: int, message: str, server_error_id: str | None) -> dict:
    """An error body as OpenAI's API writes it (``error_id`` for server errors)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    detail = {"message": message, "type": kind, "param": None, "code": status}
    return {"error": detail if server_error_id is None else {**detail, "id": server_error_id}}


def error_response(error: Exception, openai: bool) -> JSONResponse:
    """The answer to a failure: OpenAI's error body with ``openai``, else ``error``, ``error_type`` and, for server
    errors, ``error_id``."""
    status, message, server_error_id, headers = failure(error)
    if openai:
        return JSONResponse(openai_error(status, message, server_error_id), status_code=status, headers=headers)
    body = {"error": message, "error_type": type(error).__name__}
    if server_error_id is not None:
        body["error_id"] = server_error_id
    return JSONResponse(body, status_code=status, headers=headers)


def problems(error: ValidationError) -> str:
    """A validation error's problems, each with where it is (``speakers.0.timestamp: ...``)."""
    return "; ".join(f"{'.'.join(str(part) for part in e['loc']) or 'body'}: {e['msg']}" for e in error.errors())


def route(path: str, endpoint: Endpoint, methods: list[str], openai_errors: bool = False) -> Route:
    """A route whose endpoint answers errors (OpenAI's error body with ``openai_errors``)."""

    async def answered(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as error:
            return error_response(error, openai_errors)

    return Route(path, answered, methods=methods)
