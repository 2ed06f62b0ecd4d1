"""Dynamic time warping of the token alignment against the textbook recurrence."""

from __future__ import annotations

import numpy as np
import pytest

from alignment import monotonic_path


def reference_path(cost: np.ndarray) -> tuple[list[int], list[int]]:
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            acc[i, j] = cost[i - 1, j - 1] + min(acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1])
    rows, columns, i, j = [], [], n, m
    while i > 0 and j > 0:
        rows.append(i - 1)
        columns.append(j - 1)
        diagonal, up, left = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
        if diagonal < up and diagonal < left:
            i, j = i - 1, j - 1
        elif up < diagonal and up < left:
            i -= 1
        else:
            j -= 1
    return rows[::-1], columns[::-1]


@pytest.mark.parametrize(("n", "m"), [(1, 1), (1, 12), (12, 1), (7, 40), (30, 200)])
def test_path_matches_the_textbook_recurrence(n, m):
    cost = np.random.default_rng(n * m).standard_normal((n, m))
    rows, columns = monotonic_path(cost)
    assert (rows.tolist(), columns.tolist()) == reference_path(cost)
    assert rows[0] == 0 and columns[0] == 0 and rows[-1] == n - 1 and columns[-1] == m - 1
