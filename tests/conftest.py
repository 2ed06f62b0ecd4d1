"""Shared fixtures: the real handler on the offline bundle, real recordings, audio encoders."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import av
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from evaluate import pyannote_sample  # noqa: E402

from audio import SAMPLE_RATE, decode  # noqa: E402


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
def client(handler):
    """The server app around the session's handler, in process (Starlette's test client)."""
    from starlette.testclient import TestClient

    from server import create_app

    with TestClient(create_app(handler=handler)) as client:
        yield ready(client)


__all__ = ["SAMPLE_RATE", "encode", "ready"]
