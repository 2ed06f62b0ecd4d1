"""Request audio decoding: formats, rates, channels, and refusals with messages that name the problem."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from conftest import SAMPLE_RATE, encode

from speech.audio import decode, request_bytes
from speech.errors import AudioTooLongError, AudioTooShortError, InvalidAudioError

LIMIT = 10 * 1024 * 1024


def tone(seconds: float, rate: int, frequency: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return 0.5 * np.sin(2 * np.pi * frequency * t)


@pytest.mark.parametrize(
    ("container", "codec", "rate"),
    [
        ("wav", "pcm_s16le", 44100),
        ("flac", "flac", 22050),
        ("mp3", "libmp3lame", 44100),
        ("ogg", "libopus", 48000),
        ("mp4", "aac", 32000),
    ],
)
def test_formats_decode_to_16k_mono(container, codec, rate):
    audio = decode(encode(tone(2.0, rate), rate, container, codec), 60)
    assert audio.waveform.dtype == np.float32
    assert audio.duration == pytest.approx(2.0, abs=0.1)
    assert audio.source_sample_rate == rate


def test_stereo_48k_is_downmixed_and_resampled():
    left, right = tone(1.0, 48000), np.zeros(48000)
    audio = decode(encode(np.stack([left, right]), 48000, "wav", "pcm_s16le"), 60)
    assert audio.source_channels == 2
    assert len(audio.waveform) == pytest.approx(SAMPLE_RATE, abs=160)
    # the mono mix carries the left channel at reduced level, not silence and not clipping
    assert 0.1 < np.abs(audio.waveform).max() < 0.9


def test_dc_offset_is_removed_and_clipping_kept_in_range():
    audio = decode(encode(np.clip(tone(1.0, 16000) + 0.7, -1, 1), 16000, "wav", "pcm_s16le"), 60)
    assert abs(float(audio.waveform.mean())) < 1e-3
    assert np.abs(audio.waveform).max() <= 2.0 and np.isfinite(audio.waveform).all()


def test_8k_telephone_audio_is_upsampled():
    audio = decode(encode(tone(1.0, 8000), 8000, "wav", "pcm_s16le"), 60)
    assert len(audio.waveform) == pytest.approx(SAMPLE_RATE, abs=160)


def test_base64_text_and_data_uri_and_bytes_are_the_same(sample):
    raw = sample.audio.read_bytes()
    text = base64.b64encode(raw).decode()
    assert request_bytes(raw, 10 * len(raw)) == raw
    assert request_bytes(text, 10 * len(raw)) == raw
    assert request_bytes("data:audio/wav;base64," + text, 10 * len(raw)) == raw
    assert request_bytes(text[:60] + "\n" + text[60:], 10 * len(raw)) == raw


def test_a_string_is_never_a_path(sample):
    with pytest.raises(InvalidAudioError, match="base64"):
        request_bytes(str(sample.audio), LIMIT)


def test_invalid_base64():
    with pytest.raises(InvalidAudioError, match="not valid base64"):
        request_bytes("this is not base64!!", LIMIT)


def test_wrong_type():
    with pytest.raises(InvalidAudioError, match="expected base64 text or bytes, got list"):
        request_bytes([1, 2, 3], LIMIT)


def test_empty_inputs():
    with pytest.raises(AudioTooShortError, match="empty"):
        request_bytes(b"", LIMIT)
    with pytest.raises(AudioTooShortError, match="empty"):
        request_bytes("", LIMIT)


def test_request_size_limit():
    with pytest.raises(AudioTooLongError, match="limit"):
        request_bytes(b"x" * 101, 100)
    with pytest.raises(AudioTooLongError, match="limit"):
        request_bytes("QUJD" * 1000, 100)


def test_not_audio():
    with pytest.raises(InvalidAudioError, match="text is not an accepted audio file"):
        decode(b"%PDF-1.4 this is a document, not a recording" * 20, 60)


def test_random_bytes():
    with pytest.raises(InvalidAudioError):
        decode(np.random.default_rng(0).bytes(4096), 60)


def test_shorter_than_100_ms():
    with pytest.raises(AudioTooShortError, match=r"less than the 0\.1 s minimum"):
        decode(encode(tone(0.05, SAMPLE_RATE), SAMPLE_RATE, "wav", "pcm_s16le"), 60)


def test_duration_limit_is_checked_while_decoding():
    with pytest.raises(AudioTooLongError, match="longer than the 5 s limit"):
        decode(encode(tone(8.0, SAMPLE_RATE), SAMPLE_RATE, "flac", "flac"), 5)
