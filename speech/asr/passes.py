"""The passes of ``generate`` in a window: Whisper decodes a window in passes, the next one starting at the opening
timestamp of the segment the last one left unfinished; each pass is dated and scored on its own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from speech.asr.alignment import FRAME_S, MEL_FRAME_S, token_times


@dataclass(frozen=True)
class DatedSegment:
    """One of ``generate``'s segments, its tokens' start times in the window (seconds) and their log-probabilities."""

    segment: dict
    times: np.ndarray
    logprobs: np.ndarray


@dataclass(frozen=True)
class DecodingPass:
    """The segments one pass of ``generate`` decoded in a window, starting ``seek`` mel frames into it."""

    segments: list[dict]
    seek: int

    @property
    def tokens(self) -> list[int]:
        return [token for segment in self.segments for token in segment["tokens"].tolist()]

    def dated_segments(
        self, attention: torch.Tensor, mel_frames: int, lead: int, logprobs: np.ndarray
    ) -> list[DatedSegment]:
        """Each segment with its tokens' start times in the window and their ``logprobs`` (one per token of the
        pass); ``attention`` has a row per token from ``lead`` rows before the first (the prompt's
        <|notimestamps|>, which takes the audio before the first word as a timestamp token would)."""
        rows = attention[:, : lead + len(self.tokens)]
        times = token_times(rows, mel_frames - self.seek)[lead:] + self.seek * MEL_FRAME_S
        bounds = np.cumsum([0] + [len(segment["tokens"]) for segment in self.segments])
        return [
            DatedSegment(segment, times[a:b], logprobs[a:b])
            for segment, a, b in zip(self.segments, bounds[:-1], bounds[1:], strict=True)
        ]


def passes(segments: list[dict], timestamp_begin: int) -> list[DecodingPass]:
    """Group a window's segments by the pass of ``generate`` that decoded them (token indices restart per pass)."""
    groups: list[list[dict]] = []
    for segment in segments:
        if groups and segment["idxs"][0] >= groups[-1][-1]["idxs"][1]:
            groups[-1].append(segment)
        else:
            groups.append([segment])
    found = []
    for group in groups:
        opening = int(group[0]["tokens"][0]) - timestamp_begin  # the pass's first token is a timestamp
        start = float(group[0]["start"]) - max(0, opening) * FRAME_S
        found.append(DecodingPass(group, 0 if not found else round(start / MEL_FRAME_S)))
    return found


def first_pass_tokens(window: list[dict], timestamp_begin: int) -> list[int]:
    """The tokens of a window's first pass; none for a window without segments."""
    return passes(window, timestamp_begin)[0].tokens if window else []
