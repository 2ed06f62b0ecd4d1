"""Two-channel calls of Kokoro voices, and how a ``multichannel`` response did on one.

A call has one side per channel: the caller alone on channel 0, the agents (one or more voices) on channel 1, taking
turns 0.6 s apart. Each side bleeds into the other at ``bleed_db``; with ``echo_s`` the far side also comes back
on each channel as a line echo, that much later and ``echo_db`` quieter. ``score`` finds the turn each transcribed
word was said in (the nearest turn, within a second, whose text has the word) and counts the words on that turn's
channel and, on channel 1, the words of each agent under that agent's most frequent label.
"""

from __future__ import annotations

import io
import re
import wave
from collections import Counter
from dataclasses import dataclass

import numpy as np
from conversations import synthesize

from speech.audio import SAMPLE_RATE
from speech.types import Response

GAP_S = 0.6


@dataclass(frozen=True)
class CallTurn:
    voice: str
    channel: int
    start: float
    end: float
    words: frozenset[str]


@dataclass(frozen=True)
class Call:
    """The two channels (2, samples), float32 at ``SAMPLE_RATE``, and the turns said."""

    channels: np.ndarray
    turns: tuple[CallTurn, ...]

    def wav(self, mono: bool = False) -> bytes:
        """The call as a 16-bit WAV file: stereo, or mixed down to mono."""
        samples = self.channels.mean(axis=0, keepdims=True) if mono else self.channels
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as file:
            file.setnchannels(len(samples))
            file.setsampwidth(2)
            file.setframerate(SAMPLE_RATE)
            file.writeframes((np.clip(samples.T, -1, 1) * 32767).astype("<i2").tobytes())
        return buffer.getvalue()


def two_channel_call(
    caller: str,
    agents: tuple[str, ...],
    sentences: list[str],
    bleed_db: float = -20.0,
    echo_s: float | None = None,
    echo_db: float = -15.0,
) -> Call:
    """``sentences`` said in turn by the caller and the agents (caller, agent 1, caller, agent 2, ...)."""
    voices = [caller if i % 2 == 0 else agents[(i // 2) % len(agents)] for i in range(len(sentences))]
    pieces = [synthesize(text, voice, 1.0) for voice, text in zip(voices, sentences, strict=True)]
    gap = int(GAP_S * SAMPLE_RATE)
    sides = np.zeros((2, sum(len(p) + gap for p in pieces)), dtype=np.float32)
    turns, at = [], 0
    for voice, text, piece in zip(voices, sentences, pieces, strict=True):
        channel = 0 if voice == caller else 1
        sides[channel, at : at + len(piece)] = 0.5 * piece / np.abs(piece).max()
        turns.append(
            CallTurn(voice, channel, at / SAMPLE_RATE, (at + len(piece)) / SAMPLE_RATE, frozenset(words(text)))
        )
        at += len(piece) + gap
    heard = sides + 10 ** (bleed_db / 20) * sides[::-1]
    if echo_s is not None:
        delay = int(echo_s * SAMPLE_RATE)
        heard[:, delay:] += 10 ** (echo_db / 20) * sides[::-1, :-delay]
    return Call(heard, tuple(turns))


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


@dataclass(frozen=True)
class CallScore:
    words: int
    heard: int
    """Words found in a turn of the call (the others are words Whisper heard differently)."""
    right_channel: int
    agent_words: int
    agents_apart: int
    """Agent words on channel 1 under their agent's label, when each agent has a label of its own (else 0)."""
    shared_labels: frozenset[str]
    """Labels found on both channels."""


def score(response: Response, call: Call) -> CallScore:
    sources = [(_source(word.word.text, (word.word.start + word.word.end) / 2, call), word) for word in response.words]
    heard = [(turn, word) for turn, word in sources if turn is not None]
    right = sum(word.word.channel == turn.channel for turn, word in heard)
    agents = {}
    for turn, word in heard:
        if turn.channel == 1 and word.word.channel == 1:
            agents.setdefault(turn.voice, Counter())[word.speaker] += 1
    majority = {voice: counts.most_common(1)[0][0] for voice, counts in agents.items()}
    apart = sum(counts[majority[voice]] for voice, counts in agents.items())
    if len(set(majority.values())) < len(majority):
        apart = 0
    labels = [{w.speaker for w in response.words if w.word.channel == channel} for channel in (0, 1)]
    return CallScore(
        len(response.words),
        len(heard),
        right,
        sum(sum(counts.values()) for counts in agents.values()),
        apart,
        frozenset(labels[0] & labels[1]),
    )


def _source(text: str, middle: float, call: Call) -> CallTurn | None:
    said = [turn for turn in call.turns if words(text) and set(words(text)) <= turn.words]
    distance = {turn: max(turn.start - middle, middle - turn.end, 0.0) for turn in said}
    nearest = min(said, key=distance.get, default=None)
    return nearest if nearest is not None and distance[nearest] <= 1.0 else None
