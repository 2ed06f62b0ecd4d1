"""The resegmentation gives a stretch of one voice back to the speaker it sounds like, and leaves a right
diarization as it is."""

import numpy as np
import pytest
import torch
from pyannote.core import Segment

from config import ModelSettings
from speech.speakers.pipeline import load_pipeline
from speech.speakers.resegmentation import Resegmentation
from speech.speakers.voice_windows import AudioWindows, FeatureWindows

SHEILA = Segment(14.6, 17.7)  # "And I'm Sheila in Texas, originally from Chicago." (one voice)


@pytest.fixture(scope="module")
def sample_diarization(sample_waveform):
    settings = ModelSettings()
    pipeline = load_pipeline(settings.diarization_model, settings.token, torch.device("cpu"))
    pipeline.resegmentation = None
    audio = {"waveform": torch.from_numpy(sample_waveform)[None], "sample_rate": 16000, "uri": "sample"}
    output = pipeline(audio)
    model = pipeline.embedding_model
    features = model.recording_features(torch.from_numpy(sample_waveform), model.num_frames(len(sample_waveform)), 12)
    windows = {
        "single pass": FeatureWindows(model, features),  # the offline default's
        "audio": AudioWindows(pipeline._embedding, audio["waveform"], 16000),  # any embedding model's
    }
    return windows, output


def _seconds(annotation, segment: Segment, label: str) -> float:
    return annotation.crop(segment).label_timeline(label).duration()


@pytest.mark.parametrize("source", ["single pass", "audio"])
def test_a_turn_given_to_the_wrong_speaker_goes_back(sample_diarization, source):
    windows, output = sample_diarization
    full, exclusive = output.speaker_diarization, output.exclusive_speaker_diarization
    sheila = full.crop(SHEILA).argmax()
    other = next(label for label in full.labels() if label != sheila)
    wrong = [annotation.extrude(SHEILA) for annotation in (full, exclusive)]
    for annotation in wrong:
        annotation[SHEILA, "wrong"] = other
    mended, mended_exclusive = Resegmentation()(windows[source], *wrong, output.speaker_embeddings)
    assert _seconds(mended, SHEILA, sheila) > 0.9 * SHEILA.duration
    assert _seconds(mended_exclusive, SHEILA, sheila) > 0.9 * SHEILA.duration
    assert mended.labels() == full.labels()


@pytest.mark.parametrize("source", ["single pass", "audio"])
def test_a_right_diarization_stays(sample_diarization, source):
    windows, output = sample_diarization
    full = output.speaker_diarization
    mended, _ = Resegmentation()(windows[source], full, output.exclusive_speaker_diarization, output.speaker_embeddings)
    moved = sum(
        abs(full.label_timeline(label).duration() - mended.label_timeline(label).duration()) for label in full.labels()
    )
    assert moved < 1.0
    assert np.isclose(full.get_timeline().support().duration(), mended.get_timeline().support().duration(), atol=0.1)
