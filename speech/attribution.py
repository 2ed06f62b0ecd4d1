"""Words to speakers: each transcript piece goes to the speaker whose turns it overlaps, pieces form speaker turns."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

from pyannote.core import Segment as Interval
from pyannote.core import Timeline

from speech.speakers.turns import TurnIndex
from speech.text import ends_sentence
from speech.types import Diarization, Overlap, SpeakerSegment, Transcript, Turn, Word

_SPEECH_MARGIN_S = 0.5  # word timings from the alignment lag or lead the diarization's speech turns by up to this


def within_speech(transcript: Transcript, turns: Sequence[Turn]) -> tuple[Transcript, int]:
    """``transcript`` without the segments that lie away from every speech turn of the diarization (what Whisper
    makes up from noise: no word within ``_SPEECH_MARGIN_S`` of a turn), and the number of segments left out."""
    index = TurnIndex(turns)
    kept = tuple(
        segment
        for segment in transcript.segments
        if any(index.overlapping(w.start - _SPEECH_MARGIN_S, w.end + _SPEECH_MARGIN_S) for w in segment.words)
    )
    return dataclasses.replace(transcript, segments=kept), len(transcript.segments) - len(kept)


def _speaker_for(start: float, end: float, turns: TurnIndex) -> str | None:
    """The speaker whose turns overlap [start, end] most; the nearest turn's speaker when none overlaps."""
    overlap: dict[str, float] = {}
    for turn in turns.overlapping(start, end):
        shared = min(end, turn.end) - max(start, turn.start)
        if shared > 0:
            overlap[turn.speaker] = overlap.get(turn.speaker, 0.0) + shared
    if overlap:
        return max(overlap, key=overlap.get)
    nearest = turns.nearest((start + end) / 2)
    return None if nearest is None else nearest.speaker


def attribute(
    pieces: Sequence[Word],
    turns: Sequence[Turn],
    overlaps: Sequence[Overlap] = (),
    separator: str = " ",
    breaks: Sequence[float] = (),
) -> tuple[list[str | None], list[SpeakerSegment]]:
    """The speaker of each piece, and the pieces joined into speaker turns.

    A piece goes to the speaker whose turns overlap it most, else to the one of the nearest turn; inside one of
    the ``overlaps`` it stays with the previous piece's speaker if that speaker is talking there. Word timings
    and turn boundaries are a little off, so a speaker change that lands a few words before the end of the
    previous speaker's sentence is moved to the end of that sentence, and otherwise one that lands a few words
    after a sentence end is moved back to it. Consecutive pieces of one speaker form a turn timed by its pieces,
    ending by the next turn's start or at one of the sorted ``breaks`` between two pieces. Every piece's text
    appears in exactly one turn, in order, joined by ``separator`` (none for languages written without spaces);
    nothing is dropped. A speaker of the diarization that no piece went to still has turns, without text
    (``_with_unheard``).
    """
    intervals = [(piece.start, max(piece.start, piece.end)) for piece in pieces]
    index = TurnIndex(turns)
    speakers = [_speaker_for(start, end, index) for start, end in intervals]
    speakers = _snap_changes_to_sentence_ends(pieces, _keep_speaker_in_overlaps(speakers, intervals, overlaps))
    segments = _align_to_turns(_group(pieces, speakers, intervals, separator, breaks), turns)
    return speakers, _with_unheard(segments, turns, overlaps)


def attribute_transcript(
    transcript: Transcript, diarization: Diarization, speech_only: bool
) -> tuple[Transcript, list[str | None], list[SpeakerSegment]]:
    """``attribute`` the words of ``transcript``, channel by channel (``multichannel``: a word only ever goes to a
    speaker of its channel, and a channel's turn ends where another channel speaks): the transcript (less its
    segments away from speech with ``speech_only``, ``within_speech``), each word's speaker and the speaker turns,
    in time order."""
    separator = " " if transcript.spaced else ""
    channels = sorted({s.channel for s in transcript.segments} | {t.channel for t in diarization.turns}, key=str)
    parts = {}
    for channel in channels:
        part = dataclasses.replace(transcript, segments=tuple(s for s in transcript.segments if s.channel == channel))
        parts[channel] = within_speech(part, _on(channel, diarization.turns))[0] if speech_only else part
    segments = [segment for part in parts.values() for segment in part.segments]
    if len(parts) > 1:
        segments.sort(key=lambda segment: (segment.start, segment.channel))
    kept = dataclasses.replace(transcript, segments=tuple(segments))
    speakers: dict[int, str | None] = {}  # by id: the same Word objects as in ``kept``
    turns: list[SpeakerSegment] = []
    for channel, part in parts.items():
        breaks = channel_breaks(kept.words, channel)
        word_speakers, segments = attribute(
            part.words, _on(channel, diarization.turns), _on(channel, diarization.overlaps), separator, breaks
        )
        speakers |= zip(map(id, part.words), word_speakers, strict=True)
        turns += [dataclasses.replace(segment, channel=channel) for segment in segments]
    if len(parts) > 1:
        turns.sort(key=lambda turn: (turn.start, turn.channel))
    return kept, [speakers[id(word)] for word in kept.words], turns


def _on(channel: int | None, spans: Sequence[Turn | Overlap]) -> list:
    return [span for span in spans if span.channel == channel]


def channel_breaks(words: Sequence[Word], channel: int | None) -> list[float]:
    """The middles of the words of the other channels (``multichannel``), in order: a turn of ``channel`` ends at
    one, even without a change of speaker."""
    return sorted((word.start + word.end) / 2 for word in words if word.channel != channel)


def broken(breaks: Sequence[float], end: float, start: float) -> bool:
    """Whether one of ``breaks`` (sorted) lies between a word's ``end`` and the next word's ``start``."""
    return bisect.bisect_left(breaks, end) < bisect.bisect_right(breaks, start)


_MIN_UNHEARD_S = 1.0


def _with_unheard(
    segments: list[SpeakerSegment], turns: Sequence[Turn], overlaps: Sequence[Overlap]
) -> list[SpeakerSegment]:
    """``segments`` and, for each speaker of the diarization that no word went to but who speaks
    ``_MIN_UNHEARD_S`` or more (their turns and the overlaps they are in), their speech as turns without text:
    Whisper wrote only the other voice where they talk over someone, or missed their words."""
    heard = {segment.speaker for segment in segments}
    spans: dict[str, list[tuple[float, float]]] = {}
    for turn in turns:
        spans.setdefault(turn.speaker, []).append((turn.start, turn.end))
    for overlap in overlaps:
        for speaker in overlap.speakers:
            spans.setdefault(speaker, []).append((overlap.start, overlap.end))
    unheard = []
    for speaker, regions in spans.items():
        speech = Timeline([Interval(start, end) for start, end in regions]).support()
        if speaker in heard or speech.duration() < _MIN_UNHEARD_S:
            continue
        unheard += [SpeakerSegment(speaker, "", segment.start, segment.end) for segment in speech]
    return sorted(segments + unheard, key=lambda segment: segment.start) if unheard else segments


def _keep_speaker_in_overlaps(
    speakers: list[str | None], intervals: Sequence[tuple[float, float]], overlaps: Sequence[Overlap]
) -> list[str | None]:
    """A piece whose middle lies where several people talk at once, the previous piece's speaker among them,
    stays with that speaker: Whisper follows the voice it was transcribing."""
    speakers = list(speakers)
    starts = [overlap.start for overlap in overlaps]
    for i in range(1, len(speakers)):
        middle = sum(intervals[i]) / 2
        k = bisect.bisect_right(starts, middle) - 1
        if k >= 0 and middle < overlaps[k].end and speakers[i - 1] in overlaps[k].speakers:
            speakers[i] = speakers[i - 1]
    return speakers


_MAX_BOUNDARY_SHIFT_S = 0.5


def _align_to_turns(segments: list[SpeakerSegment], turns: Sequence[Turn]) -> list[SpeakerSegment]:
    """Move each turn's start and end to the closest boundary of its speaker's diarization turns, when one is
    within ``_MAX_BOUNDARY_SHIFT_S`` (the diarization places boundaries more precisely than word alignment), and
    cut what still runs past the diarization turns of that speaker it overlaps (the alignment stretches a last
    word over the pause that follows it)."""

    def closest(time: float, boundaries: list[float]) -> float:
        """The nearest of the sorted ``boundaries`` (the earlier on a tie) if within reach, else ``time``."""
        i = bisect.bisect_left(boundaries, time)
        nearest = min(boundaries[max(0, i - 1) : i + 1], key=lambda boundary: abs(boundary - time), default=time)
        return nearest if abs(nearest - time) <= _MAX_BOUNDARY_SHIFT_S else time

    own_turns = {
        speaker: TurnIndex([t for t in turns if t.speaker == speaker]) for speaker in {t.speaker for t in turns}
    }
    aligned: list[SpeakerSegment] = []
    for segment in segments:
        own = own_turns.get(segment.speaker)
        if own is None:
            start, end = segment.start, segment.end
        else:
            start = closest(segment.start, own.starts)
            end = max(start, closest(segment.end, own.ends))
            held = own.overlapping(start, end)
            if held:
                start, end = max(start, min(turn.start for turn in held)), min(end, max(turn.end for turn in held))
        if aligned and aligned[-1].end > start:
            last = aligned[-1]
            start = max(start, last.start)
            aligned[-1] = SpeakerSegment(last.speaker, last.text, last.start, start)
        aligned.append(SpeakerSegment(segment.speaker, segment.text, start, max(start, end)))
    return aligned


_MAX_WORDS_TO_SENTENCE_END = 3


def _snap_changes_to_sentence_ends(pieces: Sequence[Word], speakers: list[str | None]) -> list[str | None]:
    speakers = list(speakers)
    for i in range(1, len(pieces)):
        if speakers[i] == speakers[i - 1] or ends_sentence(pieces[i - 1].text):
            continue
        later = next(
            (j for j in range(i, min(i + _MAX_WORDS_TO_SENTENCE_END, len(pieces))) if ends_sentence(pieces[j].text)),
            None,
        )
        if later is not None and all(speaker == speakers[i] for speaker in speakers[i : later + 1]):
            speakers[i : later + 1] = [speakers[i - 1]] * (later + 1 - i)
            continue
        earlier = next(
            (j for j in range(i - 2, max(-1, i - 2 - _MAX_WORDS_TO_SENTENCE_END), -1) if ends_sentence(pieces[j].text)),
            None,
        )
        if earlier is not None and all(speaker == speakers[i - 1] for speaker in speakers[earlier + 1 : i]):
            speakers[earlier + 1 : i] = [speakers[i]] * (i - 1 - earlier)
    return speakers


def _group(
    pieces: Sequence[Word],
    speakers: Sequence[str | None],
    intervals: Sequence[tuple[float, float]],
    separator: str,
    breaks: Sequence[float],
) -> list[SpeakerSegment]:
    segments: list[SpeakerSegment] = []
    previous_end = 0.0
    for piece, speaker, (start, end) in zip(pieces, speakers, intervals, strict=True):
        if segments and segments[-1].speaker == speaker and not broken(breaks, previous_end, start):
            last = segments[-1]
            segments[-1] = SpeakerSegment(
                speaker, f"{last.text}{separator}{piece.text.strip()}".strip(), last.start, end
            )
        else:
            if segments and segments[-1].end > start:
                last = segments[-1]
                segments[-1] = SpeakerSegment(last.speaker, last.text, last.start, max(last.start, start))
            segments.append(SpeakerSegment(speaker, piece.text.strip(), start, end))
        previous_end = end
    return segments
