"""The values handed from step to step of a request: speaker turns, overlaps, transcript pieces, the diarization."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from speech.speakers.confidence import SpeakerEvidence

Progress = Callable[[str, int, int], None]
"""Progress hook: ``(stage, completed, total)``, called as work is done."""


@dataclass(frozen=True)
class Turn:
    """A speech turn of one speaker, in seconds."""

    speaker: str
    start: float
    end: float


@dataclass(frozen=True)
class Chunk:
    """A piece of transcript (a Whisper segment or a word); seconds, ``None`` when Whisper gave no timestamp."""

    text: str
    start: float | None
    end: float | None


@dataclass(frozen=True)
class SpeakerSegment:
    """Consecutive transcript pieces attributed to one speaker (``None`` when no speaker was found)."""

    speaker: str | None
    text: str
    start: float
    end: float


@dataclass(frozen=True)
class Overlap:
    """A stretch where several speakers talk at once, in seconds."""

    speakers: tuple[str, ...]
    start: float
    end: float


@dataclass(frozen=True)
class Diarization:
    """Exclusive turns (one speaker at a time, for attributing words) and the overlapped regions, in time order;
    ``speaker_embeddings``: each speaker's centroid from the clustering (as the pipeline gives it, not normalised;
    all zeros for a speaker the clustering had no centroid for), when the pipeline gives them."""

    turns: list[Turn]
    overlaps: list[Overlap]
    speaker_embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    evidence: SpeakerEvidence | None = None
    """What the windows of the pipeline say about who speaks when, to tell how sure each assignment is."""


NO_DIARIZATION = Diarization([], [])
