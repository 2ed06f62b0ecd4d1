"""Request audio: base64, bytes or an open file in, a 16 kHz waveform out (float32, or 16-bit PCM in a memory-mapped
temporary file; mono, or one row per channel; decoded once, with limits)."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import mmap
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import av
import numpy as np
import torch

from speech.errors import AudioTooLongError, AudioTooShortError, InvalidAudioError, RequestError

SAMPLE_RATE = 16000
MIN_DURATION_S = 0.1

ACCEPTED_FORMATS = {
    "wav": "WAV",
    "w64": "Wave64",
    "flac": "FLAC",
    "mp3": "MP3",
    "ogg": "Ogg (Opus, Vorbis, FLAC)",
    "mov": "MP4/M4A/MOV/3GP",
    "aac": "AAC (ADTS)",
    "matroska": "WebM/Matroska",
    "amr": "AMR",
    "amrnb": "AMR-NB",
    "amrwb": "AMR-WB",
    "caf": "CAF",
    "aiff": "AIFF",
    "asf": "WMA/ASF",
    "au": "AU",
    "wv": "WavPack",
    "ac3": "AC-3",
    "eac3": "E-AC-3",
}
"""FFmpeg demuxers a request may be opened with: containers that hold audio and never refer to another resource.
Every other demuxer (concat lists, playlists, SDP, image sequences, devices...) is refused before it runs."""
_NO_PROTOCOL = "none"
"""FFmpeg's protocol allow-list for the request: none, so nothing inside a file can open a path or a URL."""
_REFERENCING = (
    (b"ffconcat", "an FFmpeg concat list"),
    (b"#EXTM3U", "an M3U/HLS playlist"),
    (b"[playlist]", "a PLS playlist"),
    (b"v=0", "an SDP session description"),
    (b"<?xml", "an XML document (a DASH manifest or a playlist)"),
    (b"<MPD", "a DASH manifest"),
)
_DATA_URI = re.compile(r"^data:[\w.+-]+/[\w.+-]+(;[\w-]+=[\w.-]+)*;base64,", re.ASCII)


def pyannote_sample_path() -> Path:
    """pyannote.audio's sample recording: a real 30 s two-speaker telephone call, with reference turns beside it."""
    import pyannote.audio

    return Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"


MAX_CHANNELS = 8
"""Most channels a recording may have when its channels are kept apart (``decode(..., channels=True)``)."""

AudioSource = bytes | BinaryIO
"""An audio file: its bytes, or an open binary file (read from the start; never a path or a URL)."""


PCM_SCALE = 32768
"""16-bit PCM sample values per unit of float amplitude."""


def float_samples(samples: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """``samples`` (numpy or torch) as float32 in [-1, 1]: float ones as they are, 16-bit PCM ones scaled, in a
    copy."""
    if isinstance(samples, torch.Tensor):
        return samples.float() / PCM_SCALE if samples.dtype == torch.int16 else samples
    return np.multiply(samples, np.float32(1 / PCM_SCALE), dtype=np.float32) if samples.dtype == np.int16 else samples


@dataclass(frozen=True)
class Audio:
    """Decoded request audio at ``SAMPLE_RATE``, float32 or 16-bit PCM (``decode(..., pcm16=True)``): mono samples,
    or one row per channel when decoded with ``channels=True``. 16-bit samples live in a memory-mapped temporary
    file, ``pages``."""

    waveform: np.ndarray
    source_sample_rate: int
    source_channels: int
    pages: mmap.mmap | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def duration(self) -> float:
        return self.waveform.shape[-1] / SAMPLE_RATE

    @property
    def channels(self) -> list[np.ndarray]:
        """Each channel's samples (the mono waveform alone when the channels were mixed down)."""
        return list(self.waveform) if self.waveform.ndim == 2 else [self.waveform]

    def release(self) -> None:
        """Let go of the pages of the samples this process has read (16-bit ones): they stay in the kernel's page
        cache, which may drop them (the file keeps them), and come back when next read. Called as a long recording
        is worked through, so it is never held whole in the process."""
        if self.pages is not None:
            self.pages.madvise(mmap.MADV_DONTNEED)


def request_audio(inputs: object, max_bytes: int, max_file_bytes: int, field: str = "inputs") -> AudioSource:
    """``request_bytes``, or an open binary file (handed in by the server's jobs or the CLI, never sent as such)
    of at most ``max_file_bytes``."""
    if hasattr(inputs, "read") and hasattr(inputs, "seek"):
        size = inputs.seek(0, io.SEEK_END)
        inputs.seek(0)
        check_size(size, max_file_bytes, field)
        return inputs
    return request_bytes(inputs, max_bytes, field)


def request_bytes(inputs: object, max_bytes: int, field: str = "inputs") -> bytes:
    """The audio file bytes of a request's ``inputs``: raw bytes, or base64 text (a ``data:`` URI prefix is allowed).

    A string is only ever read as base64, never as a path or URL. Error messages name ``field``.
    """
    if isinstance(inputs, (bytes, bytearray, memoryview)):
        data = bytes(inputs)
    elif isinstance(inputs, str):
        if len(inputs) > max_bytes * 4 // 3 + 4:
            raise AudioTooLongError(f"{field}: the request is larger than the {max_bytes}-byte limit")
        text = _DATA_URI.sub("", inputs.strip(), count=1)
        try:
            data = base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError) as error:
            raise InvalidAudioError(f"{field}: not valid base64 ({error})") from None
    else:
        raise InvalidAudioError(f"{field}: expected base64 text or bytes, got {type(inputs).__name__}")
    check_size(len(data), max_bytes, field)
    return data


def check_size(size: int, max_bytes: int, field: str = "inputs") -> None:
    """Refuse an audio file of ``size`` bytes that is empty or over ``max_bytes``."""
    if not size:
        raise AudioTooShortError(f"{field}: the audio is empty")
    if size > max_bytes:
        raise AudioTooLongError(f"{field}: {size} bytes is larger than the {max_bytes}-byte limit")


def _resampled(container, stream, channels: bool):
    """16 kHz float32 frames of ``stream``, planar with its channels or mixed down to mono, flushed at the end."""
    layout = stream.codec_context.layout if channels else "mono"
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=SAMPLE_RATE)
    for frame in container.decode(stream):
        yield from resampler.resample(frame)
    yield from resampler.resample(None)


def _referencing_kind(head: bytes) -> str | None:
    """What the request is, from its first bytes, when it looks like a list, playlist, description, URL or other
    text rather than an audio file; ``None`` when it does not."""
    head = head.lstrip()
    for signature, name in _REFERENCING:
        if head.startswith(signature):
            return name
    if re.match(rb"[a-z][a-z0-9+.,-]*:", head):
        return f"a URL or FFmpeg protocol string ({head.split(b':', 1)[0].decode()}:)"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text" if text and all(c.isprintable() or c.isspace() for c in text) else None


def _refuse(kind: str, field: str) -> InvalidAudioError:
    accepted = ", ".join(dict.fromkeys(ACCEPTED_FORMATS.values()))
    return InvalidAudioError(f"{field}: {kind} is not an accepted audio file; send one of: {accepted}")


def _open(source: AudioSource, field: str) -> av.container.InputContainer:
    """Open ``source`` as one of the ``ACCEPTED_FORMATS``, read from memory or the open file only: text that could
    point FFmpeg elsewhere is refused first, then FFmpeg may only pick an accepted demuxer and may open no protocol."""
    file = io.BytesIO(source) if isinstance(source, bytes) else source
    file.seek(0)
    kind = _referencing_kind(file.read(512))
    file.seek(0)
    if kind is not None:
        raise _refuse(kind, field)
    options = {"format_whitelist": ",".join(ACCEPTED_FORMATS), "protocol_whitelist": _NO_PROTOCOL}
    try:
        return av.open(file, mode="r", options=options)
    except av.ArgumentError:  # FFmpeg's answer to a demuxer that is not on the allow-list
        raise _refuse("binary data in another format", field) from None


def decode(
    source: AudioSource,
    max_duration_s: float,
    timeout_s: float | None = None,
    field: str = "inputs",
    channels: bool = False,
    pcm16: bool = False,
) -> Audio:
    """Decode a file in one of the ``ACCEPTED_FORMATS`` and resample it to 16 kHz, mixed down to mono or, with
    ``channels``, keeping its channels apart (at most ``MAX_CHANNELS``); with ``pcm16``, the samples are kept as
    16-bit PCM in a memory-mapped temporary file (in ``TMPDIR``): what a long recording is held in while it is
    processed, in the process only as far as it is read (``Audio.release``).

    The duration and time limits are enforced while decoding, so a small file that expands to hours, or one that
    is slow to decode, is refused early. Error messages name ``field``.
    """
    max_samples = int(max_duration_s * SAMPLE_RATE)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        with _open(source, field) as container:
            if not container.streams.audio:
                raise InvalidAudioError(f"{field}: the file has no audio stream")
            stream = container.streams.audio[0]
            source_rate, source_channels = stream.codec_context.sample_rate, stream.codec_context.channels
            if channels and source_channels > MAX_CHANNELS:
                raise RequestError(
                    f"{field}: the recording has {source_channels} channels; multichannel takes at most {MAX_CHANNELS}"
                )
            width = source_channels if channels else 1
            waveform = _Samples(width, _expected_samples(container, max_samples), pcm16)
            for frame in _resampled(container, stream, channels):
                samples = frame.to_ndarray()
                if waveform.length + samples.shape[1] > max_samples:
                    raise AudioTooLongError(f"{field}: the audio is longer than the {max_duration_s:g} s limit")
                if deadline is not None and time.monotonic() > deadline:
                    raise AudioTooLongError(f"{field}: decoding took longer than the {timeout_s:g} s limit")
                if not np.isfinite(samples).all():
                    raise InvalidAudioError(f"{field}: the audio contains non-finite samples (NaN or infinity)")
                waveform.append(samples)
    except av.FFmpegError as error:
        raise InvalidAudioError(f"{field}: not a readable audio file ({error.strerror or error})") from None
    samples = waveform.array()
    if samples.shape[1] < MIN_DURATION_S * SAMPLE_RATE:
        raise AudioTooShortError(
            f"{field}: the audio lasts {samples.shape[1] / SAMPLE_RATE:.3f} s, less than the {MIN_DURATION_S} s minimum"
        )
    for channel in samples:
        _remove_offset(channel)
    mono = samples if channels else samples[0]
    return Audio(mono, int(source_rate or 0), int(source_channels or 0), waveform.pages)


def _expected_samples(container, max_samples: int) -> int:
    """16 kHz samples the container says it holds (a second more, at most ``max_samples``); 0 when it does not."""
    if not container.duration:
        return 0
    return min(max_samples, int(container.duration / av.time_base * SAMPLE_RATE) + SAMPLE_RATE)


def _remove_offset(channel: np.ndarray) -> None:
    """Remove a channel's DC offset in place (it carries no speech and skews energies); 16-bit samples that would
    overflow are clipped."""
    offset = channel.mean(dtype=np.float64)
    if channel.dtype == np.int16:
        offset = round(offset)
        np.clip(channel, -PCM_SCALE + max(offset, 0), PCM_SCALE - 1 + min(offset, 0), out=channel)
    np.subtract(channel, offset, out=channel, casting="unsafe")


class _Samples:
    """Decoded samples, one row per channel, written into one array of the expected length as they come (a long
    recording is not held twice, as pieces and joined), growing by half when a container said less than it holds
    (a minute when it said nothing). Float samples are kept in memory as they are; 16-bit PCM ones (rounded,
    clipped) in a memory-mapped temporary file, ``pages``."""

    def __init__(self, channels: int, expected: int, pcm16: bool):
        self.pages: mmap.mmap | None = None
        self._pcm16 = pcm16
        self._buffer = self._allocate(channels, expected or 60 * SAMPLE_RATE)
        self.length = 0

    def _allocate(self, channels: int, size: int) -> np.ndarray:
        if not self._pcm16:
            return np.empty((channels, size), dtype=np.float32)
        with tempfile.TemporaryFile() as file:  # the mapping keeps the unlinked file until it is unmapped
            file.truncate(channels * size * 2)
            self.pages = mmap.mmap(file.fileno(), channels * size * 2)
        return np.frombuffer(self.pages, dtype=np.int16).reshape(channels, size)

    def append(self, samples: np.ndarray) -> None:
        count, size = samples.shape[1], self._buffer.shape[1]
        if self.length + count > size:
            grown = self._allocate(len(self._buffer), max(self.length + count, size * 3 // 2))
            grown[:, : self.length] = self._buffer[:, : self.length]
            self._buffer = grown
        if self._pcm16:
            samples = np.clip(np.rint(samples * PCM_SCALE), -PCM_SCALE, PCM_SCALE - 1)  # a 16-bit source exactly
        self._buffer[:, self.length : self.length + count] = samples
        self.length += count

    def array(self) -> np.ndarray:
        """The samples; in memory, in a copy only when the buffer is more than a second too long."""
        if not self._pcm16 and self._buffer.shape[1] - self.length > SAMPLE_RATE:
            return self._buffer[:, : self.length].copy()
        return self._buffer[:, : self.length]
