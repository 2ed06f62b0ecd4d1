"""Dynamic time warping of the token alignment against transformers' reference implementation."""

from __future__ import annotations

import numpy as np
import pytest
from transformers.models.whisper.generation_whisper import _dynamic_time_warping

from alignment import monotonic_path


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 12), (12, 1), (7, 40), (200, 750)])
def test_path_matches_transformers(n, m):
    cost = np.random.default_rng(n * m).standard_normal((n, m))
    rows, columns = monotonic_path(cost)
    expected_rows, expected_columns = _dynamic_time_warping(cost)
    assert rows.tolist() == expected_rows.tolist() and columns.tolist() == expected_columns.tolist()
    assert rows[0] == 0 and columns[0] == 0 and rows[-1] == n - 1 and columns[-1] == m - 1
