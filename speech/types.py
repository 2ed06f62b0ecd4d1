"""The typed values handed from step to step of a request, from the recognised words to the whole response."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from speech.speakers.confidence import SpeakerEvidence

Progress = Callable[[str, int, int], None]
"""Progress hook: ``(stage, completed, total)``, called as work is done."""


@dataclass(frozen=True)
class Word:
    """A word as Whisper heard it, in seconds of the recording; ``probability``: the mean of its tokens'
    probabilities (faster-whisper's and openai-whisper's ``probability``)."""

    text: str
    start: float
    end: float
    probability: float
    channel: int | None = None
    """The recording's channel it was heard on (``multichannel``); ``None`` for a mono transcript."""


@dataclass(frozen=True)
class Segment:
    """A Whisper segment, timed by its words (by the model's timestamps only where it has none), with the quality
    figures of OpenAI's ``verbose_json`` and faster-whisper's ``Segment``, which are its window's (as Whisper's): the
    average log-probability of the decoding, the no-speech probability, the gzip compression ratio of the text, and
    the temperature of the decoding kept (above 0 after the temperature fallback)."""

    text: str
    start: float
    end: float
    words: tuple[Word, ...]
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    temperature: float
    channel: int | None = None
    """The recording's channel (``multichannel``); ``None`` for a mono transcript."""


@dataclass(frozen=True)
class Turn:
    """A speech turn of one speaker, in seconds, on a ``channel`` of the recording (``multichannel``; else
    ``None``)."""

    speaker: str
    start: float
    end: float
    channel: int | None = None


@dataclass(frozen=True)
class Overlap:
    """A stretch where several speakers talk at once, in seconds: on one ``channel`` (``None`` in a mono
    recording, and between speakers of different channels of a ``multichannel`` one)."""

    speakers: tuple[str, ...]
    start: float
    end: float
    channel: int | None = None


@dataclass(frozen=True)
class Diarization:
    """Exclusive turns (one speaker at a time, for attributing words) and the overlapped regions, in time order;
    ``speaker_embeddings``: each speaker's centroid from the clustering (as the pipeline gives it, not normalised;
    all zeros for a speaker the clustering had no centroid for), when the pipeline gives them."""

    turns: list[Turn]
    overlaps: list[Overlap]
    speaker_embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    evidence: SpeakerEvidence | None = None
    """What the windows of the pipeline say about who speaks when, to tell how sure each assignment is."""
    notes: tuple[str, ...] = ()
    """What the pipeline could not do for this recording (the response's warnings say it)."""

    def confidence(self, speaker: str | None, start: float, end: float) -> float | None:
        """How sure the assignment of ``speaker`` to [start, end] is, from 0 to 1; ``None`` without evidence."""
        return None if self.evidence is None else self.evidence.confidence(speaker, start, end)


NO_DIARIZATION = Diarization([], [])


@dataclass(frozen=True)
class SpeakerSegment:
    """Consecutive words attributed to one speaker (``None`` when no speaker was found): a turn of the response.
    ``confidence``: how sure the attribution is (``Diarization.confidence``), when known."""

    speaker: str | None
    text: str
    start: float
    end: float
    confidence: float | None = None
    channel: int | None = None
    """The recording's channel (``multichannel``); ``None`` for a mono transcript."""


@dataclass(frozen=True)
class AttributedWord:
    """A word with the speaker it went to and how sure that is."""

    word: Word
    speaker: str | None
    confidence: float | None


@dataclass(frozen=True)
class SpeakerTranscript:
    """What subtitles, RTTM and plain text are written from: the speaker turns, their words when known, and
    whether the words are separated by spaces."""

    turns: tuple[SpeakerSegment, ...]
    words: tuple[AttributedWord, ...] | None
    spaced: bool


@dataclass(frozen=True)
class Decoding:
    """How the windows were decoded: how many with the assistant, its drafted and accepted tokens, how many were
    decoded again because their text repeated itself or was cut short (temperature fallback), the sampled
    decodings that took and those their token budget left out, how many windows kept a decoding cut short
    (``speech.asr.decoding.TokenBudget``), how many holes in the text were decoded again, the time."""

    windows: int
    assisted_windows: int
    drafted_tokens: int
    accepted_tokens: int
    fallback_windows: int
    fallback_decodings: int
    fallback_decodings_skipped: int
    truncated_windows: int
    holes: int
    seconds: float


@dataclass(frozen=True)
class Transcript:
    """What Whisper heard, in time order: its segments with their words, and the language.

    ``language_probability``: the detected language's probability among the model's languages; 1.0 when the
    language was given or the model is English-only. ``warnings``: what the client should know about how the audio
    was decoded (e.g. a window cut short). ``spaced``: whether the text separates words with spaces (not in
    languages written without them, ``speech.text.is_spaced``).
    """

    segments: tuple[Segment, ...]
    language: str
    language_probability: float
    decoding: Decoding
    warnings: tuple[str, ...] = ()
    spaced: bool = True

    @property
    def words(self) -> list[Word]:
        return [word for segment in self.segments for word in segment.words]

    @property
    def text(self) -> str:
        return (" " if self.spaced else "").join(segment.text for segment in self.segments)


@dataclass(frozen=True)
class Voiceprint:
    """One voice: its label, its embedding (L2-normalised float32) and the embedding model it came from."""

    speaker: str
    embedding: np.ndarray
    model: str


@dataclass(frozen=True)
class Match:
    """How one known speaker fared: its best-scoring diarized ``speaker`` (that speaker's label in the response;
    ``None`` when nobody was found), the cosine ``score``, and whether the name was given (``matched``)."""

    name: str
    speaker: str | None
    score: float | None
    matched: bool


@dataclass(frozen=True)
class Response:
    """Everything one request produced, before it is written in a response shape (``speech.formats``).

    ``words``: every word of the transcript with its speaker; ``turns``: the words grouped into speaker turns (and
    the speech of speakers no word went to); ``parameters``: the request's options as the response echoes them;
    ``known_speakers``: how each known speaker matched; ``voiceprints``: each speaker's, when asked for.
    """

    transcript: Transcript
    words: tuple[AttributedWord, ...]
    turns: tuple[SpeakerSegment, ...]
    overlaps: tuple[Overlap, ...]
    duration: float
    warnings: tuple[str, ...]
    parameters: dict
    known_speakers: tuple[Match, ...] = ()
    voiceprints: tuple[Voiceprint, ...] | None = None

    @property
    def speaker_transcript(self) -> SpeakerTranscript:
        return SpeakerTranscript(self.turns, self.words, self.transcript.spaced)
