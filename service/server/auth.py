"""API keys: ``Authorization: Bearer <key>`` (the OpenAI SDK's convention) on every route but ``/health`` and the
demo page, and the key id that owns a caller's jobs. Keys are compared in constant time; only a hash of a key is
kept, in jobs and log lines."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from service.server.errors import error_response
from speech.errors import RequestError

PUBLIC_ROUTES = {("GET", "/health"), ("GET", "/ui")}
"""Answered without a key: the health check, and the demo page (it asks for the key and sends it)."""


class UnauthorizedError(RequestError):
    status_code = 401


class ApiKeys:
    """The keys the server accepts (none: every caller is let in, as the same anonymous owner)."""

    def __init__(self, keys: Iterable[str]):
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]

    @property
    def required(self) -> bool:
        return bool(self._digests)

    def owner(self, authorization: str | None) -> str:
        """The caller's key id (the start of the key's SHA-256; ``""`` when no keys are set).

        Raises ``UnauthorizedError`` when keys are set and ``authorization`` holds none of them."""
        if not self._digests:
            return ""
        scheme, _, presented = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise UnauthorizedError("this server needs an API key: send the header 'Authorization: Bearer <key>'")
        digest = hashlib.sha256(presented.strip().encode()).digest()
        matched = False
        for known in self._digests:  # every key compared, in constant time: no early exit to time
            matched |= hmac.compare_digest(digest, known)
        if not matched:
            raise UnauthorizedError("the API key is not valid")
        return digest.hex()[:16]


class RequireKey:
    """ASGI middleware: a request without a valid key gets 401 (OpenAI's error body under ``/v1/``), before its body
    is read; an accepted one carries its key id as ``request.state.owner``."""

    def __init__(self, app: ASGIApp, keys: ApiKeys):
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                owner = self.keys.owner(Headers(scope=scope).get("authorization"))
            except UnauthorizedError as error:
                if (scope["method"], scope["path"]) not in PUBLIC_ROUTES:
                    response = error_response(error, openai=scope["path"].startswith("/v1/"))
                    response.headers["WWW-Authenticate"] = "Bearer"
                    await response(scope, receive, send)
                    return
                owner = ""
            scope.setdefault("state", {})["owner"] = owner
        await self.app(scope, receive, send)


def exposure_problem(host: str, keys: ApiKeys, allow_unauthenticated: bool) -> str | None:
    """Why the server should not listen on ``host``: a non-loopback address without API keys."""
    if keys.required or allow_unauthenticated or _is_loopback(host):
        return None
    return (
        f"refusing to listen on {host} without API keys: anyone who can reach it could transcribe and read every "
        "job. Set API_KEYS (or API_KEYS_FILE), listen on 127.0.0.1, or set ALLOW_UNAUTHENTICATED=true"
    )


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any address
        return False
