"""Jobs on the local server (in process): submit, poll, fetch, cancel, delete, and a restart in between."""

from __future__ import annotations

import base64
import copy
import json
import threading
import time

import pytest
from conftest import ready
from starlette.testclient import TestClient

from config import ModelSettings, ServerSettings
from service.server import create_app
from speech.errors import InvalidAudioError


def wait_for(client: TestClient, job_id: str, *statuses: str, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while (job := client.get(f"/jobs/{job_id}").json())["status"] not in statuses:
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
    return job


class GatedHandler:
    """Reports progress until released; then answers, or fails like an unreadable file (or a bug) when told to."""

    def __init__(self):
        self.settings = ModelSettings()
        self.release = threading.Event()
        self.calls: list[dict] = []

    def __call__(self, data, progress=None):
        self.calls.append(data)
        while not self.release.wait(0.01):
            progress("transcription", 0, 1)
        if data["parameters"].get("prompt") == "fail":
            raise InvalidAudioError("inputs: not audio")
        if data["parameters"].get("prompt") == "crash":
            raise RuntimeError("a bug")
        return {"text": f"{len(data['inputs'].read())} bytes", "speakers": []}


def test_a_job_runs_to_a_result_that_survives_a_restart(handler, clip_wav, tmp_path):
    settings = ServerSettings(jobs_dir=tmp_path)
    direct = handler({"inputs": clip_wav, "parameters": {"num_speakers": 2}})
    with TestClient(create_app(handler=handler, server_settings=settings)) as client:
        submitted = client.post("/jobs?num_speakers=2", content=clip_wav, headers={"Content-Type": "audio/wav"})
        assert submitted.status_code == 202
        job_id = submitted.json()["id"]
        assert submitted.headers["location"] == f"/jobs/{job_id}"
        seen = set()
        while (job := client.get(f"/jobs/{job_id}").json())["status"] in ("queued", "running"):
            seen.add(job["progress"]["fraction"])
            time.sleep(0.02)
        assert job["status"] == "completed" and job["progress"]["fraction"] == 1.0
        assert len(seen) >= 2 and max(seen) < 1.0  # the fraction moved while it ran
        assert not (tmp_path / job_id / "audio").exists()  # the audio is kept only until the job has run
    with TestClient(create_app(handler=handler, server_settings=settings)) as client:
        assert [job["id"] for job in client.get("/jobs").json()["jobs"]] == [job_id]
        result = client.get(f"/jobs/{job_id}/result").json()
        assert result["text"] == direct["text"] and result["speakers"] == direct["speakers"]
        assert client.delete(f"/jobs/{job_id}").status_code == 204
        assert client.get(f"/jobs/{job_id}").status_code == 404
        assert not (tmp_path / job_id).exists()


def test_cancelling_queued_and_running_jobs_and_a_failure(tmp_path):
    gated = GatedHandler()
    with TestClient(create_app(handler=gated, server_settings=ServerSettings(jobs_dir=tmp_path))) as client:
        ready(client)
        post = lambda **params: client.post("/jobs", json={"inputs": "AAAA", "parameters": params}).json()["id"]  # noqa: E731
        running, queued, failing = post(), post(), post(prompt="fail")
        wait_for(client, running, "running")
        assert client.post(f"/jobs/{queued}/cancel").json()["status"] == "cancelled"
        assert client.post(f"/jobs/{running}/cancel").status_code == 200
        assert wait_for(client, running, "cancelled", "failed")["status"] == "cancelled"
        gated.release.set()
        failed = wait_for(client, failing, "failed")
        assert failed["error"] == {"status": 415, "message": "inputs: not audio"}
        assert len(gated.calls) == 2  # the cancelled queued job never ran
        conflict = client.get(f"/jobs/{failing}/result")
        assert conflict.status_code == 409 and "it is failed: inputs: not audio" in conflict.json()["error"]
        assert client.post(f"/jobs/{failing}/cancel").status_code == 409


def test_an_unexpected_exception_fails_the_job_and_the_next_one_runs(tmp_path):
    gated = GatedHandler()
    gated.release.set()
    with TestClient(create_app(handler=gated, server_settings=ServerSettings(jobs_dir=tmp_path))) as client:
        ready(client)
        crashing = client.post("/jobs", json={"inputs": "AAAA", "parameters": {"prompt": "crash"}}).json()["id"]
        following = client.post("/jobs", json={"inputs": "AAAA", "parameters": {}}).json()["id"]
        failed = wait_for(client, crashing, "failed")
        assert failed["error"]["status"] == 500 and "RuntimeError" in failed["error"]["message"]
        assert "a bug" not in failed["error"]["message"]  # the details stay in the server log
        assert wait_for(client, following, "completed")["status"] == "completed"
        assert client.get("/health").status_code == 200


def test_jobs_left_queued_or_running_run_after_a_restart(tmp_path):
    gated = GatedHandler()
    gated.release.set()
    job = {"id": "0" * 32, "status": "running", "created": 1.0, "parameters": {}, "finished": None, "error": None}
    job["progress"] = {"stage": "transcription", "completed": 3, "total": 9, "fraction": 0.5}
    (tmp_path / job["id"]).mkdir()
    (tmp_path / job["id"] / "job.json").write_text(json.dumps(job))
    (tmp_path / job["id"] / "audio").write_bytes(b"12345")
    with TestClient(create_app(handler=gated, server_settings=ServerSettings(jobs_dir=tmp_path))) as client:
        assert wait_for(client, job["id"], "completed")["status"] == "completed"
        assert client.get(f"/jobs/{job['id']}/result").json()["text"] == "5 bytes"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("post", "/jobs", {"inputs": "AAAA", "parameters": {"beam": 2}}, 422, "unknown parameter 'beam'"),
        ("post", "/jobs", {"inputs": "not base64!"}, 415, "base64"),
        ("get", "/jobs/etc%2Epasswd", None, 404, "no job"),
        ("get", f"/jobs/{'a' * 32}/result", None, 404, "no job"),
        ("post", f"/jobs/{'a' * 32}/cancel", None, 404, "no job"),
    ],
)
def test_bad_job_requests_are_named(tmp_path, method, path, body, status, message):
    with TestClient(create_app(handler=GatedHandler(), server_settings=ServerSettings(jobs_dir=tmp_path))) as client:
        response = getattr(client, method)(path, **({"json": body} if body else {}))
        assert response.status_code == status
        assert message in response.json()["error"]


def test_progress_from_numpy_counts_is_plain_json():
    import numpy as np

    from service.jobs import JobProgress

    progress = JobProgress().advanced("embeddings", np.int64(3), np.int64(6))
    expected = {"stage": "embeddings", "completed": 3, "total": 6, "fraction": 0.2}
    assert json.loads(json.dumps(progress.__dict__)) == expected


def test_a_job_takes_audio_over_the_request_limit_and_decodes_it_from_disk(handler, clip_wav, tmp_path):
    """Long recordings are big files: jobs take up to ``MAX_FILE_BYTES`` (raw, or base64 decoded to disk as it is
    read), where ``POST /`` stops at ``MAX_REQUEST_BYTES``."""
    small = copy.copy(handler)
    limits = {"max_request_bytes": len(clip_wav) // 2, "max_file_bytes": 2 * len(clip_wav)}
    small.settings = handler.settings.model_copy(update=limits)
    with TestClient(create_app(handler=small, server_settings=ServerSettings(jobs_dir=tmp_path))) as client:
        ready(client)
        raw = {"Content-Type": "audio/wav"}
        assert client.post("/", content=clip_wav, headers=raw).status_code == 413
        assert client.post("/jobs", content=clip_wav * 3, headers=raw).status_code == 413
        queued = client.post("/jobs", content=clip_wav, headers=raw)
        assert queued.status_code == 202
        assert client.delete(f"/jobs/{queued.json()['id']}").status_code == 204
        encoded = base64.b64encode(clip_wav).decode()
        submitted = client.post("/jobs", json={"inputs": encoded, "parameters": {"num_speakers": 2}})
        assert submitted.status_code == 202
        job = wait_for(client, submitted.json()["id"], "completed", "failed")
        assert job["status"] == "completed", job
        result = client.get(f"/jobs/{job['id']}/result").json()
        assert result["duration"] == 15.0 and len({turn["speaker"] for turn in result["speakers"]}) == 2
