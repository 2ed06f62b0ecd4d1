"""``multichannel``: a two-channel call (one side per channel, each bleeding into the other at -20 dB, the second
side holding two voices) comes back with every word on its channel, the two voices of channel 1 told apart and no
label on both channels, in every response shape; a mono file runs as channel 0; more than 8 channels is refused."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest
from calls import score, two_channel_call
from conftest import SENTENCES

from speech.audio import SAMPLE_RATE
from speech.errors import RequestError
from speech.formats import openai_json, toolkit_json

# Kokoro voices of the test set (``bench/conversations.TEST_VOICES``): the caller on channel 0, two agents on 1.
CALLER, AGENTS = "bf_emma", ("am_adam", "af_aoede")


@pytest.fixture(scope="module")
def call():
    """About 40 s: the caller and the agents taking turns, each side bleeding into the other at -20 dB."""
    return two_channel_call(CALLER, AGENTS, list(SENTENCES[:12]), bleed_db=-20.0)


@pytest.fixture(scope="module")
def response(handler, call):
    parameters = {"multichannel": True, "return_timestamps": "word", "response_format": "rttm"}
    return handler.respond({"inputs": call.wav(), "parameters": parameters})


def test_every_word_is_on_its_side_of_the_call_and_the_voices_are_told_apart(response, call):
    found = score(response, call)
    assert found.heard >= 0.9 * found.words  # the rest are words Whisper heard differently
    assert found.right_channel >= 0.95 * found.heard, found
    assert found.agents_apart >= 0.9 * found.agent_words, found
    assert not found.shared_labels
    assert {word.speaker for word in response.words if word.word.channel == 0} == {"CH0"}
    assert all(word.speaker.startswith("CH1_SPEAKER_") for word in response.words if word.word.channel == 1)


def test_every_shape_carries_the_channel(response):
    body = toolkit_json(response)
    assert {chunk["channel"] for chunk in body["chunks"]} == {0, 1}
    assert all(word["channel"] in (0, 1) for word in body["words"])
    assert [turn["channel"] for turn in body["speakers"] if turn["text"]][:4] == [0, 1, 0, 1]  # the sides alternate
    rttm = [line.split() for line in body["rttm"].splitlines()]
    assert {(fields[2], fields[7].split("_")[0]) for fields in rttm} == {("1", "CH0"), ("2", "CH1")}
    diarized = openai_json(response, "diarized_json", "transcribe", words=False)
    assert all(segment["channel"] == int(segment["speaker"][2]) for segment in diarized["segments"])
    verbose = openai_json(response, "verbose_json", "transcribe", words=True)
    assert {segment["channel"] for segment in verbose["segments"]} == {0, 1}
    assert all("channel" in word for word in verbose["words"])


def test_a_mono_recording_runs_as_channel_0_with_a_warning(handler, clip_wav):
    body = handler({"inputs": clip_wav, "parameters": {"multichannel": True}})
    assert any("single channel" in warning for warning in body["warnings"])
    assert {chunk["channel"] for chunk in body["chunks"]} == {0}
    assert all(turn["speaker"].startswith("CH0") for turn in body["speakers"])


def test_more_than_eight_channels_is_refused(handler):
    tone = (np.sin(np.arange(SAMPLE_RATE) / SAMPLE_RATE * 2 * np.pi * 440) * 8000).astype("<i2")
    wav = io.BytesIO()
    with wave.open(wav, "wb") as file:
        file.setnchannels(10)
        file.setsampwidth(2)
        file.setframerate(SAMPLE_RATE)
        file.writeframes(np.repeat(tone, 10).tobytes())
    with pytest.raises(RequestError, match="10 channels; multichannel takes at most 8"):
        handler({"inputs": wav.getvalue(), "parameters": {"multichannel": True}})
