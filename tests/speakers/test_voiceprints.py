"""Speakers by name: known speaker references and voiceprints (``voiceprints.py``), on real weights and voices."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from conftest import SENTENCES, kokoro_dialogue

from config import InferenceConfig
from service import cli
from speech.audio import SAMPLE_RATE, decode
from speech.errors import AudioTooLongError, AudioTooShortError, InvalidAudioError, InvalidParametersError
from speech.formats import voiceprint_json
from speech.speakers.voiceprints import MATCH_THRESHOLD, MAX_AUDIO_REFERENCES, identify, unit
from speech.types import Diarization, Overlap, Turn, Voiceprint


def _axis(i: int, dimension: int = 8) -> np.ndarray:
    vector = np.zeros(dimension, dtype=np.float32)
    vector[i] = 1.0
    return vector


def _between(a: int, b: int, share: float) -> np.ndarray:
    """A unit vector at cosine ``share`` from axis ``a``, in the plane of axes ``a`` and ``b``."""
    return unit(share * _axis(a) + np.sqrt(1 - share**2) * _axis(b))


def _diarization(embeddings: dict[str, np.ndarray]) -> Diarization:
    turns = [Turn(label, 2.0 * i, 2.0 * i + 1.5) for i, label in enumerate(embeddings)]
    labels = tuple(sorted(embeddings)[:2])
    return Diarization(turns, [Overlap(labels, 1.4, 1.5)], embeddings)


def test_each_name_goes_to_at_most_one_speaker_above_the_threshold():
    diarization = _diarization({"SPEAKER_00": 3 * _axis(0), "SPEAKER_01": _axis(1), "SPEAKER_02": _axis(2)})
    known = [
        Voiceprint("Ann", _between(0, 5, 0.9), "m"),
        Voiceprint("Bob", _between(1, 5, 0.8), "m"),
        Voiceprint("Eve", _between(1, 6, 0.7), "m"),  # closest to Bob's speaker too, but Bob is closer
        Voiceprint("Zed", _between(2, 7, 0.3), "m"),  # below the threshold
    ]
    identified = identify(diarization, known, 0.5, "m")
    assert [turn.speaker for turn in identified.diarization.turns] == ["Ann", "Bob", "SPEAKER_02"]
    assert identified.diarization.overlaps[0].speakers == ("Ann", "Bob")
    assert set(identified.diarization.speaker_embeddings) == {"Ann", "Bob", "SPEAKER_02"}
    found = {m.name: (m.speaker, round(m.score, 2), m.matched) for m in identified.matches}
    assert found == {
        "Ann": ("Ann", 0.9, True),
        "Bob": ("Bob", 0.8, True),
        "Eve": ("Bob", 0.7, False),
        "Zed": ("SPEAKER_02", 0.3, False),
    }
    prints = {p.speaker: p for p in identified.voiceprints}
    assert np.allclose(prints["Ann"].embedding, _axis(0)) and prints["Ann"].model == "m"
    assert voiceprint_json(prints["Ann"])["embedding"][0] == 1.0


def test_the_assignment_maximises_the_total_similarity():
    # Ann is closest to SPEAKER_00 (0.70), but giving her SPEAKER_01 (0.65) lets Bob have SPEAKER_00 (0.68):
    # choosing the best pair first would leave Bob and SPEAKER_01 unmatched.
    diarization = _diarization({"SPEAKER_00": _axis(0), "SPEAKER_01": _axis(1)})
    ann = unit(0.70 * _axis(0) + 0.65 * _axis(1) + 0.296 * _axis(2))
    bob = unit(0.68 * _axis(0) + 0.733 * _axis(3))
    identified = identify(diarization, [Voiceprint("Ann", ann, "m"), Voiceprint("Bob", bob, "m")], 0.6, "m")
    assert [turn.speaker for turn in identified.diarization.turns] == ["Bob", "Ann"]


def test_an_unnamed_speaker_never_takes_a_known_name():
    # A voice new to this recording, labelled SPEAKER_00 by the diarization, while an earlier recording's
    # SPEAKER_00 (another voice, absent here) and SPEAKER_01 (present, diarized as SPEAKER_01) are known.
    diarization = _diarization({"SPEAKER_00": _axis(0), "SPEAKER_01": _axis(1), "SPEAKER_02": np.zeros(8)})
    known = [Voiceprint("SPEAKER_00", _axis(3), "m"), Voiceprint("SPEAKER_01", _axis(1), "m")]
    identified = identify(diarization, known, 0.5, "m")
    assert [turn.speaker for turn in identified.diarization.turns] == ["SPEAKER_03", "SPEAKER_01", "SPEAKER_02"]
    assert [p.speaker for p in identified.voiceprints] == ["SPEAKER_03", "SPEAKER_01"]  # no centroid, no voiceprint
    assert [m.matched for m in identified.matches] == [False, True]


def test_nothing_is_named_without_speakers_or_references():
    identified = identify(Diarization([], []), [Voiceprint("Ann", _axis(0), "m")], 0.5, None)
    assert identified.matches[0].speaker is None and identified.voiceprints == []
    plain = _diarization({"SPEAKER_00": _axis(0)})
    assert identify(plain, [], 0.5, "m").diarization == plain


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"known_speaker_names": ["Ann"]}, "must have the same length"),
        ({"known_speaker_names": ["Ann", "Ann"], "known_speaker_references": ["a", "b"]}, "more than once: Ann"),
        (
            {
                "known_speaker_names": ["Ann"],
                "known_speaker_references": ["a"],
                "known_speaker_embeddings": [{"speaker": "Ann", "model": "m", "embedding": [1.0]}],
            },
            "more than once: Ann",
        ),
        (
            {"known_speaker_names": ["x"] * 9, "known_speaker_references": ["a"] * 9},
            f"at most {MAX_AUDIO_REFERENCES} items",
        ),
        ({"known_speaker_names": [" "], "known_speaker_references": ["a"]}, "at least 1 character"),
        ({"known_speaker_embeddings": [{"speaker": "Ann", "embedding": [1.0]}]}, "model: Field required"),
        ({"speaker_match_threshold": 0}, "greater than 0"),
    ],
)
def test_known_speaker_parameters_are_validated(parameters, message):
    with pytest.raises(InvalidParametersError, match=message):
        InferenceConfig.from_parameters(parameters)


def test_references_are_left_out_of_the_parameters_echoed():
    config = InferenceConfig.from_parameters(
        {
            "known_speaker_names": ["Ann"],
            "known_speaker_references": ["UklGRg=="],
            "known_speaker_embeddings": [{"speaker": "Bob", "model": "m", "embedding": [1.0]}],
        }
    )
    assert config.known_speaker_references == ["UklGRg=="]
    echoed = config.model_dump()
    assert echoed["known_speaker_names"] == ["Ann"]
    assert "known_speaker_references" not in echoed and "known_speaker_embeddings" not in echoed


# On real weights: Kokoro voices of the test set (``bench/conversations.TEST_VOICES``; the threshold was chosen on
# other voices). Ann and Bea are named by references, Cal has none, Dan's reference is of someone who is not there.
# Voices the diarization keeps apart in recordings this short: it merged af_sarah with bf_emma, af_aoede with
# bf_isabella, am_adam with bm_lewis or am_santa, whose references are 0.01-0.34 cosine apart: a limit of the
# diarization (the segmentation's local speakers), not of the naming.
ANN, BEA, CAL, DAN = "af_aoede", "am_adam", "bm_fable", "bf_isabella"


def _recording(turns: list[tuple[str, str]]) -> tuple[bytes, list[tuple[str, float, float]]]:
    """WAV of the turns said one after another, and each turn's (voice, start, end)."""
    from kokoro import wav_bytes

    waveform, spans = kokoro_dialogue(turns)
    return wav_bytes(waveform), spans


def _labels(turns: list[dict], spans: list[tuple[str, float, float]]) -> dict[str, set[str]]:
    """The labels of the response's speaker turns over each voice's speech (the most overlapping turn per span)."""
    labels: dict[str, set[str]] = {}
    for voice, start, end in spans:
        held = [(min(end, t["timestamp"][1]) - max(start, t["timestamp"][0]), t["speaker"]) for t in turns]
        labels.setdefault(voice, set()).add(max(held)[1])
    return labels


@pytest.fixture(scope="session")
def meeting() -> tuple[bytes, list[tuple[str, float, float]]]:
    """About 32 s: Ann, Bea and Cal, three sentences each, in turn. Not on the clustering's edge: every merge within
    a voice stays 0.035 or more below its cut (0.6), every merge between voices is above 1.0, with noise up to 1e-4
    added as well. (Ann, Bea, Cal, Ann, Cal, Bea, Bea, Ann, Cal split Ann's last sentence off at 0.62 or not, as
    noise below a 16-bit step had it.)"""
    voices = (ANN, BEA, CAL) * 3
    return _recording(list(zip(voices, SENTENCES[:9], strict=True)))


@pytest.fixture(scope="session")
def references() -> dict[str, bytes]:
    """5 s of Ann, Bea and Dan each, saying sentences of ``bench/corpus.py`` (not in any conversation here)."""
    from calibrate_voiceprints import reference
    from corpus import LINES
    from kokoro import wav_bytes

    return {voice: wav_bytes(reference(voice, LINES[4 * i : 4 * i + 4])) for i, voice in enumerate((ANN, BEA, DAN))}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_known_speakers_are_named_and_the_others_are_not(handler, meeting, references):
    audio, spans = meeting
    parameters = {
        "known_speaker_names": ["Ann", "Bea", "Dan"],
        "known_speaker_references": [_b64(references[voice]) for voice in (ANN, BEA, DAN)],
        "return_embeddings": True,
    }
    response = handler({"inputs": audio, "parameters": parameters})
    labels = _labels(response["speakers"], spans)
    assert labels[ANN] == {"Ann"} and labels[BEA] == {"Bea"}
    (cal,) = labels[CAL]
    assert cal.startswith("SPEAKER_")
    known = {entry["name"]: entry for entry in response["known_speakers"]}
    assert known["Ann"]["matched"] and known["Bea"]["matched"] and not known["Dan"]["matched"]
    assert min(known["Ann"]["score"], known["Bea"]["score"]) >= MATCH_THRESHOLD > known["Dan"]["score"]
    prints = {entry["speaker"]: entry for entry in response["speaker_embeddings"]}
    assert set(prints) == {"Ann", "Bea", cal}
    for entry in prints.values():
        assert entry["model"] == handler.embedder.model and entry["model"].startswith("CAMPPlusEmbedding-192-")
        assert np.linalg.norm(entry["embedding"]) == pytest.approx(1.0, abs=1e-4)
    assert response["parameters"]["known_speaker_names"] == ["Ann", "Bea", "Dan"]
    assert "known_speaker_references" not in response["parameters"]


def test_the_openai_route_takes_known_speakers_as_data_urls(client, meeting, references):
    audio, spans = meeting
    form = {
        "response_format": "diarized_json",
        "known_speaker_names[]": ["Ann", "Bea"],
        "known_speaker_references[]": [f"data:audio/wav;base64,{_b64(references[v])}" for v in (ANN, BEA)],
    }
    response = client.post("/v1/audio/transcriptions", files={"file": ("talk.wav", audio, "audio/wav")}, data=form)
    assert response.status_code == 200, response.text
    turns = [{"speaker": s["speaker"], "timestamp": [s["start"], s["end"]]} for s in response.json()["segments"]]
    labels = _labels(turns, spans)
    assert (
        labels[ANN] == {"Ann"} and labels[BEA] == {"Bea"} and labels[CAL] <= {"SPEAKER_00", "SPEAKER_01", "SPEAKER_02"}
    )


def _audio_of(seconds: float, references: dict[str, bytes]) -> str:
    from kokoro import wav_bytes

    waveform = decode(references[ANN], 60).waveform
    return _b64(wav_bytes(np.resize(waveform, int(seconds * SAMPLE_RATE))))


@pytest.mark.parametrize(
    ("reference", "error", "message"),
    [
        (1.5, AudioTooShortError, r"known_speaker_references\[0\]: the audio lasts 1.50 s; a reference must last 2 to"),
        (11.0, AudioTooLongError, r"known_speaker_references\[0\]: the audio is longer than the 10.1 s limit"),
        (_b64(b"file:///etc/passwd"), InvalidAudioError, r"\[0\]: a URL or FFmpeg protocol string \(file:\)"),
        ("file:///etc/passwd", InvalidAudioError, r"known_speaker_references\[0\]: not valid base64"),
        ("data:text/plain;base64," + _b64(b"#EXTM3U\nhttp://127.0.0.1/"), InvalidAudioError, "an M3U/HLS playlist"),
    ],
)
def test_bad_references_are_refused_before_any_model_runs(handler, clip_wav, references, reference, error, message):
    if isinstance(reference, float):
        reference = _audio_of(reference, references)
    parameters = {"known_speaker_names": ["Ann"], "known_speaker_references": [reference]}
    with pytest.raises(error, match=message):
        handler({"inputs": clip_wav, "parameters": parameters})


@pytest.mark.parametrize(
    ("embedding", "model", "message"),
    [
        ([0.1] * 192, "ECAPA-192-0123456789ab", "made by the embedding model 'ECAPA-192-0123456789ab'"),
        ([0.1] * 256, None, "expected 192 finite numbers, not all zero \\(got 256 numbers\\)"),
        ([0.0] * 192, None, "expected 192 finite numbers, not all zero"),
    ],
)
def test_voiceprints_of_another_model_or_shape_are_refused(handler, clip_wav, embedding, model, message):
    known = {"speaker": "Ann", "model": model or handler.embedder.model, "embedding": embedding}
    with pytest.raises(InvalidParametersError, match=r"known_speaker_embeddings\[0\]: " + message):
        handler({"inputs": clip_wav, "parameters": {"known_speaker_embeddings": [known]}})


def test_the_same_voices_get_the_same_labels_across_recordings(tmp_path, meeting):
    """``--consistent-speakers``: Ann and Bea in three recordings (Bea first in the second; the third is the
    meeting, where Cal is new)."""
    takes = {}
    for name, voices, lines in (
        ("take0", (ANN, BEA) * 2, SENTENCES[9:13]),
        ("take1", (BEA, ANN) * 2, SENTENCES[13:17]),
    ):
        takes[name] = _recording(list(zip(voices, lines, strict=True)))
    takes["take2"] = meeting
    for name, (audio, _) in takes.items():
        (tmp_path / f"{name}.wav").write_bytes(audio)
    files = [str(tmp_path / f"{name}.wav") for name in takes]
    assert cli.main(["transcribe", "--consistent-speakers", "--format", "json", "--out", str(tmp_path), *files]) == 0
    labels = {
        name: _labels(json.loads((tmp_path / f"{name}.json").read_text())["speakers"], spans)
        for name, (_, spans) in takes.items()
    }
    assert labels["take0"] in ({ANN: {"SPEAKER_00"}, BEA: {"SPEAKER_01"}}, {ANN: {"SPEAKER_01"}, BEA: {"SPEAKER_00"}})
    for take in ("take1", "take2"):
        assert labels[take][ANN] == labels["take0"][ANN] and labels[take][BEA] == labels["take0"][BEA]
    (cal,) = labels["take2"][CAL]
    assert cal.startswith("SPEAKER_") and {cal} not in (labels["take0"][ANN], labels["take0"][BEA])
