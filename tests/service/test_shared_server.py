"""The server as a team shares it (the session's live server: two API keys, one worker and two queue places, two
queued jobs per key, jobs kept 6 s, signed webhooks): keys, jobs per key, limits, webhooks, metrics and the log,
and a burst of large bodies while a request runs, with the server's memory measured, all over real HTTP."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import re
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import API_KEY, OTHER_API_KEY, SAMPLE_RATE, WEBHOOK_SECRET, LiveServer, encode, rss_mb

AUTH, OTHER_AUTH = LiveServer.auth(API_KEY), LiveServer.auth(OTHER_API_KEY)
WAV = {"Content-Type": "audio/wav"}


def wait_for_job(url: str, job_id: str, auth: dict, *statuses: str, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while (job := httpx.get(f"{url}/jobs/{job_id}", headers=auth).json())["status"] not in statuses:
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    return job


def test_every_route_but_health_and_the_page_needs_a_valid_key(live_server, clip_wav):
    from openai import AuthenticationError, OpenAI

    url = live_server.url
    routes = [("POST", "/"), ("GET", "/jobs"), ("DELETE", f"/jobs/{'a' * 32}"), ("GET", "/metrics")]
    routes += [("POST", "/v1/audio/transcriptions"), ("POST", "/convert/srt"), ("GET", "/nowhere")]
    for method, path in routes:
        for wrong in ({}, {"Authorization": "Bearer not-a-key"}, {"Authorization": API_KEY}):
            response = httpx.request(method, url + path, headers=wrong, content=b"{}")
            assert response.status_code == 401, (method, path, wrong)
            assert response.headers["www-authenticate"] == "Bearer"
            message = response.json()["error"]
            assert "API key" in (message["message"] if path.startswith("/v1/") else message)
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/ui").status_code == 200  # the page asks for the key
    client = OpenAI(base_url=f"{url}/v1", api_key="not-a-key", max_retries=0)
    with pytest.raises(AuthenticationError):
        client.audio.transcriptions.create(model="whisper-1", file=("clip.wav", clip_wav))
    answered = httpx.post(url, content=clip_wav, headers={**WAV, **OTHER_AUTH}, timeout=120)  # the file's key
    assert answered.status_code == 200 and "Diane" in answered.json()["text"]


def test_a_key_sees_none_of_another_keys_jobs_and_jobs_expire(live_server, clip_wav):
    url = live_server.url
    reference = base64.b64encode(clip_wav[: 44 + 2 * 4 * SAMPLE_RATE]).decode()
    parameters = {"known_speaker_names": ["Diane"], "known_speaker_references": [reference]}
    body = {"inputs": base64.b64encode(clip_wav).decode(), "parameters": parameters}
    job_id = httpx.post(f"{url}/jobs", json=body, headers=AUTH, timeout=60).json()["id"]
    assert [job["id"] for job in httpx.get(f"{url}/jobs", headers=OTHER_AUTH).json()["jobs"]] == []
    for method, path in [("GET", ""), ("GET", "/result"), ("POST", "/cancel"), ("DELETE", "")]:
        response = httpx.request(method, f"{url}/jobs/{job_id}{path}", headers=OTHER_AUTH)
        assert response.status_code == 404 and "no job" in response.json()["error"]
    listed = {job["id"]: job for job in httpx.get(f"{url}/jobs", headers=AUTH).json()["jobs"]}
    assert listed[job_id]["parameters"] == {"known_speaker_names": ["Diane"]}  # no reference audio
    assert reference[:100] not in httpx.get(f"{url}/jobs/{job_id}", headers=AUTH).text
    done = wait_for_job(url, job_id, AUTH, "completed")
    assert done["expires_at"] == pytest.approx(done["finished"] + 6)
    folder = Path(live_server.env["JOBS_DIR"]) / job_id
    assert folder.is_dir()
    while time.time() < done["expires_at"] + 5 and folder.exists():  # swept every 1.5 s
        time.sleep(0.2)
    assert not folder.exists()
    assert httpx.get(f"{url}/jobs/{job_id}", headers=AUTH).status_code == 404


def test_more_queued_jobs_than_a_key_may_have_are_refused(live_server, clip_wav):
    url = live_server.url
    posted = [httpx.post(f"{url}/jobs", content=clip_wav, headers={**WAV, **OTHER_AUTH}) for _ in range(3)]
    assert [response.status_code for response in posted] == [202, 202, 429]
    assert int(posted[2].headers["retry-after"]) > 0 and "2 jobs queued or running" in posted[2].json()["error"]
    other_key = httpx.post(f"{url}/jobs", content=clip_wav, headers={**WAV, **AUTH})
    assert other_key.status_code == 202  # the limit is each key's
    for job_id, auth in [(posted[0].json()["id"], OTHER_AUTH), (posted[1].json()["id"], OTHER_AUTH)]:
        assert httpx.delete(f"{url}/jobs/{job_id}", headers=auth).status_code == 204
    assert httpx.delete(f"{url}/jobs/{other_key.json()['id']}", headers=AUTH).status_code == 204


class Receiver(http.server.ThreadingHTTPServer):
    """A webhook receiver on 127.0.0.1 that answers the given statuses in turn (then 204), keeping what came."""

    def __init__(self, statuses: list[int]):
        received, answers = [], list(statuses)

        class Hook(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                received.append((dict(self.headers.items()), self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(answers.pop(0) if answers else 204)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Hook)
        self.received = received
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_webhook_arrives_signed_and_is_retried_after_a_500(live_server, clip_wav):
    url = live_server.url
    receiver = Receiver([500])
    try:
        hook = f"http://127.0.0.1:{receiver.server_address[1]}/hooks?token=abc"
        submitted = httpx.post(f"{url}/jobs", params={"webhook_url": hook}, content=clip_wav, headers={**WAV, **AUTH})
        assert submitted.status_code == 202 and submitted.json()["webhook_url"] == hook
        deadline = time.monotonic() + 120
        while len(receiver.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        receiver.shutdown()
    assert len(receiver.received) == 2
    (first, _), (headers, body) = receiver.received
    assert first["webhook-id"] == headers["webhook-id"]  # the same message, tried again
    key = base64.b64decode(WEBHOOK_SECRET.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{expected}"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 120
    event = json.loads(body)
    assert event["type"] == "job.completed" and event["data"]["id"] == submitted.json()["id"]
    assert event["data"]["status"] == "completed" and "owner" not in event["data"]


@pytest.mark.parametrize(
    "hook",
    [
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://localhost:9/hooks",  # resolves to loopback; only the address 127.0.0.1 is allowed
        "http://10.1.2.3/hooks",
        "http://[::1]/hooks",
        "file:///etc/passwd",
    ],
)
def test_webhooks_to_anything_but_a_public_address_are_refused(live_server, hook):
    body = {"inputs": "AAAA", "parameters": {"webhook_url": hook}}
    response = httpx.post(f"{live_server.url}/jobs", json=body, headers=AUTH)
    assert response.status_code == 422 and response.json()["error"].startswith("webhook_url: ")


def test_a_burst_of_large_bodies_is_refused_from_the_headers(live_server, sample_waveform, tmp_path):
    """With a request running, eight ~150 MB JSON bodies sent at once by curl (the whole body, without waiting for
    100-continue): the two that fit the queue are spooled to disk, the others answered 503 from their headers; the
    server's memory barely moves and /health answers at once throughout. The same request runs once before, so
    that the memory it takes is taken before the baseline."""
    url = live_server.url
    long_call = encode(np.tile(sample_waveform, 2), SAMPLE_RATE, "wav", "pcm_s16le")  # 60 s
    big = tmp_path / "big.json"
    big.write_bytes(b'{"inputs": "' + b"A" * (150 * 2**20) + b'"}')  # base64 of zeros: not audio
    samples, latencies, running = [], [], threading.Event()

    def watch() -> None:
        while running.is_set():
            samples.append(rss_mb(live_server.pid))
            time.sleep(0.02)

    def health() -> None:
        while running.is_set():
            started = time.perf_counter()
            assert httpx.get(f"{url}/health", timeout=10).status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.1)

    def post_big(_: int) -> int:
        headers = ["-H", "Expect:", "-H", "Content-Type: application/json", "-H", f"Authorization: Bearer {API_KEY}"]
        command = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", *headers, "--data-binary", f"@{big}", url]
        return int(subprocess.run(command, capture_output=True, text=True, check=True, timeout=300).stdout)

    assert httpx.post(url, content=long_call, headers={**WAV, **AUTH}, timeout=300).status_code == 200  # warm-up
    with ThreadPoolExecutor(max_workers=11) as pool:
        first = pool.submit(httpx.post, url, content=long_call, headers={**WAV, **AUTH}, timeout=300)
        _wait_for_queue_depth(url, 1)
        time.sleep(2.0)
        baseline = rss_mb(live_server.pid)
        running.set()
        watchers = [pool.submit(watch), pool.submit(health)]
        try:
            burst = list(pool.map(post_big, range(8)))
            first.result()
        finally:
            running.clear()
        for watcher in watchers:
            watcher.result()
    growth_mb = max(samples) - baseline
    print(f"burst: {sorted(burst)}, memory +{growth_mb:.0f} MB, /health at most {max(latencies):.2f} s")
    assert sorted(burst) == [415, 415] + [503] * 6
    assert growth_mb <= 300
    assert len(latencies) >= 20 and max(latencies) < 1.0


def test_metrics_count_refusals_and_the_log_keeps_no_keys_secrets_or_text(live_server):
    url = live_server.url
    assert httpx.get(f"{url}/jobs").status_code == 401
    metrics = httpx.get(f"{url}/metrics", headers=AUTH).text
    refused = re.search(r'speech_requests_total\{method="GET",route="/jobs",status="401"\} (\d+)', metrics)
    assert refused and int(refused.group(1)) >= 1
    for series in ("speech_request_duration_seconds_bucket", "speech_queue_depth", 'speech_jobs{status="completed"}'):
        assert series in metrics
    assert re.search(r'speech_webhook_deliveries_total\{outcome="retried"\} [1-9]', metrics)
    assert float(re.search(r"^speech_audio_seconds_total (\S+)$", metrics, re.MULTILINE).group(1)) > 15
    log = live_server.log.read_text()
    for secret in (API_KEY, OTHER_API_KEY, WEBHOOK_SECRET, WEBHOOK_SECRET.removeprefix("whsec_"), "Diane", "token=abc"):
        assert secret not in log
    lines = [json.loads(line.split("request ", 1)[1]) for line in log.splitlines() if " server: request {" in line]
    assert {"method", "route", "status", "duration_ms", "audio_s", "key"} <= set(lines[-1])
    assert any(line["status"] == 401 and line["key"] is None for line in lines)
    assert len({line["key"] for line in lines if line["key"]}) == 2  # each key by its hash


def _wait_for_queue_depth(url: str, depth: int) -> None:
    deadline = time.monotonic() + 30
    while f"speech_queue_depth {depth:.1f}" not in httpx.get(f"{url}/metrics", headers=AUTH).text:
        assert time.monotonic() < deadline
        time.sleep(0.05)
