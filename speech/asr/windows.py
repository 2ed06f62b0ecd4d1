"""The recording cut into Whisper windows at quiet moments, and the holes a window's text leaves in the speech."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from speech.audio import SAMPLE_RATE
from speech.speakers.turns import TurnIndex
from speech.text import ends_sentence
from speech.types import Word

_QUIET_SEARCH_S = 5.0  # a long recording is cut at the quietest point of the last seconds of each window
_ENERGY_FRAME_S = 0.02
_ENERGY_SMOOTHING_S = 0.2
_ENERGY_BLOCK_FRAMES = 30_000  # 10 minutes of 20 ms frames
_HOLE_S = 1.0  # a pause between the words of a window decoded without timestamp tokens that may hide left-out speech
_HOLE_SPEECH_S = 0.5  # ... does if the diarization finds this much speech in it


@dataclass(frozen=True)
class Window:
    """A stretch of the recording decoded as one Whisper input; ``offset`` in seconds."""

    offset: float
    samples: np.ndarray

    @property
    def end(self) -> float:
        return self.offset + len(self.samples) / SAMPLE_RATE


def split_windows(waveform: np.ndarray, max_length_s: float) -> list[Window]:
    """Cut ``waveform`` into windows of at most ``max_length_s``, each cut at the quietest nearby moment."""
    max_length = int(max_length_s * SAMPLE_RATE)
    if len(waveform) <= max_length:
        return [Window(0.0, waveform)]
    frame = int(_ENERGY_FRAME_S * SAMPLE_RATE)
    usable = len(waveform) // frame * frame
    frames = waveform[:usable].reshape(-1, frame)
    blocks = range(0, len(frames), _ENERGY_BLOCK_FRAMES)  # not the whole recording in float64 at once
    energy = np.concatenate(
        [np.square(frames[b : b + _ENERGY_BLOCK_FRAMES], dtype=np.float64).mean(axis=1) for b in blocks]
    )
    smoothing = max(1, int(_ENERGY_SMOOTHING_S / _ENERGY_FRAME_S))
    energy = np.convolve(energy, np.ones(smoothing) / smoothing, mode="same")
    search = int(min(_QUIET_SEARCH_S, max_length_s / 3) * SAMPLE_RATE) // frame
    windows, start = [], 0
    while len(waveform) - start > max_length:
        last = min((start + max_length) // frame, len(energy))
        first = max(start // frame + 1, last - search)
        cut = (first + int(np.argmin(energy[first:last]))) * frame
        windows.append(Window(start / SAMPLE_RATE, waveform[start:cut]))
        start = cut
    windows.append(Window(start / SAMPLE_RATE, waveform[start:]))
    return windows


def batched(items: list[Window], size: int) -> Iterator[list[Window]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass(frozen=True)
class Holes:
    """A window's words (a sentence's first word dated at a hole moved to the hole's end) and its holes."""

    words: list[Word]
    windows: list[Window]


def find_holes(window: Window, words: list[Word], speech: TurnIndex) -> Holes:
    """The pauses of ``_HOLE_S`` or more between a window's ``words`` (and its ends) that hold ``_HOLE_SPEECH_S`` of
    ``speech``, as windows to decode again (in pauses without speech, Whisper makes up text: "Thank you." in a
    ringing tone). A sentence's first word alone before a hole is where the alignment put the next sentence's
    first word when the text jumped over the hole: it moves to the hole's end."""
    if not words:
        return Holes([], [])
    words = list(words)
    for i in range(len(words) - 1):
        opens = i == 0 or ends_sentence(words[i - 1].text)
        if opens and not ends_sentence(words[i].text) and words[i + 1].start - words[i].end >= _HOLE_S:
            length = words[i].end - words[i].start
            words[i] = replace(words[i], start=round(words[i + 1].start - length, 3), end=words[i + 1].start)
    bounds = [window.offset, *(time for word in words for time in (word.start, word.end)), window.end]
    holes = []
    for start, end in zip(bounds[::2], bounds[1::2], strict=True):
        if end - start >= _HOLE_S and speech.covered(start, end) >= _HOLE_SPEECH_S:
            first, last = round((start - window.offset) * SAMPLE_RATE), round((end - window.offset) * SAMPLE_RATE)
            holes.append(Window(start, window.samples[first:last]))
    return Holes(words, holes)
