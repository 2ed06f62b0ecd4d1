"""A transcript sent while it is decoded: its new text after each batch of windows, and each speaker turn once later
words can no longer change it, revised in the open when they still do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from speech.types import SpeakerSegment

_SETTLING_WORDS = 4
"""A turn is sent once the next turn's first word has this many words after it: the attribution moves a speaker
change by at most three words (``speech.attribution._snap_changes_to_sentence_ends``)."""


@dataclass(frozen=True)
class TextDelta:
    """Text appended to the transcript (OpenAI's ``transcript.text.delta``); the deltas add up to its text."""

    text: str


@dataclass(frozen=True)
class TurnUpdate:
    """Speaker turn number ``index`` of the transcript (OpenAI's ``transcript.text.segment``), times rounded to
    milliseconds. ``revision``: it replaces what an earlier update of this index said; a revision with empty text
    means the turn no longer exists (its words went to its neighbours)."""

    index: int
    turn: SpeakerSegment
    revision: bool


StreamEvent = TextDelta | TurnUpdate
Emit = Callable[[StreamEvent], None]


class LiveTranscript:
    """Turns successive states of one transcript into events for ``emit``; the last state's turns are final."""

    def __init__(self, emit: Emit):
        self._emit = emit
        self._text = ""
        self._sent: list[SpeakerSegment] = []

    def update(self, text: str, word_speakers: Sequence[str | None], turns: Sequence[SpeakerSegment], final: bool):
        """The transcript now reads ``text``; its words went to ``word_speakers``, forming ``turns`` (those without
        text, of speakers no word went to, are not streamed)."""
        if len(text) > len(self._text) and text.startswith(self._text):
            self._emit(TextDelta(text[len(self._text) :]))
            self._text = text
        rounded = [replace(t, start=round(t.start, 3), end=round(t.end, 3), confidence=None) for t in turns if t.text]
        for index, turn in enumerate(rounded[: len(rounded) if final else _settled(word_speakers)]):
            if index == len(self._sent):
                self._sent.append(turn)
                self._emit(TurnUpdate(index, turn, revision=False))
            elif self._sent[index] != turn:
                self._sent[index] = turn
                self._emit(TurnUpdate(index, turn, revision=True))
        if final:
            for index in range(len(rounded), len(self._sent)):
                gone = self._sent[index]
                self._emit(TurnUpdate(index, SpeakerSegment(gone.speaker, "", gone.start, gone.start), revision=True))
            del self._sent[len(rounded) :]


def _settled(word_speakers: Sequence[str | None]) -> int:
    """How many of the first turns (runs of one speaker) later words can no longer change."""
    starts = [i for i in range(1, len(word_speakers)) if word_speakers[i] != word_speakers[i - 1]]
    return sum(1 for start in starts if len(word_speakers) - start >= _SETTLING_WORDS)
