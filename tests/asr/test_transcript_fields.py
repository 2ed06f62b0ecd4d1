"""What users of Whisper read besides the text, on the pyannote sample: segments timed by their words, each
segment's quality figures (OpenAI's verbose_json, faster-whisper's Segment) and each word's probability."""

from __future__ import annotations

import statistics


def test_every_word_has_a_probability_and_a_clear_call_is_heard_with_confidence(sample_response):
    probabilities = [word["probability"] for word in sample_response["words"]]
    assert len(probabilities) > 50
    assert all(0.0 <= p <= 1.0 for p in probabilities)
    assert statistics.median(probabilities) > 0.7  # mostly clear speech: most words are likely
    assert min(probabilities) < 0.5  # ... but not all: a constant would not tell a user where to look


def test_segments_start_at_their_first_word_and_end_at_their_last(sample_response):
    chunks, words = sample_response["chunks"], sample_response["words"]
    assert len(chunks) >= 10
    starts, ends = [word["start"] for word in words], [word["end"] for word in words]
    near = [min(abs(chunk["timestamp"][0] - start) for start in starts) <= 0.1 for chunk in chunks]
    assert sum(near) / len(near) >= 0.95
    assert all(min(abs(chunk["timestamp"][1] - end) for end in ends) <= 0.1 for chunk in chunks)
    # The call opens with "Hello." at about 7 s: Whisper's own timestamps said [0.0, 5.0].
    assert chunks[0]["text"] == "Hello." and 6.5 < chunks[0]["timestamp"][0] < 7.5


def test_segments_carry_whispers_quality_figures(sample_response):
    for chunk in sample_response["chunks"]:
        assert -1.0 < chunk["avg_logprob"] < 0.0  # speech Whisper is sure of, above its -1.0 threshold
        assert 0.0 <= chunk["no_speech_prob"] < 0.6  # speech, by Whisper's no-speech rule
        assert 1.0 < chunk["compression_ratio"] < 2.4  # text, not a repetition loop
        assert chunk["temperature"] == 0.0  # greedy decoding kept: nothing was decoded again


def test_a_sampled_decoding_reports_its_temperature(handler, clip_wav):
    response = handler({"inputs": clip_wav, "parameters": {"temperature": 0.4}})
    assert response["chunks"]
    # Sampled at 0.4, or higher where the temperature fallback decoded a window again.
    assert {chunk["temperature"] for chunk in response["chunks"]} <= {0.4, 0.6, 0.8, 1.0}
    if not response["decoding"]["fallback_windows"]:
        assert {chunk["temperature"] for chunk in response["chunks"]} == {0.4}
