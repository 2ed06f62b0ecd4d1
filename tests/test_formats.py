"""Subtitle, RTTM and text writers on a real response and on edge cases."""

from __future__ import annotations

import re

from speech.formats import SubtitleOptions, cues, read_speaker_transcript, write_rttm, write_srt, write_text, write_vtt
from speech.types import SpeakerTranscript

SRT_TIME = r"(\d\d):(\d\d):(\d\d),(\d\d\d)"


def seconds(match: tuple[str, ...]) -> float:
    hours, minutes, secs, millis = map(int, match)
    return hours * 3600 + minutes * 60 + secs + millis / 1000


def parse_srt(text: str) -> list[tuple[float, float, list[str]]]:
    blocks = []
    for number, block in enumerate(text.strip().split("\n\n"), start=1):
        lines = block.split("\n")
        assert lines[0] == str(number)
        timing = re.fullmatch(f"{SRT_TIME} --> {SRT_TIME}", lines[1])
        assert timing, lines[1]
        blocks.append((seconds(timing.groups()[:4]), seconds(timing.groups()[4:]), lines[2:]))
    return blocks


def response_with(turns: list[tuple[str | None, float, float, str]]) -> SpeakerTranscript:
    speakers = [{"speaker": s, "text": t, "timestamp": [a, b]} for s, a, b, t in turns]
    return read_speaker_transcript({"text": " ".join(t for *_, t in turns), "speakers": speakers})


def test_srt_of_the_sample_is_valid_and_keeps_every_word(sample_response):
    blocks = parse_srt(write_srt(read_speaker_transcript(sample_response)))
    assert len(blocks) >= len(sample_response["speakers"])
    words = []
    previous_start = 0.0
    for start, end, lines in blocks:
        assert previous_start <= start < end
        previous_start = start
        assert 1 <= len(lines) <= 2
        assert all(len(line) <= 42 for line in lines), lines
        label, first = lines[0].split(": ", 1)
        assert label in {"SPEAKER_00", "SPEAKER_01"}
        words += [first, *lines[1:]]
    assert " ".join(words).split() == " ".join(t["text"] for t in sample_response["speakers"]).split()


def test_a_cue_never_spans_two_speakers(sample_response):
    for cue in cues(read_speaker_transcript(sample_response)):
        text = " ".join(cue.lines)
        assert any(text in turn["text"] for turn in sample_response["speakers"] if turn["speaker"] == cue.speaker)


def test_long_turns_are_cut_at_the_limits():
    words = " ".join(f"word{i}" for i in range(60))
    response = response_with([("SPEAKER_00", 0.0, 30.0, words), ("SPEAKER_01", 31.0, 33.0, "Yes. I agree.")])
    options = SubtitleOptions(max_line_length=30, max_cue_duration_s=5.0)
    result = cues(response, options)
    assert all(cue.end - cue.start <= 5.0 + 1e-6 for cue in result)
    assert all(len(line) <= 30 for cue in result for line in cue.lines)
    assert " ".join(" ".join(c.lines) for c in result if c.speaker == "SPEAKER_00") == words
    assert [c.speaker for c in result][-1] == "SPEAKER_01"


def test_vtt_has_voice_spans_and_escapes_markup():
    response = response_with([("SPEAKER_00", 1.0, 2.5, "a <b> & c"), (None, 3.0, 4.0, "no speaker")])
    assert write_vtt(response) == (
        "WEBVTT\n\n00:00:01.000 --> 00:00:02.500\n<v SPEAKER_00>a &lt;b&gt; &amp; c\n\n"
        "00:00:03.000 --> 00:00:04.000\nno speaker\n"
    )


def test_rttm_lists_the_speaker_turns(sample_response):
    lines = write_rttm(read_speaker_transcript(sample_response), "sample call").splitlines()
    turns = [t for t in sample_response["speakers"] if t["timestamp"][1] > t["timestamp"][0]]
    assert len(lines) == len(turns)
    for line, turn in zip(lines, turns, strict=True):
        fields = line.split()
        assert fields[:3] == ["SPEAKER", "sample_call", "1"] and fields[7] == turn["speaker"]
        assert abs(float(fields[3]) - turn["timestamp"][0]) < 1e-3
        assert abs(float(fields[3]) + float(fields[4]) - turn["timestamp"][1]) < 2e-3


def test_text_has_one_line_per_turn():
    response = response_with([("SPEAKER_00", 0.0, 1.0, "Hi."), ("SPEAKER_01", 1.0, 2.0, "Hello."), (None, 2, 3, "?")])
    assert write_text(response) == "SPEAKER_00: Hi.\nSPEAKER_01: Hello.\n?\n"


def test_empty_transcripts_give_empty_files():
    response = response_with([])
    assert write_srt(response) == "" and write_rttm(response) == "" and write_vtt(response) == "WEBVTT\n"
