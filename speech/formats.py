"""Every shape a response is written in, from the typed ``Response``: the toolkit JSON, OpenAI's ``json``,
``verbose_json`` and ``diarized_json``, SRT and WebVTT subtitles, RTTM and plain text.

Subtitles follow the usual broadcast limits: at most ``max_lines`` lines of ``max_line_length`` characters (a wide
character, Chinese or Japanese, counts as two), a cue never spans two speakers, a long pause or more than
``max_cue_duration_s``; cues prefer to end at sentence ends. Words of languages written without spaces are joined
without them. Each cue names its speaker (``SPEAKER_00: ...`` in SRT, a ``<v SPEAKER_00>`` voice span in WebVTT),
and its channel in a ``multichannel`` transcript where the label does not (``Alice (CH1)``); RTTM has a channel
column of its own.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from transformers.models.whisper.tokenization_whisper import LANGUAGES

from speech.attribution import broken, channel_breaks
from speech.text import ends_sentence, is_spaced
from speech.types import AttributedWord, Match, Response, Segment, SpeakerSegment, SpeakerTranscript, Voiceprint, Word

# A character, or a run of ASCII letters and digits, with the spaces before it and the punctuation after it.
_CHARACTER = re.compile(r"\s*(?:[0-9A-Za-z]+|\S)[^\w\s]*")


def _width(text: str) -> int:
    """Columns ``text`` takes on screen: two for a wide character (Chinese, Japanese), none for a combining mark."""
    return sum(
        0 if unicodedata.category(c) in ("Mn", "Me") else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


@dataclass(frozen=True)
class SubtitleOptions:
    """Limits of one subtitle cue."""

    max_line_length: int = 42
    max_lines: Literal[1, 2] = 2
    max_cue_duration_s: float = 7.0
    max_pause_s: float = 1.0


@dataclass(frozen=True)
class Cue:
    """One subtitle: its wrapped lines (speaker label not included), shown from ``start`` to ``end`` seconds;
    ``speaker``: the label written before them (``speaker_label``)."""

    speaker: str | None
    start: float
    end: float
    lines: tuple[str, ...]


@dataclass(frozen=True)
class _Word:
    text: str
    start: float
    end: float


def _turn_words(transcript: SpeakerTranscript) -> list[tuple[SpeakerSegment, list[_Word]]]:
    """Each speaker turn with its words, timed inside the turn.

    Words come from ``transcript.words`` when it has them (consecutive words of one speaker form one turn with
    text); otherwise the turn's text is split into words (at spaces; into characters, keeping their spaces, where
    the language is written without spaces) timed in proportion to their length. A turn without text has no words.
    """
    turns = [turn for turn in transcript.turns if turn.text]
    words = transcript.words or ()
    groups: dict[int | None, list[list[AttributedWord]]] = {}  # as ``attribution.attribute`` formed the turns
    breaks = {c: channel_breaks([w.word for w in words], c) for c in {w.word.channel for w in words}}
    for word in words:
        channel = groups.setdefault(word.word.channel, [])
        previous = channel[-1][-1].word if channel else None
        if (
            previous is not None
            and channel[-1][-1].speaker == word.speaker
            and not broken(breaks[word.word.channel], max(previous.start, previous.end), word.word.start)
        ):
            channel[-1].append(word)
        else:
            channel.append([word])
    counts = Counter(turn.channel for turn in turns)
    matched = {channel: iter(found) for channel, found in groups.items() if len(found) == counts[channel]}
    result = []
    for turn in turns:
        start, end = turn.start, turn.end
        if turn.channel in matched:
            words = [
                _Word(w.word.text, min(max(w.word.start, start), end), min(max(w.word.end, start), end))
                for w in next(matched[turn.channel])
            ]
        else:
            texts = turn.text.split() if transcript.spaced else _CHARACTER.findall(turn.text)
            total = sum(len(text) + 1 for text in texts) or 1
            words, position = [], 0
            for text in texts:
                begin = start + (end - start) * position / total
                position += len(text) + 1
                words.append(_Word(text, begin, start + (end - start) * position / total))
        if words:
            words[0] = _Word(words[0].text, start, max(start, words[0].end))
            words[-1] = _Word(words[-1].text, min(words[-1].start, end), end)
        result.append((turn, words))
    return result


def _line(words: list[str], separator: str) -> str:
    return separator.join(words).strip()


def _wrap(words: list[str], widths: list[int], separator: str) -> tuple[str, ...] | None:
    """``words`` (joined by ``separator``) on one line if it fits, else the most balanced split that fits; ``None``
    when nothing fits."""
    text = _line(words, separator)
    if _width(text) <= widths[0]:
        return (text,)
    if len(widths) == 1:
        return None
    splits = [(_line(words[:i], separator), _line(words[i:], separator)) for i in range(1, len(words))]
    fitting = [lines for lines in splits if _width(lines[0]) <= widths[0] and _width(lines[1]) <= widths[1]]
    return min(fitting, key=lambda lines: abs(_width(lines[0]) - _width(lines[1]))) if fitting else None


def _cue_words(words: list[_Word], widths: list[int], options: SubtitleOptions, separator: str) -> list[list[_Word]]:
    """Consecutive words of one turn grouped into cues within the line, pause and duration limits."""
    groups: list[list[_Word]] = [[]]
    for word in words:
        current = groups[-1]
        if current and (
            _wrap([w.text for w in [*current, word]], widths, separator) is None
            or word.start - current[-1].end > options.max_pause_s
            or word.end - current[0].start > options.max_cue_duration_s
        ):
            groups.append(current := [])
        current.append(word)
        if ends_sentence(word.text) and _width(separator.join(w.text for w in current)) >= widths[0]:
            groups.append([])
    return [group for group in groups if group]


def cues(transcript: SpeakerTranscript, options: SubtitleOptions = SubtitleOptions()) -> list[Cue]:
    """The speaker turns cut into subtitle cues, in time order."""
    separator = " " if transcript.spaced else ""
    result: list[Cue] = []
    for turn, words in _turn_words(transcript):
        label = speaker_label(turn)
        width = len(label) + 2 if label else 0
        widths = [max(1, options.max_line_length - width), options.max_line_length][: options.max_lines]
        for group in _cue_words(words, widths, options, separator):
            texts = [w.text for w in group]
            lines = _wrap(texts, widths, separator) or (_line(texts, separator),)  # a single word longer than a line
            result.append(Cue(label, group[0].start, max(group[-1].end, group[0].start + 0.001), lines))
    return sorted(result, key=lambda cue: cue.start)


def speaker_label(turn: SpeakerSegment) -> str | None:
    """The turn's speaker as subtitles and text name it: with its channel (``multichannel``) unless the label
    already says it (``CH1``, ``CH1_SPEAKER_00``); just the channel when no speaker was found."""
    if turn.channel is None:
        return turn.speaker
    channel = f"CH{turn.channel}"
    if turn.speaker is None:
        return channel
    return turn.speaker if re.fullmatch(rf"{channel}(_.*)?", turn.speaker) else f"{turn.speaker} ({channel})"


def _clock(seconds: float, separator: str) -> str:
    milliseconds = round(max(seconds, 0.0) * 1000)
    hours, rest = divmod(milliseconds, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{separator}{rest % 1000:03d}"


def write_srt(transcript: SpeakerTranscript, options: SubtitleOptions = SubtitleOptions()) -> str:
    blocks = []
    for number, cue in enumerate(cues(transcript, options), start=1):
        lines = list(cue.lines)
        if cue.speaker:
            lines[0] = f"{cue.speaker}: {lines[0]}"
        timing = f"{_clock(cue.start, ',')} --> {_clock(cue.end, ',')}"
        blocks.append("\n".join([str(number), timing, *lines]))
    return "\n\n".join(blocks) + "\n" if blocks else ""


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_vtt(transcript: SpeakerTranscript, options: SubtitleOptions = SubtitleOptions()) -> str:
    blocks = ["WEBVTT"]
    for cue in cues(transcript, options):
        lines = [_vtt_escape(line) for line in cue.lines]
        if cue.speaker:
            lines[0] = f"<v {_vtt_escape(cue.speaker)}>{lines[0]}"
        blocks.append("\n".join([f"{_clock(cue.start, '.')} --> {_clock(cue.end, '.')}", *lines]))
    return "\n\n".join(blocks) + "\n"


def write_rttm(transcript: SpeakerTranscript, uri: str = "audio") -> str:
    """Speaker turns in NIST RTTM (``SPEAKER uri channel onset duration <NA> <NA> speaker <NA> <NA>``; the channel
    counts from 1, as RTTM's do: ``multichannel``'s channel 0 is 1)."""
    uri = "_".join(uri.split()) or "audio"
    lines = []
    for turn in transcript.turns:
        if turn.speaker and turn.end > turn.start:
            duration, channel = turn.end - turn.start, (turn.channel or 0) + 1
            lines.append(f"SPEAKER {uri} {channel} {turn.start:.3f} {duration:.3f} <NA> <NA> {turn.speaker} <NA> <NA>")
    return "".join(line + "\n" for line in lines)


def write_text(transcript: SpeakerTranscript) -> str:
    """One line per speaker turn, ``SPEAKER_00: text`` (just the text when no speaker was found)."""
    labels = [(speaker_label(t), t.text) for t in transcript.turns if t.text]
    lines = [f"{label}: {text}" if label else text for label, text in labels]
    return "".join(line + "\n" for line in lines)


SUBTITLES: dict[str, Callable[[SpeakerTranscript, str], str]] = {
    "txt": lambda transcript, uri: write_text(transcript),
    "srt": lambda transcript, uri: write_srt(transcript),
    "vtt": lambda transcript, uri: write_vtt(transcript),
    "rttm": write_rttm,
}
"""Text format name (also the file extension) -> writer of ``(speaker transcript, recording name)``."""


def _timestamp(start: float, end: float) -> list[float]:
    return [round(start, 3), round(end, 3)]


def _on_channel(body: dict, channel: int | None) -> dict:
    """``body`` with its ``channel`` in a ``multichannel`` transcript (a mono one's shape is unchanged)."""
    return body if channel is None else {**body, "channel": channel}


def _chunk(segment: Segment) -> dict:
    """A Whisper segment as the toolkit JSON's ``chunks`` entry: text, timestamp and the four quality fields."""
    body = {
        "text": segment.text,
        "timestamp": _timestamp(segment.start, segment.end),
        "avg_logprob": segment.avg_logprob,
        "no_speech_prob": segment.no_speech_prob,
        "compression_ratio": segment.compression_ratio,
        "temperature": segment.temperature,
    }
    return _on_channel(body, segment.channel)


def _word(word: AttributedWord) -> dict:
    text = word.word
    body = {
        "word": text.text,
        "start": text.start,
        "end": text.end,
        "probability": text.probability,
        "speaker": word.speaker,
        "speaker_confidence": word.confidence,
    }
    return _on_channel(body, text.channel)


def _turn(turn: SpeakerSegment) -> dict:
    timestamp = _timestamp(turn.start, turn.end)
    body = {"speaker": turn.speaker, "text": turn.text, "timestamp": timestamp, "confidence": turn.confidence}
    return _on_channel(body, turn.channel)


def _match(match: Match) -> dict:
    score = None if match.score is None else round(match.score, 3)
    return {"name": match.name, "speaker": match.speaker, "score": score, "matched": match.matched}


def voiceprint_json(voiceprint: Voiceprint) -> dict:
    """A voiceprint as ``speaker_embeddings`` gives it and ``known_speaker_embeddings`` takes it back."""
    embedding = [round(float(x), 6) for x in voiceprint.embedding]
    return {"speaker": voiceprint.speaker, "model": voiceprint.model, "embedding": embedding}


def toolkit_json(response: Response) -> dict:
    """The handler's JSON response (the Inference Endpoints contract): text, Whisper's ``chunks``, speaker turns,
    overlaps, language, duration, how the windows were decoded, warnings and the parameters used; ``words`` with
    ``return_timestamps: word``, the text format asked for by ``response_format`` under its name, the known
    speakers' matches when any were given and the voiceprints when asked for."""
    transcript, decoding = response.transcript, response.transcript.decoding
    rate = decoding.accepted_tokens / decoding.drafted_tokens if decoding.drafted_tokens else None
    body = {
        "text": transcript.text,
        "chunks": [_chunk(segment) for segment in transcript.segments],
        "speakers": [_turn(turn) for turn in response.turns],
        "overlaps": [
            _on_channel({"speakers": list(o.speakers), "timestamp": _timestamp(o.start, o.end)}, o.channel)
            for o in response.overlaps
        ],
        "language": transcript.language,
        "language_probability": round(transcript.language_probability, 3),
        "duration": round(response.duration, 3),
        "decoding": {
            "assisted": decoding.assisted_windows > 0,
            "windows": decoding.windows,
            "assisted_windows": decoding.assisted_windows,
            "drafted_tokens": decoding.drafted_tokens,
            "accepted_tokens": decoding.accepted_tokens,
            "acceptance_rate": None if rate is None else round(rate, 3),
            "fallback_windows": decoding.fallback_windows,
            "fallback_decodings": decoding.fallback_decodings,
            "fallback_decodings_skipped": decoding.fallback_decodings_skipped,
            "truncated_windows": decoding.truncated_windows,
            "holes": decoding.holes,
            "seconds": round(decoding.seconds, 3),
        },
        "warnings": list(response.warnings),
        "parameters": response.parameters,
    }
    if response.known_speakers:
        body["known_speakers"] = [_match(match) for match in response.known_speakers]
    if response.voiceprints is not None:
        body["speaker_embeddings"] = [voiceprint_json(voiceprint) for voiceprint in response.voiceprints]
    text_format = response.parameters.get("response_format", "json")
    if text_format in SUBTITLES:
        body[text_format] = SUBTITLES[text_format](response.speaker_transcript, "audio")
    if response.parameters.get("return_timestamps") == "word":
        body["words"] = [_word(word) for word in response.words]
    return body


def _segment_speakers(response: Response) -> list[str | None]:
    """The speaker of each Whisper segment: the one most of its words went to."""
    speakers, position = [], 0
    for segment in response.transcript.segments:
        words = response.words[position : position + len(segment.words)]
        position += len(segment.words)
        counts = Counter(word.speaker for word in words)
        speakers.append(counts.most_common(1)[0][0] if counts else None)
    return speakers


def openai_json(response: Response, response_format: str, task: str, words: bool) -> dict:
    """OpenAI's transcription body for ``json``, ``verbose_json`` (Whisper's segments with their quality fields and
    speaker) or ``diarized_json`` (speaker turns); ``words`` adds the words."""
    transcript = response.transcript
    usage = {"type": "duration", "seconds": math.ceil(response.duration)}
    if response_format == "json":
        return {"text": transcript.text, "usage": usage}
    duration = round(response.duration, 3)
    if response_format == "diarized_json":
        segments = [
            _on_channel(
                {
                    "type": "transcript.text.segment",
                    "id": f"seg_{i}",
                    "start": round(turn.start, 3),
                    "end": round(turn.end, 3),
                    "text": turn.text,
                    "speaker": turn.speaker,
                },
                turn.channel,
            )
            for i, turn in enumerate(response.turns)
        ]
        body = {"task": task, "duration": duration, "text": transcript.text, "segments": segments, "usage": usage}
    else:
        segments = [
            {"id": i, **_chunk(segment), "speaker": speaker}
            for i, (segment, speaker) in enumerate(zip(transcript.segments, _segment_speakers(response), strict=True))
        ]
        for segment in segments:
            segment["start"], segment["end"] = segment.pop("timestamp")
        language = LANGUAGES.get(transcript.language, transcript.language)
        body = {"task": task, "language": language, "duration": duration, "text": transcript.text}
        body |= {"segments": segments, "usage": usage}
    if words:
        body["words"] = [_word(word) for word in response.words]
    return body


def read_speaker_transcript(response: dict) -> SpeakerTranscript:
    """The speaker turns and words of a toolkit JSON response (``toolkit_json``'s output, e.g. with speakers
    renamed), to write it again in another format."""
    turns = tuple(
        SpeakerSegment(turn["speaker"], turn["text"], *turn["timestamp"], turn.get("confidence"), turn.get("channel"))
        for turn in response["speakers"]
    )
    words = None
    if response.get("words") is not None:
        words = tuple(
            AttributedWord(
                Word(w["word"], w["start"], w["end"], w.get("probability", 1.0), w.get("channel")),
                w["speaker"],
                w.get("speaker_confidence"),
            )
            for w in response["words"]
        )
    task = (response.get("parameters") or {}).get("task", "transcribe")
    return SpeakerTranscript(turns, words, is_spaced(response.get("language"), task))


def write_json(response: dict) -> str:
    return json.dumps(response, indent=2, ensure_ascii=False) + "\n"


def _write(name: str) -> Callable[[dict, str], str]:
    return lambda response, uri: SUBTITLES[name](read_speaker_transcript(response), uri)


WRITERS: dict[str, Callable[[dict, str], str]] = {
    "json": lambda response, uri: write_json(response),
    **{name: _write(name) for name in SUBTITLES},
}
"""Output format name (also the file extension) -> writer of ``(toolkit JSON response, recording name)``: files
of responses the CLI, the endpoint client and ``/convert`` write."""
