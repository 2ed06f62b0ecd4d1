"""Speech turns indexed by time, to find the ones near a moment without scanning them all."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from speech.types import Turn


class TurnIndex:
    """Speech turns sorted by start, to find the ones near a moment without scanning them all (4 hours of speech
    have thousands of turns). Turns may overlap. ``starts`` and ``ends`` are their boundaries, sorted."""

    def __init__(self, turns: Sequence[Turn]):
        self.turns = sorted(turns, key=lambda turn: (turn.start, turn.end))
        self.starts = [turn.start for turn in self.turns]
        self.ends = sorted(turn.end for turn in self.turns)
        ends = [turn.end for turn in self.turns]
        self._latest = list(itertools.accumulate(range(len(ends)), lambda i, j: j if ends[j] > ends[i] else i))
        """``_latest[i]``: the index of the latest-ending turn among the first ``i + 1``."""

    def _reaching(self, first_after: int, time: float, *, inclusive: bool) -> list[Turn]:
        """The turns before index ``first_after`` that end after ``time`` (or at it, if ``inclusive``), in order."""
        found = []
        i = first_after
        while i > 0 and self._ends_after(self.turns[self._latest[i - 1]], time, inclusive):
            i -= 1
            if self._ends_after(self.turns[i], time, inclusive):
                found.append(self.turns[i])
        return found[::-1]

    @staticmethod
    def _ends_after(turn: Turn, time: float, inclusive: bool) -> bool:
        return turn.end >= time if inclusive else turn.end > time

    def covered(self, start: float, end: float) -> float:
        """Seconds of [start, end] that the turns cover, overlapping turns counted once."""
        seconds, reach = 0.0, start
        for turn in self.overlapping(start, end):
            low, high = max(turn.start, reach), min(turn.end, end)
            if high > low:
                seconds, reach = seconds + high - low, high
        return seconds

    def overlapping(self, start: float, end: float) -> list[Turn]:
        """The turns that start before ``end`` and end after ``start``, in order."""
        return self._reaching(bisect.bisect_left(self.starts, end), start, inclusive=False)

    def nearest(self, time: float) -> Turn | None:
        """The turn closest to ``time``; the most central one when several contain it."""
        after = bisect.bisect_right(self.starts, time)
        candidates = self._reaching(after, time, inclusive=True)
        if after > 0:
            candidates.append(self.turns[self._latest[after - 1]])
        if after < len(self.turns):
            candidates.append(self.turns[after])
        return min(candidates, key=lambda turn: max(turn.start - time, time - turn.end), default=None)
