"""Bad input never crashes and never loses words: a corpus of broken files through the server, fuzzed decoding
and fuzzed merging, impossible speaker hints."""

from __future__ import annotations

import base64
import contextlib
import copy
import itertools
import struct
import time

import numpy as np
import pytest
from conftest import SAMPLE_RATE, encode
from hypothesis import given, settings
from hypothesis import strategies as st

from speech.attribution import attribute
from speech.audio import decode, request_bytes
from speech.errors import AudioTooLongError, InferenceTimeoutError, RequestCancelledError, RequestError
from speech.types import Turn, Word


def wav_header(data_bytes: int, channels: int = 1, rate: int = SAMPLE_RATE, bits: int = 16) -> bytes:
    fmt = struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * channels * bits // 8, channels * bits // 8, bits)
    return b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVEfmt " + fmt + b"data" + struct.pack("<I", data_bytes)


RANDOM = np.random.default_rng(7)
ONE_SECOND = encode(0.3 * np.sin(np.arange(SAMPLE_RATE) / 5.0), SAMPLE_RATE, "wav", "pcm_s16le")
FIFTY_MS = encode(0.3 * np.sin(np.arange(SAMPLE_RATE // 20) / 5.0), SAMPLE_RATE, "wav", "pcm_s16le")
BAD_FILES = {
    "zero-length": (b"", 400, "the audio is empty"),
    "random bytes": (RANDOM.bytes(4096), 415, "not a readable audio file"),
    "truncated WAV header": (ONE_SECOND[:30], 415, "not a readable audio file"),
    "WAV header, no samples": (wav_header(32000), 400, "lasts 0.000 s, less than the 0.1 s minimum"),
    "truncated WAV": (ONE_SECOND[:1044], 400, "lasts 0.030 s, less than the 0.1 s minimum"),
    "a whole file of 50 ms": (FIFTY_MS, 400, "lasts 0.050 s, less than the 0.1 s minimum"),
    "MP3 header with garbage": (b"ID3\3\0\0\0\0\0\0\xff\xfb\x90\x64" + RANDOM.bytes(4000), 415, "not a readable audio"),
    "header claims 2 GB": (wav_header(0x7FFFFFF0) + bytes(1600), 400, "less than the 0.1 s minimum"),
    "header claims 0 channels": (wav_header(32000, channels=0) + bytes(32000), 415, "not a readable audio file"),
    "header claims 2^31 Hz": (wav_header(32000, rate=0x7FFFFFFF) + bytes(32000), 415, "not a readable audio file"),
    "NaN samples": (encode(np.full(SAMPLE_RATE, np.nan), SAMPLE_RATE, "wav", "pcm_f32le"), 415, "non-finite"),
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_each_bad_file_gets_its_own_message(client, name):
    data, status, message = BAD_FILES[name]
    raw = client.post("/", content=data, headers={"Content-Type": "audio/wav"})
    as_base64 = client.post("/", json={"inputs": base64.b64encode(data).decode()})
    for response in (raw, as_base64):
        assert response.status_code == status, response.text
        assert message in response.json()["error"]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ("ÿÿÿÿ", "only ASCII characters"),
        ("%%%%", "not valid base64"),
        ("AAA", "Incorrect padding"),
        (12, "expected base64 text or bytes, got int"),
        ([1, 2, 3], "expected base64 text or bytes, got list"),
    ],
)
def test_inputs_that_are_not_base64_text_are_refused_by_name(client, inputs, message):
    response = client.post("/", json={"inputs": inputs})
    assert response.status_code == 415 and message in response.json()["error"]


def test_a_body_that_is_not_utf8_json(client):
    response = client.post("/", content=b'{"inputs": "\xff\xfe"}', headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]


def test_an_hour_of_compressed_silence_is_refused_early():
    silence = encode(np.zeros(3600 * 8000, dtype=np.float32), 8000, "ogg", "libopus")
    assert len(silence) < 1_000_000  # 0.8 MB
    started = time.perf_counter()
    with pytest.raises(AudioTooLongError, match="longer than the 600 s limit"):
        decode(silence, max_duration_s=600)
    assert time.perf_counter() - started < 10  # about a sixth of the file was decoded


def test_impossible_speaker_hints_are_reported_not_fatal(handler, clip_wav):
    response = handler({"inputs": clip_wav, "parameters": {"num_speakers": 12}})
    found = len({turn["speaker"] for turn in response["speakers"]})
    assert 1 <= found < 12
    assert response["warnings"] and "num_speakers=12 could not be met" in response["warnings"][0]
    assert "Diane" in response["text"]


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=2048))
def test_fuzzed_bytes_decode_or_raise_only_request_errors(data):
    with contextlib.suppress(RequestError):  # an InferenceError (500) or any other exception fails the test
        decode(request_bytes(data, 10_000), max_duration_s=5, timeout_s=5)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=44, max_size=1024), st.integers(min_value=0, max_value=43))
def test_fuzzed_wav_headers_decode_or_raise_only_request_errors(noise, cut):
    data = ONE_SECOND[:cut] + noise
    with contextlib.suppress(RequestError):  # an InferenceError (500) or any other exception fails the test
        decode(data, max_duration_s=5, timeout_s=5)


times = st.floats(min_value=-5, max_value=100, allow_nan=False)
words = st.lists(st.tuples(st.text("abc.?! ", min_size=1, max_size=6), times, times), max_size=40)
turns = st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), st.floats(0, 90), st.floats(0, 10)), max_size=15)


@settings(max_examples=300, deadline=None)
@given(words, turns)
def test_fuzzed_merge_keeps_every_word_once_in_order(pieces, raw_turns):
    heard = [Word(text, start, end, 1.0) for text, start, end in pieces]
    diarization = [Turn(speaker, start, start + length) for speaker, start, length in raw_turns]
    speakers, segments = attribute(heard, diarization)
    assert len(speakers) == len(heard)
    assert " ".join(s.text for s in segments).split() == " ".join(word.text for word in heard).split()
    for segment in segments:
        assert segment.start <= segment.end
    for first, second in itertools.pairwise([s for s in segments if s.text]):  # without text: a voice under another
        assert first.end <= second.start + 1e-9


def test_the_inference_timeout_stops_a_request(handler, clip_wav):
    hurried = copy.copy(handler)
    hurried.settings = handler.settings.model_copy(update={"inference_timeout_s": 1e-9})
    with pytest.raises(InferenceTimeoutError, match="longer than the 1e-09 s limit"):
        hurried({"inputs": clip_wav})


def test_a_progress_hook_can_stop_a_request_between_stages(handler, clip_wav):
    stages = []

    def hook(stage: str, completed: int, total: int) -> None:
        stages.append(stage)
        if stage == "transcription":
            raise RequestCancelledError("the client disconnected")

    with pytest.raises(RequestCancelledError):
        handler({"inputs": clip_wav}, progress=hook)
    assert stages[:2] == ["decoding", "segmentation"] and stages[-1] == "transcription"
