"""The C heap: what the allocator keeps of freed memory, handed back to the system between the batches of a request."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``; ``None`` under another C library."""
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None


def trim() -> None:
    """Give the heaps' free pages back to the system (glibc; nothing elsewhere). glibc keeps what a batch freed in
    the middle of its heaps, held in place by what is still in use above it, and the next batch's buffers seldom fit
    the holes exactly: without this, a long recording's batches (and steps) stack up their working sets."""
    malloc_trim = _malloc_trim()
    if malloc_trim is not None:
        malloc_trim(0)
