"""Many files against a deployed endpoint (an Inference Endpoint, or ``python -m service.cli serve``), standard
library only.

Each file is one ``POST`` of ``{"inputs": base64, "parameters": {...}}``, up to ``concurrency`` at a time. HTTP 429,
5xx, connection errors and timeouts are retried with exponential backoff and jitter (at least ``Retry-After``);
other 4xx are reported and not retried. Outputs are written atomically as ``OUT/<stem>.<format>``, and a file whose
output exists is skipped, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import random
import ssl
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Literal

from tqdm import tqdm

from config import InferenceConfig
from speech.formats import WRITERS

SCALE_UP_TIMEOUT_S = 600
"""Sent as ``X-Scale-Up-Timeout``: how long Inference Endpoints hold a request while a scaled-to-zero endpoint
starts, instead of answering 503 at once."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a request that got 429, a 5xx, a connection error or a timeout."""

    attempts: int = 8
    """Requests per file at most, the first included."""
    base_delay_s: float = 1.0
    """Wait before the first retry; doubled at each further retry."""
    max_delay_s: float = 60.0
    """Longest single wait, ``Retry-After`` included."""
    max_total_wait_s: float = 600.0
    """Longest total wait per file; a retry that would wait beyond it is not made."""

    def delay(self, retry: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1, 2...): backoff or ``Retry-After``, plus up to 25 %."""
        backoff = self.base_delay_s * 2 ** (retry - 1)
        return min(self.max_delay_s, max(backoff, retry_after_s or 0.0) * random.uniform(1.0, 1.25))


class EndpointRequestError(Exception):
    """A request that failed for good: a 4xx other than 429, a bad response, or retries exhausted."""


@dataclass
class Outcome:
    """What became of one file: every attempt's HTTP status (or error name), and the seconds spent waiting."""

    path: Path
    status: Literal["transcribed", "skipped", "failed"]
    output: Path | None = None
    error: str | None = None
    attempts: list[int | str] = field(default_factory=list)
    waited_s: float = 0.0


@dataclass
class BatchResult:
    """Every file's outcome, in the order the files were given (each file once)."""

    outcomes: list[Outcome]

    def _with(self, status: str) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.status == status]

    @property
    def transcribed(self) -> list[Outcome]:
        return self._with("transcribed")

    @property
    def skipped(self) -> list[Outcome]:
        return self._with("skipped")

    @property
    def failed(self) -> list[Outcome]:
        return self._with("failed")

    @property
    def requests(self) -> int:
        return sum(len(outcome.attempts) for outcome in self.outcomes)

    @property
    def retries(self) -> Counter[int | str]:
        """Retried attempts by their status (``503``, ``429``...) or error name (``TimeoutError``...)."""
        return Counter(status for outcome in self.outcomes for status in outcome.attempts[:-1])

    def summary(self) -> str:
        retries = sum(self.retries.values())
        return (
            f"{len(self.transcribed)} transcribed, {len(self.skipped)} skipped, {len(self.failed)} failed"
            f" ({self.requests} requests, {retries} retried)"
        )


def _retry_after_s(headers: Message | None) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date: fall back on the backoff
        return None


def _error_message(error: urllib.error.HTTPError) -> str:
    """The message of an error response: ``{"error": message}`` (toolkit and local server) or OpenAI's shape."""
    try:
        body = error.read()
    finally:
        error.close()
    try:
        message = json.loads(body)["error"]
        if isinstance(message, dict):
            message = message.get("message", message)
        return f"HTTP {error.code}: {message}"
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:300]
        return f"HTTP {error.code}: {text or error.reason}"


class EndpointClient:
    """Posts audio files to one endpoint URL, with retries. Thread-safe; ``stop()`` ends every pending wait."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout_s: float = 3600.0,
        scale_up_timeout_s: int | None = SCALE_UP_TIMEOUT_S,
        retry: RetryPolicy = RetryPolicy(),
    ):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint URL {url!r}: expected http:// or https://")
        self.url, self.timeout_s, self.retry = url, timeout_s, retry
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        if scale_up_timeout_s is not None:
            self.headers["X-Scale-Up-Timeout"] = str(scale_up_timeout_s)
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def request(self, audio: bytes, parameters: dict) -> urllib.request.Request:
        body = json.dumps({"inputs": base64.b64encode(audio).decode("ascii"), "parameters": parameters})
        return urllib.request.Request(self.url, data=body.encode(), headers=self.headers, method="POST")

    def transcribe(self, audio: bytes, parameters: dict, outcome: Outcome) -> dict:
        """The endpoint's response for ``audio``; records each attempt in ``outcome``. Raises
        ``EndpointRequestError``."""
        request = self.request(audio, parameters)
        while True:
            retry_after_s = None
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    body = response.read()
                    outcome.attempts.append(response.status)
                break
            except urllib.error.HTTPError as error:
                outcome.attempts.append(error.code)
                if error.code != 429 and error.code < 500:
                    raise EndpointRequestError(_error_message(error)) from None
                retry_after_s = _retry_after_s(error.headers)
                problem = _error_message(error)
            except (OSError, http.client.HTTPException) as error:  # URLError, timeouts, resets, truncated bodies
                outcome.attempts.append(type(error).__name__)
                if isinstance(getattr(error, "reason", None), ssl.SSLCertVerificationError):
                    raise EndpointRequestError(f"{error.reason}") from None
                problem = f"{type(error).__name__}: {getattr(error, 'reason', error)}"
            if len(outcome.attempts) >= self.retry.attempts:
                raise EndpointRequestError(f"gave up after {len(outcome.attempts)} attempts; last: {problem}")
            delay = self.retry.delay(len(outcome.attempts), retry_after_s)
            if outcome.waited_s + delay > self.retry.max_total_wait_s:
                raise EndpointRequestError(f"gave up after waiting {outcome.waited_s:.0f} s; last: {problem}")
            if self._stopped.wait(delay):
                raise EndpointRequestError(f"interrupted; last: {problem}")
            outcome.waited_s += delay
        try:
            result = json.loads(body)
        except ValueError:
            raise EndpointRequestError("the response is not JSON") from None
        if not isinstance(result, dict) or "text" not in result:
            raise EndpointRequestError("the response is not a transcript (no 'text')")
        return result


def request_parameters(parameters: dict, format: str) -> dict:
    """The request's parameters, validated locally (``InvalidParametersError``) and typed for JSON; subtitles
    ask for word timestamps, as the local command does."""
    parameters = dict(parameters)
    if format in ("srt", "vtt"):
        parameters.setdefault("return_timestamps", "word")
    return InferenceConfig.from_parameters(parameters).model_dump(mode="json", exclude_unset=True)


def _write_atomically(target: Path, text: str) -> None:
    """``target`` appears complete or not at all (a temporary file beside it, then renamed)."""
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.", suffix=".part", delete=False
    ) as temporary:
        try:
            temporary.write(text)
            temporary.flush()
            os.fsync(temporary.fileno())
        except BaseException:
            temporary.close()
            os.unlink(temporary.name)
            raise
    os.replace(temporary.name, target)


def _transcribe_one(client: EndpointClient, path: Path, target: Path, parameters: dict, format: str) -> Outcome:
    outcome = Outcome(path, "failed")
    try:
        response = client.transcribe(path.read_bytes(), parameters, outcome)
        _write_atomically(target, WRITERS[format](response, path.stem))
    except (OSError, EndpointRequestError, KeyError, TypeError, ValueError) as error:
        outcome.error = str(error) if not isinstance(error, KeyError) else f"the response lacks {error}"
        return outcome
    outcome.status, outcome.output = "transcribed", target
    return outcome


def transcribe_files(
    client: EndpointClient,
    files: Sequence[Path],
    out: Path,
    format: str = "json",
    parameters: dict | None = None,
    concurrency: int = 4,
    progress: bool = True,
) -> BatchResult:
    """Transcribe ``files`` into ``out/<stem>.<format>``, skipping those already there; failures are reported on
    stderr and in the result. Raises ``InvalidParametersError`` before any request, and ``ValueError`` when two
    files share a stem."""
    parameters = request_parameters(parameters or {}, format)
    files = list(dict.fromkeys(files))  # a file given twice is sent once
    targets = {path: out / f"{path.stem}.{format}" for path in files}
    shared = sorted(name for name, count in Counter(t.name for t in targets.values()).items() if count > 1)
    if shared:
        raise ValueError(f"several files would write the same output: {', '.join(shared)}")
    out.mkdir(parents=True, exist_ok=True)
    outcomes = {path: Outcome(path, "skipped", target) for path, target in targets.items() if target.exists()}
    bar = tqdm(total=len(files), unit="file", desc="transcribe", file=sys.stderr, disable=None if progress else True)
    bar.update(len(outcomes))
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="endpoint")
    try:
        futures = [
            pool.submit(_transcribe_one, client, path, target, parameters, format)
            for path, target in targets.items()
            if path not in outcomes
        ]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[outcome.path] = outcome
            if outcome.error is not None:
                bar.write(f"{outcome.path}: {outcome.error}", file=sys.stderr)
            bar.update(1)
    except BaseException:  # Ctrl-C: no new request; the ones in flight finish and write their output
        client.stop()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        bar.close()
    pool.shutdown()
    return BatchResult([outcomes[path] for path in files])
