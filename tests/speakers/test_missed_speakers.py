"""A voice the clustering gave to another speaker is found again from short windows and gets its own turns; a
right diarization gets no new speaker; ``max_speakers`` still binds."""

import numpy as np
import pytest
import torch
from conftest import SENTENCES, kokoro_dialogue
from pyannote.core import Segment

from config import ModelSettings
from speech.audio import SAMPLE_RATE
from speech.speakers.missed_speakers import MissedSpeakers
from speech.speakers.pipeline import load_pipeline
from speech.speakers.voice_windows import FeatureWindows

# Two Kokoro voices of the test set (``bench/conversations.TEST_VOICES``), taking turns.
VOICES = ("af_aoede", "am_adam")


@pytest.fixture(scope="module")
def dialogue() -> tuple[dict, list[tuple[str, float, float]]]:
    """About 30 s of the two voices taking turns, as a pyannote file, and each turn's (voice, start, end)."""
    waveform, spans = kokoro_dialogue([(VOICES[i % 2], text) for i, text in enumerate(SENTENCES[:8])])
    return {"waveform": torch.from_numpy(waveform)[None], "sample_rate": SAMPLE_RATE}, spans


@pytest.fixture(scope="module")
def pipeline():
    settings = ModelSettings()
    return load_pipeline(settings.diarization_model, settings.token, torch.device("cpu"))


def _windows(pipeline, audio) -> FeatureWindows:
    model = pipeline.embedding_model
    waveform = audio["waveform"][0]
    return FeatureWindows(model, model.recording_features(waveform, model.num_frames(len(waveform)), 12))


def test_a_voice_merged_into_another_is_found_again(pipeline, dialogue):
    audio, spans = dialogue
    missed, resegmentation = pipeline.missed_speakers, pipeline.resegmentation
    pipeline.missed_speakers = pipeline.resegmentation = None
    try:
        merged = pipeline(dict(audio), num_speakers=1)  # the clustering made to give both voices to one speaker
    finally:
        pipeline.missed_speakers, pipeline.resegmentation = missed, resegmentation
    windows = _windows(pipeline, audio)
    labels = list(merged.speaker_diarization.labels())
    found = MissedSpeakers()(windows, merged.speaker_diarization, merged.speaker_embeddings)
    assert len(labels) == 1 and len(found) == 1
    mended, _ = resegmentation(
        windows,
        merged.speaker_diarization,
        merged.exclusive_speaker_diarization,
        np.vstack([merged.speaker_embeddings, found]),
        [*labels, "SPEAKER_01"],
    )
    first, second = (_majority_labels(mended, spans)[voice] for voice in VOICES)
    assert len(first) == len(second) == 1 and first != second  # each voice one speaker, not the same one


def test_a_right_diarization_gets_no_new_speaker(pipeline, dialogue):
    audio, _ = dialogue
    output = pipeline(dict(audio))
    assert len(output.speaker_diarization.labels()) == 2
    found = MissedSpeakers()(_windows(pipeline, audio), output.speaker_diarization, output.speaker_embeddings)
    assert len(found) == 0


def test_max_speakers_binds(pipeline, dialogue):
    audio, _ = dialogue
    assert len(pipeline(dict(audio), max_speakers=1).speaker_diarization.labels()) == 1


def _majority_labels(annotation, spans) -> dict[str, set[str]]:
    """The label that holds most of each turn, gathered per voice."""
    labels: dict[str, set[str]] = {}
    for voice, start, end in spans:
        labels.setdefault(voice, set()).add(annotation.crop(Segment(start, end)).argmax())
    return labels
