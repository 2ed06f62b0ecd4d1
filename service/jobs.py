"""Jobs for long recordings on the local server: submitted, run in the background, polled, fetched or cancelled.

Each job is a folder under the store's (``JOBS_DIR``): ``job.json`` (its state), ``audio`` until it has run, and
``result.json`` (the handler's response) once it has. Jobs survive a restart: the finished ones with their
results until they expire, the queued and running ones queued again (a job cut short by the restart runs again from
the start). A job belongs to the key that submitted it (its id): another key neither sees nor touches it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Literal, get_args

import anyio
import anyio.to_thread

from speech.errors import EndpointError, RequestCancelledError, RequestError, ServiceUnavailableError

_log = logging.getLogger("server")

JobStatus = Literal["queued", "running", "completed", "failed", "cancelled"]
Handler = Callable[..., dict]
"""``EndpointHandler``: ``handler(data, progress=...)`` -> the response."""

_ID = re.compile(r"[0-9a-f]{32}")
_FINISHED = ("completed", "failed", "cancelled")
_STAGE_SPANS = {
    "decoding": (0.0, 0.02),
    "segmentation": (0.02, 0.1),
    "embeddings": (0.1, 0.3),
    "transcription": (0.3, 0.98),
    "merge": (0.98, 1.0),
}
"""Share of a job's time each stage takes, roughly (CPU, offline models), for ``JobProgress.fraction``."""
_HANDLER_POLL_S = 1.0


class JobNotFoundError(RequestError):
    status_code = 404


class TooManyJobsError(RequestError):
    """The key already has ``JOBS_MAX_QUEUED`` jobs queued or running."""

    status_code = 429
    retry_after_s = 30


class JobStateError(RequestError):
    """The job is not in a state that allows this (e.g. its result before it has completed)."""

    status_code = 409


@dataclass(frozen=True)
class JobProgress:
    """The stage a job is in, how far that stage is, and an estimate of the whole job done (0 to 1)."""

    stage: str | None = None
    completed: int = 0
    total: int = 0
    fraction: float = 0.0

    def advanced(self, stage: str, completed: int, total: int) -> JobProgress:
        """The progress once ``stage`` has done ``completed`` of ``total`` (numbers as pyannote's hooks give them,
        NumPy's included)."""
        completed, total = int(completed), int(total)
        start, end = _STAGE_SPANS.get(stage, (self.fraction, self.fraction))
        fraction = max(self.fraction, start + (end - start) * completed / max(total, 1))
        return JobProgress(stage, completed, total, round(float(fraction), 4))


@dataclass(frozen=True)
class JobError:
    """Why a job failed: the HTTP status a request would have got, and the message."""

    status: int
    message: str


@dataclass(frozen=True)
class Job:
    """A job's state; times are Unix seconds. ``public()`` is what its owner sees (``GET /jobs/{id}``)."""

    id: str
    status: JobStatus
    created: float
    parameters: dict
    progress: JobProgress = field(default_factory=JobProgress)
    finished: float | None = None
    expires_at: float | None = None
    """When the finished job and its result are removed (``JOBS_TTL_S`` after it finished)."""
    error: JobError | None = None
    audio_s: float | None = None
    """Seconds of audio transcribed, once completed."""
    webhook_url: str | None = None
    owner: str = ""
    """The id of the key that submitted it (``service.server.auth``); not shown."""

    def public(self) -> dict:
        """The job as its owner sees it: reference audio of known speakers left out."""
        shown = asdict(self)
        del shown["owner"]
        shown["parameters"] = {k: v for k, v in self.parameters.items() if k != "known_speaker_references"}
        return shown

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        error = data.get("error")
        return cls(
            **{**data, "progress": JobProgress(**data["progress"]), "error": JobError(**error) if error else None}
        )


class JobStore:
    """The jobs under ``folder`` (made at the first job), and the queue of those waiting to run (``work`` runs
    them); finished jobs are kept ``ttl_s`` seconds (``sweep`` removes them), a key may have ``max_queued`` jobs
    queued or running, and ``on_finish(job)`` hears of every job that completes, fails or is cancelled."""

    def __init__(
        self,
        folder: Path,
        ttl_s: float = 7 * 24 * 3600,
        max_queued: int = 16,
        on_finish: Callable[[Job], None] = lambda job: None,
    ):
        self.folder = folder
        self.ttl_s = ttl_s
        self.max_queued = max_queued
        self.on_finish = on_finish
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._cancelled: set[str] = set()
        self._stopping = threading.Event()
        self._send, self._receive = anyio.create_memory_object_stream[str](math.inf)
        for path in self.folder.glob("*/job.json"):
            job = Job.from_dict(json.loads(path.read_text()))
            if job.status == "running":
                job = replace(job, status="queued", progress=JobProgress())
            if job.finished is not None and job.expires_at is None:  # kept before jobs expired
                job = replace(job, expires_at=job.finished + ttl_s)
            self._jobs[job.id] = job
        for job in sorted(self._jobs.values(), key=lambda job: job.created):
            if job.status == "queued":
                self._send.send_nowait(job.id)

    def admit(self, owner: str) -> None:
        """Refuse (429) a new job of ``owner`` when it already has ``max_queued`` queued or running."""
        unfinished = sum(job.owner == owner and job.status not in _FINISHED for job in self._snapshot())
        if unfinished >= self.max_queued:
            raise TooManyJobsError(
                f"this key already has {unfinished} jobs queued or running (the most is {self.max_queued}); "
                "retry once one has finished"
            )

    def submit(self, audio: IO[bytes], parameters: dict, owner: str, webhook_url: str | None = None) -> Job:
        """Keep ``audio`` (copied from the file in pieces) and queue a job of ``owner`` that transcribes it with
        ``parameters`` (already validated); blocking."""
        job = Job(uuid.uuid4().hex, "queued", time.time(), parameters, webhook_url=webhook_url, owner=owner)
        (self.folder / job.id).mkdir(parents=True)
        with (self.folder / job.id / "audio").open("wb") as kept:
            shutil.copyfileobj(audio, kept)
        with self._lock:
            try:
                self.admit(owner)  # again: other jobs of the key may have arrived meanwhile
            except TooManyJobsError:
                shutil.rmtree(self.folder / job.id, ignore_errors=True)
                raise
            self._save(job)
        self._send.send_nowait(job.id)
        return job

    def get(self, job_id: str, owner: str) -> Job:
        """``owner``'s job ``job_id`` (404 for a job of another key, or one that has expired)."""
        job = self._jobs.get(job_id) if _ID.fullmatch(job_id) else None
        if job is None or job.owner != owner or _expired(job):
            raise JobNotFoundError(f"no job {job_id!r}")
        return job

    def all(self, owner: str) -> list[Job]:
        """``owner``'s jobs, oldest first."""
        jobs = [job for job in self._snapshot() if job.owner == owner and not _expired(job)]
        return sorted(jobs, key=lambda job: job.created)

    def counts(self) -> dict[str, int]:
        """How many jobs (of every key) are in each status."""
        statuses = [job.status for job in self._snapshot()]
        return {status: statuses.count(status) for status in get_args(JobStatus)}

    def result(self, job_id: str, owner: str) -> dict:
        job = self.get(job_id, owner)
        if job.status != "completed":
            reason = f": {job.error.message}" if job.error else ""
            raise JobStateError(f"job {job_id} has no result: it is {job.status}{reason}")
        return json.loads((self.folder / job_id / "result.json").read_text())

    def cancel(self, job_id: str, owner: str) -> Job:
        """Stop a queued or running job (a running one at its next checkpoint) and forget its audio."""
        with self._lock:
            job = self.get(job_id, owner)
            if job.status in _FINISHED:
                raise JobStateError(f"job {job_id} is already {job.status}")
            self._cancelled.add(job_id)
            if job.status == "queued":
                job = self._finish(job, "cancelled")
        return job

    def delete(self, job_id: str, owner: str) -> None:
        """Cancel the job if it has not finished, and remove it with its files."""
        with self._lock:
            self._remove(self.get(job_id, owner))

    def sweep(self) -> int:
        """Remove the jobs that have expired, with their files; how many (blocking)."""
        with self._lock:
            expired = [job for job in self._jobs.values() if _expired(job)]
            for job in expired:
                self._remove(job)
        return len(expired)

    async def sweep_every(self, interval_s: float) -> None:
        """``sweep`` every ``interval_s`` seconds while the server runs."""
        while True:
            await anyio.sleep(interval_s)
            await anyio.to_thread.run_sync(self.sweep)

    def stop(self) -> None:
        """Stop running jobs at their next checkpoint, leaving them queued for the next start."""
        self._stopping.set()

    async def work(self, handler: Callable[[], Handler], limiter: anyio.CapacityLimiter) -> None:
        """Run queued jobs one at a time, each call within ``limiter`` (shared with the server's requests);
        ``handler()`` gives the endpoint handler, or raises ``ServiceUnavailableError`` while it loads."""
        async for job_id in self._receive:
            if self._jobs.get(job_id) is None or self._jobs[job_id].status != "queued":
                continue
            endpoint = None
            while endpoint is None:
                try:
                    endpoint = handler()
                except ServiceUnavailableError:
                    await anyio.sleep(_HANDLER_POLL_S)
            await anyio.to_thread.run_sync(self._run, job_id, endpoint, limiter=limiter)

    def _run(self, job_id: str, endpoint: Handler) -> None:
        """Run one job in this (worker) thread and keep its outcome."""
        with self._lock:
            if job_id in self._cancelled or job_id not in self._jobs:
                return
            job = replace(self._jobs[job_id], status="running")
            self._save(job)
            audio = (self.folder / job_id / "audio").open("rb")  # decoded from the file, never read whole
            data = {"inputs": audio, "parameters": job.parameters}

        def progress(stage: str, completed: int, total: int) -> None:
            if self._stopping.is_set():
                raise RequestCancelledError("the server is stopping")
            if job_id in self._cancelled:
                raise RequestCancelledError("the job was cancelled")
            with self._lock:
                job = self._jobs[job_id]
                self._jobs[job_id] = replace(job, progress=job.progress.advanced(stage, completed, total))

        try:
            with audio:
                result = endpoint(data, progress=progress)
            text = json.dumps(result, ensure_ascii=False)
            audio_s = result.get("duration")
        except EndpointError as error:
            with self._lock:
                job = self._jobs.get(job_id)
                if job is None:  # deleted meanwhile
                    return
                if job_id in self._cancelled:
                    self._finish(job, "cancelled")
                elif self._stopping.is_set():
                    self._save(replace(job, status="queued", progress=JobProgress()))
                else:
                    self._finish(job, "failed", JobError(error.status_code, str(error)))
            return
        except Exception as error:  # not a request's error: the job fails, the server goes on
            stack = "".join(traceback.format_tb(error.__traceback__))  # not the message: it may quote the request
            _log.error("job %s failed unexpectedly: %s\n%s", job_id, type(error).__name__, stack)
            with self._lock:
                if (job := self._jobs.get(job_id)) is not None:
                    message = f"the job failed unexpectedly ({type(error).__name__}); the server log has the details"
                    self._finish(job, "failed", JobError(500, message))
            return
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None:
                _write(self.folder / job_id / "result.json", text)
                self._finish(replace(job, progress=JobProgress("done", 1, 1, 1.0), audio_s=audio_s), "completed")

    def _snapshot(self) -> list[Job]:
        """The jobs now (one C-level copy: safe while worker threads add and replace jobs)."""
        return list(self._jobs.values())

    def _finish(self, job: Job, status: JobStatus, error: JobError | None = None) -> Job:
        """Record how ``job`` ended, forget its audio and tell ``on_finish`` (under the lock)."""
        finished = time.time()
        job = replace(job, status=status, finished=finished, expires_at=finished + self.ttl_s, error=error)
        (self.folder / job.id / "audio").unlink(missing_ok=True)  # before the status shows it finished
        self._save(job)
        self.on_finish(job)
        return job

    def _remove(self, job: Job) -> None:
        """Stop ``job`` if it runs and remove it with its files (under the lock)."""
        self._cancelled.add(job.id)
        del self._jobs[job.id]
        shutil.rmtree(self.folder / job.id, ignore_errors=True)

    def _save(self, job: Job) -> None:
        self._jobs[job.id] = job
        _write(self.folder / job.id / "job.json", json.dumps(asdict(job)))


def _expired(job: Job) -> bool:
    return job.expires_at is not None and job.expires_at <= time.time()


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a crash leaves the earlier file)."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)
