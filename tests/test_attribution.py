"""Attribution of transcript pieces to speaker turns."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from speech.attribution import attribute as attribute_pieces
from speech.speakers.turns import TurnIndex
from speech.types import Overlap, SpeakerSegment, Turn, Word


def attribute(pieces, turns):
    return attribute_pieces(pieces, turns)


def words(*items):
    return [Word(text, start, end, 1.0) for text, start, end in items]


def test_each_piece_goes_to_the_speaker_overlapping_it_most():
    turns = [Turn("A", 0.0, 2.0), Turn("B", 2.0, 5.0)]
    speakers, _ = attribute(words(("hi", 0.5, 1.0), ("there", 1.5, 2.8), ("friend", 3.0, 4.0)), turns)
    assert speakers == ["A", "B", "B"]


def test_a_speaker_change_mid_sentence_splits_the_turn():
    turns = [Turn("A", 0.0, 1.9), Turn("B", 2.1, 4.0)]
    pieces = words(("yes", 0.2, 0.6), ("indeed.", 0.7, 1.8), ("No", 2.2, 2.5), ("way.", 2.6, 3.0))
    _, segments = attribute(pieces, turns)
    assert [(s.speaker, s.text) for s in segments] == [("A", "yes indeed."), ("B", "No way.")]


def test_a_piece_outside_every_turn_goes_to_the_nearest():
    turns = [Turn("A", 0.0, 1.0), Turn("B", 5.0, 6.0)]
    speakers, _ = attribute(words(("late", 1.2, 1.5), ("early", 4.0, 4.8)), turns)
    assert speakers == ["A", "B"]


def test_no_speaker_found_keeps_all_text():
    pieces = words(("nobody", 0.0, 1.0), ("diarized", 1.0, 2.0))
    speakers, segments = attribute(pieces, [])
    assert speakers == [None, None]
    assert [(s.speaker, s.text) for s in segments] == [(None, "nobody diarized")]


def test_single_speaker_makes_one_turn():
    pieces = words(("one", 0.0, 0.5), ("voice", 0.6, 1.0), ("only", 3.0, 3.4))
    _, segments = attribute(pieces, [Turn("A", 0.0, 1.2), Turn("A", 2.9, 3.5)])
    assert [(s.speaker, s.text) for s in segments] == [("A", "one voice only")]


def test_no_pieces_no_turns_with_text():
    assert attribute([], [Turn("A", 0.0, 0.9)]) == ([], [])  # under a second of speech
    assert attribute([], [Turn("A", 0.0, 1.5)]) == ([], [SpeakerSegment("A", "", 0.0, 1.5)])


def test_a_speaker_heard_only_under_another_keeps_turns_without_text():
    # B talks over A for 2.4 s and Whisper wrote A's words only: B is still one of the speakers, without text
    pieces = words(("five", 0.2, 0.8), ("years", 0.8, 1.5), ("it", 4.1, 4.7), ("rains.", 4.7, 5.8))
    turns = [Turn("A", 0.0, 8.6)]
    overlaps = [Overlap(("A", "B"), 4.4, 6.5), Overlap(("A", "C"), 7.0, 7.3)]  # C: 0.3 s, not a speaker
    speakers, segments = attribute_pieces(pieces, turns, overlaps)
    assert speakers == ["A"] * 4
    assert [(s.speaker, s.text, s.start, s.end) for s in segments] == [
        ("A", "five years it rains.", 0.0, 5.8),
        ("B", "", 4.4, 6.5),
    ]


def test_a_wordless_speaker_under_a_second_of_speech_is_left_out_even_inside_an_overlap():
    # C's 0.6 s turn lies inside the overlap C is in: 0.6 s of speech, not 1.2 s
    pieces = words(("five", 0.2, 0.8), ("years", 0.8, 1.5))
    turns = [Turn("A", 0.0, 3.0), Turn("C", 3.0, 3.6)]
    overlaps = [Overlap(("A", "C"), 3.0, 3.6)]
    _, segments = attribute_pieces(pieces, turns, overlaps)
    assert [segment.speaker for segment in segments] == ["A"]


def test_a_change_just_before_a_sentence_end_moves_to_it():
    # alignment lag puts the last word of A's sentence into B's turn
    turns = [Turn("A", 0.0, 2.0), Turn("B", 2.0, 5.0)]
    pieces = words(("are", 0.5, 1.0), ("you", 1.2, 1.9), ("there?", 2.1, 2.5), ("Yes,", 2.8, 3.1), ("I", 3.2, 3.3))
    speakers, segments = attribute(pieces, turns)
    assert speakers == ["A", "A", "A", "B", "B"]
    assert [s.text for s in segments] == ["are you there?", "Yes, I"]


def test_a_change_far_from_any_sentence_end_stays():
    turns = [Turn("A", 0.0, 2.0), Turn("B", 2.0, 9.0)]
    pieces = words(("well", 0.5, 1.0), ("so", 2.1, 2.3), ("we", 2.4, 2.5), ("went", 2.6, 2.8), ("home.", 2.9, 3.2))
    speakers, _ = attribute(pieces, turns)
    assert speakers == ["A", "B", "B", "B", "B"]


def test_a_change_just_after_a_sentence_end_moves_back_to_it():
    # the diarization switches to B two words into B's first sentence
    turns = [Turn("A", 0.0, 14.7), Turn("B", 14.7, 18.0)]
    pieces = words(("New", 13.7, 14.1), ("Jersey.", 14.1, 14.4), ("And", 14.4, 14.6), ("I'm", 14.6, 14.9))
    pieces += words(("Sheila", 14.9, 15.3), ("in", 15.3, 15.5), ("Texas.", 15.5, 16.0))
    speakers, segments = attribute(pieces, turns)
    assert speakers == ["A", "A", "B", "B", "B", "B", "B"]
    assert [s.text for s in segments] == ["New Jersey.", "And I'm Sheila in Texas."]


def test_a_word_spoken_over_another_voice_stays_with_the_voice_whisper_was_following():
    # B joins at 27.85 while A finishes; the exclusive turns hand over at 27.98, in the middle of A's "so"
    turns = [Turn("A", 20.0, 27.98), Turn("B", 27.98, 31.0)]
    overlaps = [Overlap(("A", "B"), 27.85, 28.5)]
    pieces = words(("here.", 27.5, 27.78), ("So,", 27.78, 28.24), ("well.", 28.24, 28.4), ("Oh,", 28.6, 28.9))
    assert attribute_pieces(pieces, turns)[0] == ["A", "B", "B", "B"]
    assert attribute_pieces(pieces, turns, overlaps)[0] == ["A", "A", "A", "B"]


def test_turns_do_not_overlap_even_when_word_timings_do():
    turns = [Turn("A", 0.0, 2.0), Turn("B", 2.0, 5.0)]
    pieces = words(("over.", 1.0, 2.6), ("Next", 2.2, 2.5))
    _, segments = attribute(pieces, turns)
    assert [(s.speaker, s.start, s.end) for s in segments] == [("A", 1.0, 2.0), ("B", 2.0, 2.5)]


def test_turn_boundaries_move_to_nearby_diarization_boundaries():
    # word alignment lags; the diarization knows where each speaker starts and stops
    turns = [Turn("A", 1.65, 7.0), Turn("B", 8.05, 11.5)]
    pieces = words(("Then", 1.9, 2.0), ("list.", 7.2, 7.4), ("Great,", 8.4, 8.8), ("afternoon.", 11.0, 11.8))
    _, segments = attribute(pieces, turns)
    assert [(s.speaker, s.start, s.end) for s in segments] == [("A", 1.65, 7.0), ("B", 8.05, 11.5)]


def test_a_turn_does_not_run_past_its_speakers_speech():
    # the alignment stretches "list." over the pause before the next speaker
    turns = [Turn("A", 1.65, 7.0), Turn("B", 8.5, 11.5)]
    pieces = words(("Then", 1.9, 2.0), ("list.", 7.2, 8.3), ("Great,", 8.6, 8.8))
    _, segments = attribute(pieces, turns)
    assert [(s.speaker, s.start, s.end) for s in segments] == [("A", 1.65, 7.0), ("B", 8.5, 8.8)]


def test_turn_boundaries_far_from_any_diarization_boundary_keep_their_word_timing():
    turns = [Turn("A", 0.0, 10.0)]
    _, segments = attribute(words(("middle", 4.0, 4.5), ("words.", 4.6, 5.0)), turns)
    assert [(s.start, s.end) for s in segments] == [(4.0, 5.0)]


turns = st.lists(
    st.builds(
        lambda speaker, start, length: Turn(speaker, start, start + length),
        st.sampled_from("AB"),
        st.floats(0, 60),
        st.floats(0, 8),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(turns, st.floats(-5, 70), st.floats(0, 5))
def test_the_turn_index_finds_what_a_full_scan_finds(diarization, start, length):
    index, end = TurnIndex(diarization), start + length
    in_order = sorted(diarization, key=lambda turn: (turn.start, turn.end))
    assert index.overlapping(start, end) == [turn for turn in in_order if turn.start < end and start < turn.end]

    def distance(turn):
        return max(turn.start - start, start - turn.end)

    nearest = index.nearest(start)
    assert nearest is None if not diarization else distance(nearest) == min(map(distance, diarization))


def test_words_of_languages_without_spaces_are_joined_without_them():
    pieces = words(("你好", 0.0, 0.5), ("。", 0.5, 0.6), ("谢谢", 1.0, 1.5))
    turns = [Turn("SPEAKER_00", 0.0, 0.7), Turn("SPEAKER_01", 0.9, 1.6)]
    _, segments = attribute_pieces(pieces, turns, separator="")
    assert [(s.speaker, s.text) for s in segments] == [("SPEAKER_00", "你好。"), ("SPEAKER_01", "谢谢")]
