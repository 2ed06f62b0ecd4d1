"""Request audio: base64 or bytes in, one 16 kHz mono float32 waveform out (decoded once, with limits)."""

from __future__ import annotations

import base64
import binascii
import io
import re
import time
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from errors import AudioTooLongError, AudioTooShortError, InvalidAudioError

SAMPLE_RATE = 16000
MIN_DURATION_S = 0.1
_DATA_URI = re.compile(r"^data:[\w.+-]+/[\w.+-]+(;[\w-]+=[\w.-]+)*;base64,", re.ASCII)


def pyannote_sample_path() -> Path:
    """pyannote.audio's sample recording: a real 30 s two-speaker telephone call, with reference turns beside it."""
    import pyannote.audio

    return Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"


@dataclass(frozen=True)
class Audio:
    """Decoded request audio: mono float32 samples at ``SAMPLE_RATE``."""

    waveform: np.ndarray
    source_sample_rate: int
    source_channels: int

    @property
    def duration(self) -> float:
        return len(self.waveform) / SAMPLE_RATE


def request_bytes(inputs: object, max_bytes: int) -> bytes:
    """The audio file bytes of a request's ``inputs``: raw bytes, or base64 text (a ``data:`` URI prefix is allowed).

    A string is only ever read as base64, never as a path or URL.
    """
    if isinstance(inputs, (bytes, bytearray, memoryview)):
        data = bytes(inputs)
    elif isinstance(inputs, str):
        if len(inputs) > max_bytes * 4 // 3 + 4:
            raise AudioTooLongError(f"inputs: the request is larger than the {max_bytes}-byte limit")
        text = _DATA_URI.sub("", inputs.strip(), count=1)
        try:
            data = base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError) as error:
            raise InvalidAudioError(f"inputs: not valid base64 ({error})") from None
    else:
        raise InvalidAudioError(f"inputs: expected base64 text or bytes, got {type(inputs).__name__}")
    if not data:
        raise AudioTooShortError("inputs: the audio is empty")
    if len(data) > max_bytes:
        raise AudioTooLongError(f"inputs: {len(data)} bytes is larger than the {max_bytes}-byte limit")
    return data


def _resampled(container, stream):
    """Mono float32 16 kHz frames of ``stream``, flushed at the end."""
    resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
    for frame in container.decode(stream):
        yield from resampler.resample(frame)
    yield from resampler.resample(None)


def decode(data: bytes, max_duration_s: float, timeout_s: float | None = None) -> Audio:
    """Decode any format FFmpeg reads, downmix to mono and resample to 16 kHz.

    The duration and time limits are enforced while decoding, so a small file that expands to hours, or one that
    is slow to decode, is refused early.
    """
    max_samples = int(max_duration_s * SAMPLE_RATE)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pieces: list[np.ndarray] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise InvalidAudioError("inputs: the file has no audio stream")
            stream = container.streams.audio[0]
            source_rate, source_channels = stream.codec_context.sample_rate, stream.codec_context.channels
            for frame in _resampled(container, stream):
                samples = frame.to_ndarray().reshape(-1)
                total += len(samples)
                if total > max_samples:
                    raise AudioTooLongError(f"inputs: the audio is longer than the {max_duration_s:g} s limit")
                if deadline is not None and time.monotonic() > deadline:
                    raise AudioTooLongError(f"inputs: decoding took longer than the {timeout_s:g} s limit")
                pieces.append(samples)
    except av.FFmpegError as error:
        raise InvalidAudioError(f"inputs: not a readable audio file ({error.strerror or error})") from None
    waveform = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    if len(waveform) < MIN_DURATION_S * SAMPLE_RATE:
        raise AudioTooShortError(
            f"inputs: the audio lasts {len(waveform) / SAMPLE_RATE:.3f} s, less than the {MIN_DURATION_S} s minimum"
        )
    if not np.isfinite(waveform).all():
        raise InvalidAudioError("inputs: the audio contains non-finite samples (NaN or infinity)")
    waveform = waveform - waveform.mean(dtype=np.float64)  # a DC offset carries no speech and skews energies
    return Audio(waveform.astype(np.float32, copy=False), int(source_rate or 0), int(source_channels or 0))
