"""Writers of a transcript (the handler's response): SRT and WebVTT subtitles, RTTM, plain text and JSON.

Subtitles follow the usual broadcast limits: at most ``max_lines`` lines of ``max_line_length`` characters (a wide
character, Chinese or Japanese, counts as two), a cue never spans two speakers, a long pause or more than
``max_cue_duration_s``; cues prefer to end at sentence ends. Words of languages written without spaces are joined
without them.
Each cue names its speaker (``SPEAKER_00: ...`` in SRT, a ``<v SPEAKER_00>`` voice span in WebVTT).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

_SENTENCE_ENDS = (".", "?", "!", "\u3002", "\uff1f", "\uff01")


def ends_sentence(text: str) -> bool:
    """Whether ``text`` (a word) ends a sentence: a full stop, question or exclamation mark (Latin or CJK), before
    any closing quote or bracket."""
    return text.rstrip().rstrip("\"')]\u300d").endswith(_SENTENCE_ENDS)


# A character, or a run of ASCII letters and digits, with the spaces before it and the punctuation after it.
_CHARACTER = re.compile(r"\s*(?:[0-9A-Za-z]+|\S)[^\w\s]*")

UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
"""Languages written without spaces between words: Whisper splits them into words by character."""


def is_spaced(language: str | None, task: str = "transcribe") -> bool:
    """Whether the words of a transcript are separated by spaces: always in a translation (English), otherwise
    unless ``language`` is written without them."""
    return task == "translate" or language not in UNSPACED_LANGUAGES


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
    """One subtitle: its wrapped lines (speaker label not included), shown from ``start`` to ``end`` seconds."""

    speaker: str | None
    start: float
    end: float
    lines: tuple[str, ...]


@dataclass(frozen=True)
class _Word:
    text: str
    start: float
    end: float


def _turn_words(response: dict, separator: str) -> list[tuple[dict, list[_Word]]]:
    """Each speaker turn with its words, timed inside the turn.

    Words come from ``words`` when the response has them (consecutive words of one speaker form one turn with
    text); otherwise the turn's text is split into words (at spaces; into characters, keeping their spaces, where
    ``separator`` is empty) timed in proportion to their length. A turn without text has no words.
    """
    turns = [turn for turn in response["speakers"] if turn["text"]]
    groups: list[list[dict]] = []
    for word in response.get("words") or []:
        if groups and groups[-1][0]["speaker"] == word["speaker"]:
            groups[-1].append(word)
        else:
            groups.append([word])
    result = []
    for i, turn in enumerate(turns):
        start, end = turn["timestamp"]
        if len(groups) == len(turns):
            words = [
                _Word(w["word"], min(max(w["start"], start), end), min(max(w["end"], start), end)) for w in groups[i]
            ]
        else:
            texts = turn["text"].split() if separator else _CHARACTER.findall(turn["text"])
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


def cues(response: dict, options: SubtitleOptions = SubtitleOptions()) -> list[Cue]:
    """The response's speaker turns cut into subtitle cues, in time order."""
    spaced = is_spaced(response.get("language"), response.get("parameters", {}).get("task", "transcribe"))
    separator = " " if spaced else ""
    result: list[Cue] = []
    for turn, words in _turn_words(response, separator):
        speaker = turn["speaker"]
        label = len(speaker) + 2 if speaker else 0
        widths = [max(1, options.max_line_length - label), options.max_line_length][: options.max_lines]
        for group in _cue_words(words, widths, options, separator):
            texts = [w.text for w in group]
            lines = _wrap(texts, widths, separator) or (_line(texts, separator),)  # a single word longer than a line
            result.append(Cue(speaker, group[0].start, max(group[-1].end, group[0].start + 0.001), lines))
    return sorted(result, key=lambda cue: cue.start)


def _clock(seconds: float, separator: str) -> str:
    milliseconds = round(max(seconds, 0.0) * 1000)
    hours, rest = divmod(milliseconds, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{separator}{rest % 1000:03d}"


def write_srt(response: dict, options: SubtitleOptions = SubtitleOptions()) -> str:
    blocks = []
    for number, cue in enumerate(cues(response, options), start=1):
        lines = list(cue.lines)
        if cue.speaker:
            lines[0] = f"{cue.speaker}: {lines[0]}"
        timing = f"{_clock(cue.start, ',')} --> {_clock(cue.end, ',')}"
        blocks.append("\n".join([str(number), timing, *lines]))
    return "\n\n".join(blocks) + "\n" if blocks else ""


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write_vtt(response: dict, options: SubtitleOptions = SubtitleOptions()) -> str:
    blocks = ["WEBVTT"]
    for cue in cues(response, options):
        lines = [_vtt_escape(line) for line in cue.lines]
        if cue.speaker:
            lines[0] = f"<v {_vtt_escape(cue.speaker)}>{lines[0]}"
        blocks.append("\n".join([f"{_clock(cue.start, '.')} --> {_clock(cue.end, '.')}", *lines]))
    return "\n\n".join(blocks) + "\n"


def write_rttm(response: dict, uri: str = "audio") -> str:
    """Speaker turns in NIST RTTM (``SPEAKER uri 1 onset duration <NA> <NA> speaker <NA> <NA>``)."""
    uri = "_".join(uri.split()) or "audio"
    lines = []
    for turn in response["speakers"]:
        start, end = turn["timestamp"]
        if turn["speaker"] and end > start:
            lines.append(f"SPEAKER {uri} 1 {start:.3f} {end - start:.3f} <NA> <NA> {turn['speaker']} <NA> <NA>")
    return "".join(line + "\n" for line in lines)


def write_text(response: dict) -> str:
    """One line per speaker turn, ``SPEAKER_00: text`` (just the text when no speaker was found)."""
    lines = [f"{t['speaker']}: {t['text']}" if t["speaker"] else t["text"] for t in response["speakers"] if t["text"]]
    return "".join(line + "\n" for line in lines)


def write_json(response: dict) -> str:
    return json.dumps(response, indent=2, ensure_ascii=False) + "\n"


WRITERS: dict[str, Callable[[dict, str], str]] = {
    "json": lambda response, name: write_json(response),
    "txt": lambda response, name: write_text(response),
    "srt": lambda response, name: write_srt(response),
    "vtt": lambda response, name: write_vtt(response),
    "rttm": write_rttm,
}
"""Output format name (also the file extension) -> writer of ``(response, recording name)``."""
