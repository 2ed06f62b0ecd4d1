"""Signed webhooks for jobs, as the Standard Webhooks specification says (and OpenAI's webhooks are sent).

A POST of ``{"type": "job.completed" | "job.failed" | "job.cancelled", "data": <the job>}`` with the headers
``webhook-id`` (the same on every try), ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``:
``v1,`` and the base64 HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` keyed with ``WEBHOOK_SECRET`` (``whsec_`` and
base64). A non-2xx answer or a timeout is tried again with backoff; redirects are not followed. A URL whose host is,
or resolves to, anything but a public address (loopback, private, link-local, cloud metadata...) is refused, at
submission and again before each try, unless the host is in ``WEBHOOK_ALLOWED_HOSTS``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpx

from speech.errors import InvalidParametersError

_log = logging.getLogger("server")

RETRY_DELAYS_S = (1.0, 5.0, 30.0, 120.0)
"""Pauses before the second and later tries: five tries in all."""
TIMEOUT_S = 10.0
SENDERS = 4
"""Webhooks delivered at the same time."""


class WebhookRefusedError(InvalidParametersError):
    """``webhook_url`` cannot be used: not http(s), or not a public address."""


def signature(secret: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header of ``body``."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()


def secret_bytes(secret: str) -> bytes:
    """The signing key of a ``whsec_<base64>`` secret."""
    return base64.b64decode(secret.removeprefix("whsec_"))


class Webhooks:
    """Sends events signed with ``secret`` (none: webhooks are refused) to URLs checked against ``allowed_hosts``,
    in background threads; ``outcome`` hears ``delivered``, ``retried``, ``failed`` or ``refused`` for each try's
    end. Nothing here logs a URL's query or a body: they may hold tokens or transcript details."""

    def __init__(
        self,
        secret: str | None,
        allowed_hosts: Iterable[str] = (),
        outcome: Callable[[str], None] = lambda outcome: None,
        retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S,
    ):
        self._secret = secret_bytes(secret) if secret else None
        self.allowed_hosts = {host.strip().lower().rstrip(".") for host in allowed_hosts if host.strip()}
        self.outcome = outcome
        self.retry_delays_s = retry_delays_s
        self._senders = ThreadPoolExecutor(max_workers=SENDERS, thread_name_prefix="webhook")

    def check(self, url: str) -> str:
        """``url`` if webhooks may go there; else ``WebhookRefusedError`` (422) saying why. Resolves the host
        (blocking)."""
        if self._secret is None:
            raise WebhookRefusedError("webhook_url: this server has no WEBHOOK_SECRET to sign webhooks with")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WebhookRefusedError(f"webhook_url: {url!r} is not an http(s) URL with a host")
        host = parts.hostname.lower().rstrip(".")
        if host in self.allowed_hosts:
            return url
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            addresses = {info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
        except (OSError, ValueError):
            raise WebhookRefusedError(f"webhook_url: the host {host!r} could not be resolved") from None
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            ip = getattr(ip, "ipv4_mapped", None) or ip
            if not ip.is_global:
                raise WebhookRefusedError(
                    f"webhook_url: {host!r} is (or resolves to) {ip}, which is not a public address (loopback, "
                    "private, link-local and cloud metadata addresses are refused; a server's WEBHOOK_ALLOWED_HOSTS "
                    "may list the host)"
                )
        return url

    def send(self, url: str, event_type: str, data: dict) -> None:
        """Deliver ``{"type": event_type, "data": data}`` to ``url`` in the background."""
        body = json.dumps({"type": event_type, "data": data}, ensure_ascii=False).encode()
        self._senders.submit(self._deliver, url, f"msg_{uuid.uuid4().hex}", body)

    def close(self) -> None:
        """Stop sending (webhooks not yet delivered are dropped)."""
        self._senders.shutdown(wait=False, cancel_futures=True)

    def _deliver(self, url: str, message_id: str, body: bytes) -> None:
        host = urlsplit(url).hostname
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
            for attempt, delay in enumerate((0.0, *self.retry_delays_s)):
                time.sleep(delay)
                try:
                    self.check(url)  # the name may resolve elsewhere by now
                except WebhookRefusedError:
                    _log.warning("webhook %s to %s refused: not a public address", message_id, host)
                    self.outcome("refused")
                    return
                timestamp = int(time.time())
                headers = {
                    "content-type": "application/json",
                    "webhook-id": message_id,
                    "webhook-timestamp": str(timestamp),
                    "webhook-signature": signature(self._secret, message_id, timestamp, body),
                }
                try:
                    status = client.post(url, content=body, headers=headers).status_code
                except httpx.HTTPError as error:
                    status = type(error).__name__
                if isinstance(status, int) and 200 <= status < 300:
                    self.outcome("delivered")
                    return
                last = attempt == len(self.retry_delays_s)
                _log.warning("webhook %s to %s: try %d answered %s", message_id, host, attempt + 1, status)
                self.outcome("failed" if last else "retried")
