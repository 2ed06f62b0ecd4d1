"""Request audio decoding: formats, rates and channels to 16 kHz mono, the ways a request carries the file, and its
size limit. Files and inputs that are refused (broken, empty, too short, too long, not base64) are in
test_bad_input, through the server and the handler."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from conftest import SAMPLE_RATE, encode, rss_mb

from speech.audio import PCM_SCALE, _Samples, decode, float_samples, request_bytes
from speech.errors import AudioTooLongError, InvalidAudioError

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


@pytest.mark.parametrize("pcm16", [False, True])
def test_dc_offset_is_removed_and_clipped_peaks_keep_their_level(pcm16):
    """A tone 0.7 above zero, clipped at full scale: its tops are flat at 1.0 for 30 % of the time, its troughs
    round at 0.2. Decoding takes the offset away from every sample alike: the flat tops stay flat at 1.0 less the
    mean (not wrapped round to -1, not pushed out of range), the troughs at 0.2 less the mean; at float32 or
    16-bit PCM."""
    clipped = np.clip(tone(1.0, SAMPLE_RATE) + 0.7, -1, 1)
    audio = decode(encode(clipped, SAMPLE_RATE, "wav", "pcm_s16le"), 60, pcm16=pcm16)
    assert audio.waveform.dtype == (np.int16 if pcm16 else np.float32)
    waveform, mean = float_samples(audio.waveform), clipped.mean()
    assert abs(float(waveform.mean())) < 1e-4
    np.testing.assert_allclose(waveform, clipped - mean, atol=1e-3)
    tops = waveform[clipped == 1.0]
    assert len(tops) == pytest.approx(0.295 * SAMPLE_RATE, rel=0.02)  # where 0.5 sin > 0.3
    np.testing.assert_allclose(tops, 1.0 - mean, atol=1e-3)
    assert waveform.min() == pytest.approx(0.2 - mean, abs=1e-3)
    assert np.abs(waveform).max() <= 1.0


def test_pcm16_is_the_float_decoding_to_the_last_bit_and_clips_overshoot():
    """A long recording is held as 16-bit PCM: a 16-bit file's samples as they are (the float decoding, scaled),
    a float file's overshoot past full scale clipped, never wrapped round to the other sign."""
    data = encode(tone(1.0, SAMPLE_RATE), SAMPLE_RATE, "wav", "pcm_s16le")
    as_float, as_pcm = decode(data, 60).waveform, decode(data, 60, pcm16=True).waveform
    assert np.abs(float_samples(as_pcm) - as_float).max() <= 1 / PCM_SCALE  # the offset, rounded to a step
    loud = 3.0 * tone(1.0, SAMPLE_RATE, 200.0)  # peaks at 1.5
    pcm = decode(encode(loud, SAMPLE_RATE, "wav", "pcm_f32le"), 60, pcm16=True).waveform
    assert pcm.max() >= PCM_SCALE - 2 and pcm.min() <= -PCM_SCALE + 1
    assert (np.sign(pcm[np.abs(loud) > 0.1]) == np.sign(loud[np.abs(loud) > 0.1])).all()


def test_pcm16_samples_live_in_a_mapped_file_that_the_process_lets_go_of():
    """A long recording's 16-bit samples are a mapped temporary file: once read they are in the process, and
    ``release`` lets go of them (the kernel's page cache keeps them) without changing a sample."""
    ten_minutes = tone(600.0, SAMPLE_RATE, 300.0)
    data = encode(np.stack([ten_minutes, ten_minutes[::-1]]), SAMPLE_RATE, "wav", "pcm_s16le")
    audio = decode(data, 900, channels=True, pcm16=True)
    size_mb = audio.waveform.nbytes / 2**20
    assert audio.pages is not None and audio.waveform.shape == (2, 600 * SAMPLE_RATE)
    decoded = audio.waveform.copy()
    audio.release()
    before = rss_mb()
    audio.waveform.sum(dtype=np.int64)  # every page read back, nothing allocated
    held = rss_mb()
    audio.release()
    assert held - before > 0.8 * size_mb
    assert held - rss_mb() > 0.8 * size_mb
    np.testing.assert_array_equal(audio.waveform, decoded)


@pytest.mark.parametrize("pcm16", [False, True])
def test_samples_keep_their_channels_when_the_container_said_too_few(pcm16):
    """A container may say less than it holds: the samples grow, each channel keeping what it had."""
    samples = _Samples(2, SAMPLE_RATE, pcm16)
    pieces = [np.stack([np.full(1000, k / 100), np.full(1000, -k / 100)]) for k in range(40)]
    for piece in pieces:
        samples.append(piece)
    scaled = samples.array() / (PCM_SCALE if pcm16 else 1)
    np.testing.assert_allclose(scaled, np.concatenate(pieces, axis=1), atol=1 / PCM_SCALE)


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


def test_inputs_over_the_size_limit_are_refused_as_bytes_and_as_base64():
    with pytest.raises(AudioTooLongError, match="limit"):
        request_bytes(b"x" * 101, 100)
    with pytest.raises(AudioTooLongError, match="limit"):
        request_bytes("QUJD" * 1000, 100)
