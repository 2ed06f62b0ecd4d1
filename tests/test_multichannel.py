"""``multichannel``: a two-channel call (one side per channel, each bleeding into the other at -20 dB, the second
side holding two voices) comes back with every word on its channel, the two voices of channel 1 told apart and no
label on both channels, in every response shape; a mono file runs as channel 0; more than 8 channels is refused."""

from __future__ import annotations

import io
import re
import wave
from collections import Counter

import numpy as np
import pytest
from conftest import SENTENCES, encode, kokoro_dialogue

from speech.audio import SAMPLE_RATE
from speech.errors import RequestError
from speech.formats import openai_json, toolkit_json

# Kokoro voices of the test set (``bench/conversations.TEST_VOICES``): the caller on channel 0, two agents on 1.
CALLER, AGENTS = "bf_emma", ("am_adam", "af_aoede")
ORDER = [voice for agent in AGENTS * 3 for voice in (CALLER, agent)]
BLEED = 0.1  # -20 dB


@pytest.fixture(scope="module")
def call() -> tuple[bytes, list[tuple[str, int, float, float, set[str]]]]:
    """The call as a stereo WAV, and each turn's voice, channel, start, end and words."""
    texts = SENTENCES[: len(ORDER)]
    mixed, spans = kokoro_dialogue(list(zip(ORDER, texts, strict=True)))
    sides = np.zeros((2, len(mixed)), dtype=np.float32)
    turns = []
    for (voice, start, end), text in zip(spans, texts, strict=True):
        channel = 0 if voice == CALLER else 1
        first, last = int(start * SAMPLE_RATE), int(end * SAMPLE_RATE)
        sides[channel, first:last] = mixed[first:last]
        turns.append((voice, channel, start, end, set(_words(text))))
    return encode(sides + BLEED * sides[::-1], SAMPLE_RATE, "wav", "pcm_s16le"), turns


@pytest.fixture(scope="module")
def response(handler, call):
    parameters = {"multichannel": True, "return_timestamps": "word", "response_format": "rttm"}
    return handler.respond({"inputs": call[0], "parameters": parameters})


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def _source(word, turns):
    """The turn a transcribed word was said in: the nearest turn (within a second) whose text has the word."""
    middle = (word.start + word.end) / 2
    said = [turn for turn in turns if _words(word.text) and set(_words(word.text)) <= turn[4]]
    nearest = min(said, key=lambda turn: max(turn[2] - middle, middle - turn[3], 0.0), default=None)
    if nearest is None or max(nearest[2] - middle, middle - nearest[3]) > 1.0:
        return None
    return nearest


def test_every_word_is_on_its_side_of_the_call_and_the_voices_are_told_apart(response, call):
    _, turns = call
    sources = [(_source(word.word, turns), word) for word in response.words]
    heard = [(source, word) for source, word in sources if source is not None]
    assert len(heard) >= 0.9 * len(sources)  # the rest are words Whisper heard differently
    right = sum(word.word.channel == source[1] for source, word in heard)
    assert right >= 0.95 * len(heard), f"{right} of {len(heard)} words on the right channel"

    labels = {channel: {w.speaker for w in response.words if w.word.channel == channel} for channel in (0, 1)}
    assert labels[0] == {"CH0"} and not labels[0] & labels[1]
    agents = {voice: Counter(w.speaker for s, w in heard if s[0] == voice and w.word.channel == 1) for voice in AGENTS}
    majority = {voice: counts.most_common(1)[0][0] for voice, counts in agents.items()}
    assert len(set(majority.values())) == 2 and all(label.startswith("CH1_SPEAKER_") for label in majority.values())
    agreed = sum(counts[majority[voice]] for voice, counts in agents.items())
    assert agreed >= 0.9 * sum(sum(counts.values()) for counts in agents.values())


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
