"""The single CAM++ pass keeps its features in a temporary file: what is read back is what a pass over the whole
reflected recording computes, whatever the batch (to float16 rounding)."""

import numpy as np
import pytest
import torch

from config import ModelSettings
from speech.speakers.campplus import FEATURE_DTYPE, TILE_MARGIN_SECONDS, TILE_SECONDS, _reflected
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
