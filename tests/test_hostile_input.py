"""Hostile input: bodies that refer to the server's files or network are refused before FFmpeg follows them, and
no request, whatever its parameters and bytes, raises anything but a request error."""

from __future__ import annotations

import base64
import contextlib
import socket
import threading

import numpy as np
import pytest
from conftest import SAMPLE_RATE, encode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config import InferenceConfig
from speech.audio import ACCEPTED_FORMATS
from speech.errors import RequestError


class Listener:
    """A TCP listener on loopback that counts the connections it receives."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                connection, _ = self.socket.accept()
                self.connections += 1
                connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.socket.close()


@pytest.fixture
def listener():
    listening = Listener()
    yield listening
    listening.close()


@pytest.fixture
def secret(tmp_path, monkeypatch):
    """A recording beside the server's working directory that no request may read: ``sub/secret.wav``."""
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "secret.wav"
    path.write_bytes(encode(0.3 * np.sin(np.arange(3 * SAMPLE_RATE) / 5.0), SAMPLE_RATE, "wav", "pcm_s16le"))
    monkeypatch.chdir(tmp_path)
    return path


def referencing_bodies(secret: str, port: int) -> dict[str, tuple[bytes, str]]:
    """Bodies that make FFmpeg open another resource when it probes the format from the bytes, with the words
    the refusal names them by."""
    url = f"http://127.0.0.1:{port}/segment.wav"
    return {
        "ffconcat, relative path": (b"ffconcat version 1.0\nfile sub/secret.wav\n", "concat list"),
        "ffconcat, absolute path": (f"ffconcat version 1.0\nfile {secret}\n".encode(), "concat list"),
        "HLS, file: segment": (
            f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:3,\nfile:{secret}\n#EXT-X-ENDLIST\n".encode(),
            "playlist",
        ),
        "HLS, http segment": (
            f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:3,\n{url}\n#EXT-X-ENDLIST\n".encode(),
            "playlist",
        ),
        "M3U, http entry": (f"#EXTM3U\n#EXTINF:3,x\n{url}\n".encode(), "playlist"),
        "concat: URL": (b"concat:sub/secret.wav|sub/secret.wav", "URL or FFmpeg protocol"),
        "subfile: URL": (f"subfile,,start,0,end,0,,:{secret}".encode(), "URL or FFmpeg protocol"),
        "file: URL": (f"file:{secret}".encode(), "URL or FFmpeg protocol"),
        "http URL": (url.encode(), "URL or FFmpeg protocol"),
        "SDP": (
            f"v=0\no=- 0 0 IN IP4 127.0.0.1\ns=x\nc=IN IP4 127.0.0.1\nt=0 0\nm=audio {port} RTP/AVP 0\n".encode(),
            "SDP",
        ),
        "DASH manifest": (
            f'<?xml version="1.0"?><MPD><Period><AdaptationSet><Representation><BaseURL>{url}</BaseURL>'
            "</Representation></AdaptationSet></Period></MPD>".encode(),
            "XML",
        ),
        "image sequence pattern": (b"sub/img-%03d.png", "text"),
    }


def test_bodies_that_refer_to_files_or_urls_are_refused(client, secret, listener):
    for name, (body, described) in referencing_bodies(str(secret), listener.port).items():
        raw = client.post("/", content=body, headers={"Content-Type": "audio/wav"})
        as_base64 = client.post("/", json={"inputs": base64.b64encode(body).decode(), "parameters": {}})
        for response in (raw, as_base64):
            assert response.status_code == 415, (name, response.text)
            error = response.json()["error"]
            assert described in error and "not an accepted audio file" in error and "WAV" in error, (name, error)
    assert listener.connections == 0


def test_accepted_formats_name_only_self_contained_containers():
    assert not {"concat", "hls", "sdp", "rtp", "image2", "dash", "webm_dash_manifest", "lavfi"} & set(ACCEPTED_FORMATS)


ONE_SECOND = 0.3 * np.sin(np.arange(SAMPLE_RATE) / 5.0)
AUDIO = {
    "a second of tone": encode(ONE_SECOND, SAMPLE_RATE, "wav", "pcm_s16le"),
    "a quiet second": encode(ONE_SECOND * 1e-4, SAMPLE_RATE, "ogg", "libopus"),
}


def parameter_values(name: str) -> st.SearchStrategy:
    """Values for one request parameter: plausible ones, out-of-range ones and wrong types."""
    anything = st.one_of(st.none(), st.booleans(), st.integers(-5, 300), st.floats(allow_nan=True), st.text(max_size=8))
    plausible = {
        "task": st.sampled_from(["transcribe", "translate"]),
        "language": st.sampled_from(["en", "english", "fr", "xx"]),
        "batch_size": st.integers(0, 9),
        "temperature": st.sampled_from([0.0, 0.5, 1.0, 1.5]),
        "beam_size": st.integers(0, 3),
        "assisted": st.sampled_from([True, False, "auto", "true"]),
        "chunk_length_s": st.sampled_from([4.0, 5.0, 10.0, 30.0]),
        "prompt": st.sampled_from(["", "Names: Diane.", "<|endoftext|>"]),
        "return_timestamps": st.sampled_from(["chunk", "word"]),
        "response_format": st.sampled_from(["json", "srt", "vtt", "txt", "rttm", "mp3"]),
        "num_speakers": st.integers(0, 4),
        "min_speakers": st.integers(0, 4),
        "max_speakers": st.integers(0, 4),
    }
    return st.one_of(plausible.get(name, anything), anything)


names = st.sampled_from([*InferenceConfig.model_fields, "speakers"])
parameters = st.dictionaries(names, st.none(), max_size=4).flatmap(
    lambda keys: st.fixed_dictionaries({key: parameter_values(key) for key in keys})
)
inputs = st.one_of(st.sampled_from(list(AUDIO.values())), st.binary(max_size=64), st.integers(), st.text(max_size=8))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parameters=parameters, inputs=inputs)
def test_any_request_gives_a_response_or_a_request_error(handler, parameters, inputs):
    """Whatever the parameters and bytes, the handler answers or refuses the request (a 4xx that names the
    problem). The handler turns every unexpected exception into an ``InferenceError`` (500): that fails."""
    try:
        response = handler({"inputs": inputs, "parameters": parameters})
    except RequestError as error:
        assert str(error) and 400 <= error.status_code < 500
    else:
        assert isinstance(response["text"], str) and response["duration"] > 0
