"""The single CAM++ pass keeps its features in a temporary file: what is read back is what a pass over the whole
reflected recording computes, whatever the batch (to float16 rounding); windows are pooled as pyannote pools them."""

import numpy as np
import pytest
import torch
from pyannote.audio.models.blocks.pooling import StatsPool

from config import ModelSettings
from speech.speakers.campplus import FEATURE_DTYPE, TILE_MARGIN_SECONDS, TILE_SECONDS, _reflected, weighted_stats
from speech.speakers.pipeline import load_pipeline


@pytest.mark.parametrize("length", [1, 2, 3, 7])
def test_reflection_is_numpys(length):
    samples = np.arange(length, dtype=np.float32)
    for start in range(-20, 2):
        for stop in range(max(start + 1, length - 1), length + 20):
            left, right = max(0, -start), max(0, stop - length)
            expected = np.pad(samples, (left, right), mode="reflect")[start + left : stop + left]
            np.testing.assert_array_equal(_reflected(torch.from_numpy(samples), start, stop).numpy(), expected)


def test_features_read_back_are_those_of_the_whole_reflected_recording(sample_waveform):
    settings = ModelSettings()
    model = load_pipeline(settings.diarization_model, settings.token, torch.device("cpu")).embedding_model
    waveform = torch.from_numpy(sample_waveform)
    num_frames = model.num_frames(len(waveform))
    tile, margin = round(TILE_SECONDS * 16000), round(TILE_MARGIN_SECONDS * 16000)
    hop, skipped = tile - 2 * margin, round(TILE_MARGIN_SECONDS / model.frame_seconds)
    kept = round(hop / 16000 / model.frame_seconds)
    num_tiles = -(-num_frames // kept)
    samples = sample_waveform[: num_tiles * hop + margin]
    padded = np.pad(samples, (margin, num_tiles * hop + margin - len(samples)), mode="reflect")
    with torch.inference_mode():
        tiles = torch.from_numpy(padded).unfold(0, tile, hop)[:num_tiles, None]
        expected = model.trunk(tiles)[:, :, skipped : skipped + kept].to(FEATURE_DTYPE)
    expected = expected.transpose(0, 1).flatten(1)[:, :num_frames]
    features = model.recording_features(waveform, num_frames, batch_size=1)  # the first, middle and last tiles
    assert features.num_frames == num_frames
    one_step = {"atol": 4e-3, "rtol": 2e-3}  # a batch of one rounds a few frames to the next float16
    torch.testing.assert_close(features.window(0, num_frames), expected, **one_step)
    torch.testing.assert_close(features.window(100, 50), expected[:, 100:150], **one_step)
    assert features.window(num_frames - 10, 50).shape == (expected.shape[0], 10)


def test_windows_are_pooled_as_pyannote_pools_them(sample_waveform):
    """The statistics of the sample's CAM++ features under the segmentation's kind of weights (a speaker active in
    runs of frames, one silent, one active for a single frame), per speaker, for one, and without weights."""
    settings = ModelSettings()
    model = load_pipeline(settings.diarization_model, settings.token, torch.device("cpu")).embedding_model
    with torch.inference_mode():
        frames = model.trunk(torch.from_numpy(sample_waveform[: 4 * 160_000]).reshape(4, 1, -1))
    weights = torch.zeros(4, 3, 589)
    weights[:, 0, 100:400] = weights[:2, 1, 300:] = 1.0
    weights[2, 2, 7] = 1.0
    pyannote = StatsPool()
    single_frame = {"atol": 1e-3, "rtol": 1e-4}  # a deviation of one frame: 0 in pyannote's, rounding (< 1e-3) here
    torch.testing.assert_close(weighted_stats(frames, weights), pyannote(frames, weights=weights), **single_frame)
    torch.testing.assert_close(weighted_stats(frames, weights[:, 0]), pyannote(frames, weights=weights[:, 0]))
    torch.testing.assert_close(weighted_stats(frames, None), pyannote(frames))
