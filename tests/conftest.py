"""Shared fixtures: the real handler on the offline bundle, real recordings, audio encoders."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from evaluate import pyannote_sample  # noqa: E402

from speech.audio import SAMPLE_RATE, decode  # noqa: E402


def encode(samples: np.ndarray, rate: int, container: str, codec: str) -> bytes:
    """Encode (channels, n) float samples into an in-memory audio file."""
    samples = np.atleast_2d(samples).astype(np.float32)
    layout = {1: "mono", 2: "stereo"}[samples.shape[0]]
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as output:
        stream = output.add_stream(codec, rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout=layout)
        frame.sample_rate = rate
        for packet in (*stream.encode(frame), *stream.encode(None)):
            output.mux(packet)
    return buffer.getvalue()


SENTENCES = (
    "I finally fixed the bicycle that was standing in the garage all winter.",
    "Did you need new tyres, or was it only the chain?",
    "Both, and the brakes were worn down to the metal.",
    "Then it is a good thing you did not ride it like that.",
    "We are going to the lake on Saturday if the weather holds.",
    "Can I bring my sister along? She has never been there.",
    "Of course, there is enough room in the car for five people.",
    "I will make sandwiches and bring the big thermos of tea.",
    "Remember the sun cream, last time we all got burned.",
    "My neighbour lent me a tent that sleeps four.",
    "Is it the green one with the broken zip?",
    "No, he bought a new one for his trip to the mountains.",
    "The concert starts at eight, so let's meet at seven.",
    "I can only come after work, around half past seven.",
    "That is fine, I will keep a seat for you near the door.",
    "The new bakery on the corner sells bread until midnight.",
    "Their rye bread is the best I have had in years.",
    "I prefer the croissants, but they are gone by ten.",
    "Our train was cancelled, so we took the bus instead.",
    "It took twice as long, but we saw the whole coast.",
    "The museum has a new room about the history of the harbour.",
    "I read that they found an old ship under the quay.",
)
"""Everyday sentences for Kokoro test conversations (none of them a line of ``bench/corpus.py``)."""


def kokoro_dialogue(turns: list[tuple[str, str]]) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """16 kHz waveform (peak 0.5) of Kokoro ``(voice, text)`` turns said one after another, 0.6 s apart, and each
    turn's (voice, start, end) in seconds."""
    from conversations import synthesize

    pieces, spans, at = [], [], 0
    gap = np.zeros(int(0.6 * SAMPLE_RATE), dtype=np.float32)
    for voice, text in turns:
        speech = synthesize(text, voice, 1.0)
        spans.append((voice, at / SAMPLE_RATE, (at + len(speech)) / SAMPLE_RATE))
        pieces += [speech, gap]
        at += len(speech) + len(gap)
    waveform = np.concatenate(pieces)
    return 0.5 * waveform / np.abs(waveform).max(), spans


@pytest.fixture(scope="session", autouse=True)
def jobs_dir(tmp_path_factory) -> Path:
    """A temporary jobs folder as ``JOBS_DIR`` for the whole session (set before any app or server is built, and
    inherited by servers started as processes), so that no test reads, re-queues or writes the user's real jobs."""
    from config import ServerSettings

    folder = tmp_path_factory.mktemp("jobs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JOBS_DIR", str(folder))
        assert ServerSettings().jobs_dir == folder, "ServerSettings no longer reads its jobs folder from JOBS_DIR"
        yield folder


@pytest.fixture(scope="session")
def sample():
    """The pyannote sample: a real 30 s two-speaker telephone call with its reference transcript."""
    return pyannote_sample()


@pytest.fixture(scope="session")
def sample_waveform(sample) -> np.ndarray:
    return decode(sample.audio.read_bytes(), 3600).waveform


@pytest.fixture(scope="session")
def clip_wav(sample_waveform) -> bytes:
    """The first 15 s of the pyannote sample as WAV: both speakers, half the decoding time."""
    return encode(sample_waveform[: 15 * SAMPLE_RATE], SAMPLE_RATE, "wav", "pcm_s16le")


AMI_DEV = ROOT.parent / "shared" / "data" / "ami-dev"
"""Seven real AMI meeting excerpts (2-4 speakers) with speaker-attributed references, beside the repository."""


@pytest.fixture(scope="session")
def ami_dev() -> Path:
    """The ami-dev folder; a test that needs it is skipped where the checkout has none beside it."""
    if not AMI_DEV.is_dir():
        pytest.skip(f"{AMI_DEV} is missing")
    return AMI_DEV


@pytest.fixture(scope="session")
def handler():
    from handler import EndpointHandler

    return EndpointHandler()


@pytest.fixture(scope="session")
def sample_response(handler, sample) -> dict:
    return handler({"inputs": sample.audio.read_bytes(), "parameters": {"return_timestamps": "word"}})


def ready(client):
    """Wait until a test client's server reports healthy; return the client."""
    for _ in range(100):
        if client.get("/health").status_code == 200:
            return client
        time.sleep(0.05)
    raise AssertionError("the server never became healthy")


@pytest.fixture(scope="session")
def client(handler, tmp_path_factory):
    """The server app around the session's handler, in process (Starlette's test client), with its own jobs."""
    from starlette.testclient import TestClient

    from config import ServerSettings
    from service.server import create_app

    settings = ServerSettings(jobs_dir=tmp_path_factory.mktemp("client-jobs"))
    with TestClient(create_app(handler=handler, server_settings=settings)) as client:
        yield ready(client)


API_KEY = "key-of-team-a"
OTHER_API_KEY = "key-of-team-b"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"the live server's webhook signing key").decode()


@dataclass(frozen=True)
class LiveServer:
    """A server process started as users start it, its /health statuses while it started, its log and settings."""

    url: str
    statuses: list[int]
    log: Path
    pid: int
    env: dict[str, str]

    @staticmethod
    def auth(key: str = API_KEY) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


def rss_mb(pid: int | str = "self") -> float:
    """The resident memory of process ``pid`` (this one by default), in MB."""
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1)) / 1024


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def live_server(tmp_path_factory):
    """``python -m service.cli serve`` on 127.0.0.1, shared as a team would share it: two API keys (one from a
    file), one worker and two queue places, two queued jobs per key, jobs kept 6 s, webhooks signed and allowed
    to this machine."""
    folder = tmp_path_factory.mktemp("server")
    (folder / "keys").write_text(f"# team b\n{OTHER_API_KEY}\n")
    env = {"PORT": str(free_port()), "WORKERS": "1", "QUEUE_LENGTH": "2", "JOBS_DIR": str(folder / "jobs")}
    env |= {"DEMO_JOB_MIN_DURATION_S": "45", "API_KEYS": API_KEY, "API_KEYS_FILE": str(folder / "keys")}
    env |= {"JOBS_MAX_QUEUED": "2", "JOBS_TTL_S": "6", "WEBHOOK_SECRET": WEBHOOK_SECRET}
    env |= {"WEBHOOK_ALLOWED_HOSTS": "127.0.0.1"}
    log = folder / "server.log"
    with log.open("wb") as output:
        command = [sys.executable, "-m", "service.cli", "serve"]
        process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env}, stderr=output)
    url = f"http://127.0.0.1:{env['PORT']}"
    statuses = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and 200 not in statuses:
            assert process.poll() is None, log.read_text()
            with contextlib.suppress(OSError):  # not listening yet
                statuses.append(_get_status(f"{url}/health"))
            time.sleep(0.05)
        yield LiveServer(url, statuses, log, process.pid, env)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _get_status(url: str) -> int:
    import httpx

    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.TransportError as error:
        raise OSError(error) from None


__all__ = ["API_KEY", "OTHER_API_KEY", "SAMPLE_RATE", "WEBHOOK_SECRET", "LiveServer", "encode", "ready"]
