"""Request bodies as the server reads them: a large base64 ``inputs`` decoded piece by piece, the same answer as a
whole parse for every other shape of JSON."""

from __future__ import annotations

import base64
import io
import json
import os

import pytest

from service.server.bodies import json_request
from speech.audio import request_bytes
from speech.errors import InvalidAudioError, RequestError

AUDIO = os.urandom(5 * 1024 * 1024 + 7)  # more than one 4 MB piece, and not a multiple of 3 bytes


def read(text: bytes) -> dict:
    data = json_request(io.BytesIO(text))
    data["inputs"] = request_bytes(data["inputs"], 10 * len(AUDIO))
    return data


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": base64.b64encode(AUDIO).decode(), "parameters": {"num_speakers": 2}},  # decoded piece by piece
        {"parameters": {"num_speakers": 2}, "inputs": base64.b64encode(AUDIO).decode()},
        {"inputs": "data:audio/wav;base64," + base64.b64encode(AUDIO).decode(), "parameters": {"num_speakers": 2}},
        {"inputs": base64.encodebytes(AUDIO).decode(), "parameters": {"num_speakers": 2}},  # lines: JSON escapes
    ],
)
def test_every_shape_of_json_gives_the_same_request(body):
    assert read(json.dumps(body).encode()) == {"inputs": AUDIO, "parameters": {"num_speakers": 2}}
    assert read(json.dumps(body, indent=2).encode())["inputs"] == AUDIO


def test_bad_base64_and_bad_json_are_named_as_before():
    with pytest.raises(InvalidAudioError, match="not valid base64"):
        read(b'{"inputs": "not base64!"}')
    with pytest.raises(RequestError, match="not valid JSON"):
        read(b'{"inputs": "AAAA", "parameters": }')
    with pytest.raises(RequestError, match="not valid JSON"):
        read(b'{"inputs": "AAAA')
