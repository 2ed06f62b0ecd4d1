"""Between the steps of a request the C heap gives back what the last step freed, even where it is held in place
by memory still in use above it."""

from __future__ import annotations

import pytest
from conftest import rss_mb

from speech import heap


@pytest.mark.skipif(heap._malloc_trim() is None, reason="not glibc")
def test_trim_gives_back_freed_memory_below_memory_in_use():
    freed = [bytes(range(256)) * 16 for _ in range(50_000)]  # 200 MB written into the heap, not mapped apart
    kept = [bytes(range(256)) * 16 for _ in range(100)]  # above it
    del freed
    held = rss_mb()
    heap.trim()
    assert held - rss_mb() > 150
    assert len(kept) == 100
