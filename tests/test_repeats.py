"""Text Whisper says again in a pause is left out; what people repeat is kept."""

from __future__ import annotations

from dataclasses import fields

from asr import Decoding, Segment, Transcript
from diarization_utils import Chunk


def transcript(*segments: tuple[str, float]) -> Transcript:
    decoding = Decoding(**{field.name: 0 for field in fields(Decoding)})
    chunks = [Segment(Chunk(text, start, start + 1.0), [Chunk(text, start, start + 1.0)]) for text, start in segments]
    return Transcript(chunks, "en", 1.0, decoding)


def test_a_sentence_said_again_word_for_word_is_left_out():
    heard = transcript(
        ("I'm Sheila in Texas, originally from Chicago.", 6.0),
        ("Oh, I'm originally from Chicago also.", 9.0),
        ("I don't hear that.", 23.0),
        ("I'm Sheila in Texas originally from Chicago!", 25.0),
        ("Oh, I'm originally from Chicago also.", 27.0),
    )
    kept, left_out = heard.without_repeats()
    assert left_out == 2
    assert [segment.chunk.start for segment in kept.segments] == [6.0, 9.0, 23.0]


def test_short_replies_and_repeats_far_apart_are_kept():
    heard = transcript(
        ("Hello.", 0.0),
        ("Hello.", 1.0),
        ("Yes, I think so.", 2.0),
        ("Yes, I think so.", 3.0),
        ("We should ship it this week.", 10.0),
        ("We should ship it this week.", 50.0),
    )
    kept, left_out = heard.without_repeats()
    assert left_out == 0 and len(kept.segments) == 6
