"""Token alignment: dynamic time warping against transformers' reference, reuse of the encoder passes."""

from __future__ import annotations

import numpy as np
import pytest
from transformers.models.whisper.generation_whisper import _dynamic_time_warping

from config import InferenceConfig
from speech.asr.alignment import monotonic_path


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 12), (12, 1), (7, 40), (200, 750)])
def test_path_matches_transformers(n, m):
    cost = np.random.default_rng(n * m).standard_normal((n, m))
    rows, columns = monotonic_path(cost)
    expected_rows, expected_columns = _dynamic_time_warping(cost)
    assert rows.tolist() == expected_rows.tolist() and columns.tolist() == expected_columns.tolist()
    assert rows[0] == 0 and columns[0] == 0 and rows[-1] == n - 1 and columns[-1] == m - 1


def test_dating_reuses_the_encoder_passes_of_generate(handler, sample_waveform):
    """The sample is one window that Whisper decodes in two passes; dating its tokens encodes nothing again."""
    calls = []
    hook = handler.whisper.model.get_encoder().register_forward_hook(lambda *args: calls.append(args))
    try:
        transcript = handler.transcriber.transcribe(sample_waveform, InferenceConfig(assisted=False))
    finally:
        hook.remove()
    assert len(calls) == 2
    starts = [word.start for word in transcript.words]
    assert starts == sorted(starts) and starts[-1] > 25.0
