"""streaming.LiveTranscript on made-up states of a transcript: what goes out when, and revisions."""

from __future__ import annotations

from service.streaming import LiveTranscript, TextDelta, TurnUpdate
from speech.types import SpeakerSegment


def turns_of(words: list[tuple[str, str]]) -> tuple[str, list[str], list[SpeakerSegment]]:
    """Text, word speakers and turns of ``(word, speaker)`` pairs, one second a word."""
    turns: list[SpeakerSegment] = []
    for i, (word, speaker) in enumerate(words):
        if turns and turns[-1].speaker == speaker:
            last = turns[-1]
            turns[-1] = SpeakerSegment(speaker, f"{last.text} {word}", last.start, i + 1.0)
        else:
            turns.append(SpeakerSegment(speaker, word, float(i), i + 1.0))
    return " ".join(word for word, _ in words), [speaker for _, speaker in words], turns


def test_turns_go_out_once_settled_and_revisions_say_so():
    events: list = []
    live = LiveTranscript(events.append)
    first = [("Hi.", "A"), ("Hello", "B"), ("there.", "B"), ("How", "B"), ("are", "B"), ("you?", "B"), ("Fine", "A")]
    live.update(*turns_of(first), final=False)
    assert events == [
        TextDelta("Hi. Hello there. How are you? Fine"),
        TurnUpdate(0, SpeakerSegment("A", "Hi.", 0.0, 1.0), revision=False),
    ]  # B's turn could still grow or lose its last words: it waits
    events.clear()
    later = [("Hi.", "A"), ("Hello", "A"), ("there.", "B"), ("How", "B"), ("are", "B"), ("you?", "B"), ("Fine", "A")]
    live.update(*turns_of([*later, ("thanks.", "A")]), final=True)
    assert events == [
        TextDelta(" thanks."),
        TurnUpdate(0, SpeakerSegment("A", "Hi. Hello", 0.0, 2.0), revision=True),
        TurnUpdate(1, SpeakerSegment("B", "there. How are you?", 2.0, 6.0), revision=False),
        TurnUpdate(2, SpeakerSegment("A", "Fine thanks.", 6.0, 8.0), revision=False),
    ]


def test_a_turn_that_no_longer_exists_is_revised_to_empty_text():
    events: list = []
    live = LiveTranscript(events.append)
    words = [("One.", "A"), ("Two.", "B"), ("Three", "A"), ("four", "A"), ("five", "A"), ("six.", "A")]
    live.update(*turns_of(words), final=False)
    assert [event.index for event in events if isinstance(event, TurnUpdate)] == [0, 1]
    events.clear()
    live.update(*turns_of([(word, "A") for word, _ in words]), final=True)
    assert events == [
        TurnUpdate(0, SpeakerSegment("A", "One. Two. Three four five six.", 0.0, 6.0), revision=True),
        TurnUpdate(1, SpeakerSegment("B", "", 1.0, 1.0), revision=True),
    ]
