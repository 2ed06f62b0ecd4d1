"""Recordings with one side per channel (``multichannel``): crosstalk silenced on the quieter channel, each
channel's speakers labelled apart, and the channels' diarizations and transcripts merged in time order."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.ndimage import maximum_filter1d

from speech.audio import SAMPLE_RATE, float_samples
from speech.speakers.confidence import SpeakerEvidence
from speech.types import Diarization, Overlap, Segment, Transcript, Turn

FRAME_S = 0.05
"""Crosstalk is judged on frames of 50 ms..."""
SMOOTHING_FRAMES = 5
"""... their level differences averaged over 250 ms, about a syllable, so that a word is not cut into pieces."""
CROSSTALK_MARGIN_DB = 10.0
"""A channel this much quieter than another hears that other side (bleed, line echo), not its own: the stretch is
silenced there. Two sides talking at once within this of each other both keep their speech."""
ECHO_FRAMES = 10
"""Another channel's level counts for the 500 ms after it (frames): a line echo comes back that much later, when
the other side may have paused."""
_BLOCK_FRAMES = 12_000  # energies computed 10 minutes at a time


def suppress_crosstalk(channels: np.ndarray) -> float:
    """Silence, in place, each stretch of a channel (rows of ``channels``) that is ``CROSSTALK_MARGIN_DB``
    quieter than another channel at that moment or in the ``ECHO_FRAMES`` before: speech heard on several channels
    belongs to the loudest.
    Returns the share of the recording's channel time silenced."""
    frame = int(FRAME_S * SAMPLE_RATE)
    frames = channels.shape[1] // frame
    levels = np.empty((len(channels), frames), dtype=np.float32)
    for first in range(0, frames, _BLOCK_FRAMES):
        last = min(frames, first + _BLOCK_FRAMES)
        block = float_samples(channels[:, first * frame : last * frame]).reshape(len(channels), last - first, frame)
        power = np.einsum("cfs,cfs->cf", block, block, dtype=np.float64) / frame
        levels[:, first:last] = 10 * np.log10(power + 1e-10)
    kernel = np.ones(SMOOTHING_FRAMES, dtype=np.float32) / SMOOTHING_FRAMES
    smoothed = np.stack([np.convolve(level, kernel, mode="same") for level in levels])
    recent = maximum_filter1d(smoothed, size=ECHO_FRAMES + 1, axis=1, origin=ECHO_FRAMES // 2)  # now and just before
    quiet = np.zeros_like(smoothed, dtype=bool)
    for channel in range(len(channels)):
        others = np.delete(recent, channel, axis=0).max(axis=0)
        quiet[channel] = smoothed[channel] < others - CROSSTALK_MARGIN_DB
    for channel, silenced in zip(channels, quiet, strict=True):
        samples = np.repeat(silenced, frame)
        channel[: len(samples)][samples] = 0.0
    return float(quiet.mean()) if quiet.size else 0.0


def label_channel(diarization: Diarization, channel: int) -> Diarization:
    """``diarization`` of one channel with labels unique to it (``CH1`` for a channel of one speaker,
    ``CH1_SPEAKER_00``... for one of several) and ``channel`` on every turn."""
    speakers = sorted({turn.speaker for turn in diarization.turns} | set(diarization.speaker_embeddings))
    if len(speakers) == 1:
        names = {speakers[0]: f"CH{channel}"}
    else:
        names = {label: f"CH{channel}_SPEAKER_{n:02d}" for n, label in enumerate(speakers)}
    evidence = diarization.evidence
    return dataclasses.replace(
        diarization,
        turns=[dataclasses.replace(t, speaker=names[t.speaker], channel=channel) for t in diarization.turns],
        overlaps=[
            dataclasses.replace(o, speakers=tuple(names[s] for s in o.speakers), channel=channel)
            for o in diarization.overlaps
        ],
        speaker_embeddings={names[label]: vector for label, vector in diarization.speaker_embeddings.items()},
        evidence=evidence
        and SpeakerEvidence(
            tuple(names.get(s, s) for s in evidence.speakers), evidence.votes, (channel,) * len(evidence.speakers)
        ),
        notes=tuple(f"channel {channel}: {note}" for note in diarization.notes),
    )


def merge_diarizations(diarizations: Sequence[Diarization]) -> Diarization:
    """The channels' diarizations (``label_channel``) as one, in time order, with the stretches where speakers
    of different channels talk at once added to the overlaps."""
    turns = sorted((t for d in diarizations for t in d.turns), key=lambda t: (t.start, t.channel))
    overlaps = [o for d in diarizations for o in d.overlaps] + _across_channels(turns)
    evidences = [d.evidence for d in diarizations if d.evidence is not None]
    evidence = None
    if evidences:
        rows = max(len(e.votes) for e in evidences)
        votes = np.hstack([np.pad(e.votes, ((0, rows - len(e.votes)), (0, 0))) for e in evidences])
        evidence = SpeakerEvidence(
            sum((e.speakers for e in evidences), ()), votes, sum((e.channels for e in evidences), ())
        )
    return Diarization(
        turns,
        sorted(overlaps, key=lambda o: o.start),
        {label: vector for d in diarizations for label, vector in d.speaker_embeddings.items()},
        evidence,
        sum((d.notes for d in diarizations), ()),
    )


def _across_channels(turns: Sequence[Turn]) -> list[Overlap]:
    """Where turns of different channels overlap (``turns`` in order of their start)."""
    found = []
    for i, turn in enumerate(turns):
        for later in turns[i + 1 :]:
            if later.start >= turn.end:
                break
            if later.channel != turn.channel:
                speakers = tuple(sorted((turn.speaker, later.speaker)))
                found.append(Overlap(speakers, later.start, min(turn.end, later.end)))
    return found


def merge_transcripts(transcripts: Mapping[int, Transcript]) -> Transcript:
    """The transcripts of the channels (by channel) as one, each segment and word marked with its channel, in time
    order; the language is the surest channel's, the decoding figures are summed, the warnings name their channel."""
    segments = sorted(
        (on_channel(segment, channel) for channel, t in transcripts.items() for segment in t.segments),
        key=lambda segment: (segment.start, segment.channel),
    )
    surest = max(transcripts.values(), key=lambda t: t.language_probability)
    decodings = [t.decoding for t in transcripts.values()]
    decoding = type(surest.decoding)(
        *(sum(getattr(d, field.name) for d in decodings) for field in dataclasses.fields(surest.decoding))
    )
    warnings = tuple(f"channel {c}: {warning}" for c, t in transcripts.items() for warning in t.warnings)
    return Transcript(
        tuple(segments),
        surest.language,
        surest.language_probability,
        decoding,
        warnings,
        all(t.spaced for t in transcripts.values()),
    )


def on_channel(segment: Segment, channel: int) -> Segment:
    """``segment`` and its words marked as heard on ``channel``."""
    words = tuple(dataclasses.replace(word, channel=channel) for word in segment.words)
    return dataclasses.replace(segment, words=words, channel=channel)
