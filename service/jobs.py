"""Jobs for long recordings on the local server: submitted, run in the background, polled, fetched or cancelled.

Each job is a folder under the store's (``JOBS_DIR``): ``job.json`` (its state), ``audio`` until it has run, and
``result.json`` (the handler's response) once it has. Jobs survive a restart: the finished ones with their
results, the queued and running ones queued again (a job cut short by the restart runs again from the start).
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
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

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
    """A job's state, as ``GET /jobs/{id}`` answers it; times are Unix seconds."""

    id: str
    status: JobStatus
    created: float
    parameters: dict
    progress: JobProgress = field(default_factory=JobProgress)
    finished: float | None = None
    error: JobError | None = None

    @classmethod
    def from_dict(cls, data: dict) -> Job:
        error = data.get("error")
        return cls(
            **{**data, "progress": JobProgress(**data["progress"]), "error": JobError(**error) if error else None}
        )


class JobStore:
    """The jobs under ``folder`` (made at the first job), and the queue of those waiting to run (``work`` runs
    them)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._cancelled: set[str] = set()
        self._stopping = threading.Event()
        self._send, self._receive = anyio.create_memory_object_stream[str](math.inf)
        for path in self.folder.glob("*/job.json"):
            job = Job.from_dict(json.loads(path.read_text()))
            if job.status == "running":
                job = replace(job, status="queued", progress=JobProgress())
            self._jobs[job.id] = job
        for job in sorted(self._jobs.values(), key=lambda job: job.created):
            if job.status == "queued":
                self._send.send_nowait(job.id)

    def submit(self, audio: bytes, parameters: dict) -> Job:
        """Keep ``audio`` and queue a job that transcribes it with ``parameters`` (already validated)."""
        job = Job(uuid.uuid4().hex, "queued", time.time(), parameters)
        (self.folder / job.id).mkdir(parents=True)
        (self.folder / job.id / "audio").write_bytes(audio)
        with self._lock:
            self._save(job)
        self._send.send_nowait(job.id)
        return job

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id) if _ID.fullmatch(job_id) else None
        if job is None:
            raise JobNotFoundError(f"no job {job_id!r}")
        return job

    def all(self) -> list[Job]:
        return sorted(self._jobs.values(), key=lambda job: job.created)

    def result(self, job_id: str) -> dict:
        job = self.get(job_id)
        if job.status != "completed":
            reason = f": {job.error.message}" if job.error else ""
            raise JobStateError(f"job {job_id} has no result: it is {job.status}{reason}")
        return json.loads((self.folder / job_id / "result.json").read_text())

    def cancel(self, job_id: str) -> Job:
        """Stop a queued or running job (a running one at its next checkpoint) and forget its audio."""
        with self._lock:
            job = self.get(job_id)
            if job.status in _FINISHED:
                raise JobStateError(f"job {job_id} is already {job.status}")
            self._cancelled.add(job_id)
            if job.status == "queued":
                job = self._finish(job, "cancelled")
        return job

    def delete(self, job_id: str) -> None:
        """Cancel the job if it has not finished, and remove it with its files."""
        with self._lock:
            job = self.get(job_id)
            self._cancelled.add(job_id)
            del self._jobs[job.id]
            shutil.rmtree(self.folder / job.id, ignore_errors=True)

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
            data = {"inputs": (self.folder / job_id / "audio").read_bytes(), "parameters": job.parameters}

        def progress(stage: str, completed: int, total: int) -> None:
            if self._stopping.is_set():
                raise RequestCancelledError("the server is stopping")
            if job_id in self._cancelled:
                raise RequestCancelledError("the job was cancelled")
            with self._lock:
                job = self._jobs[job_id]
                self._jobs[job_id] = replace(job, progress=job.progress.advanced(stage, completed, total))

        try:
            result = endpoint(data, progress=progress)
            text = json.dumps(result, ensure_ascii=False)
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
            _log.exception("job %s failed unexpectedly", job_id)
            with self._lock:
                if (job := self._jobs.get(job_id)) is not None:
                    message = f"the job failed unexpectedly ({type(error).__name__}); the server log has the details"
                    self._finish(job, "failed", JobError(500, message))
            return
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None:
                _write(self.folder / job_id / "result.json", text)
                self._finish(replace(job, progress=JobProgress("done", 1, 1, 1.0)), "completed")

    def _finish(self, job: Job, status: JobStatus, error: JobError | None = None) -> Job:
        """Record how ``job`` ended and forget its audio (under the lock)."""
        job = replace(job, status=status, finished=time.time(), error=error)
        self._save(job)
        (self.folder / job.id / "audio").unlink(missing_ok=True)
        return job

    def _save(self, job: Job) -> None:
        self._jobs[job.id] = job
        _write(self.folder / job.id / "job.json", json.dumps(asdict(job)))


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a crash leaves the earlier file)."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)
