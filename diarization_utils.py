"""Speaker diarization: the pyannote pipeline, its inputs and outputs, and the merge with ASR chunks."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from pyannote.audio import Pipeline
from pyannote.audio.core.plda import PLDA
from pyannote.audio.pipelines import SpeakerDiarization as PyannoteSpeakerDiarization
from pyannote.core import Segment, SlidingWindowFeature, Timeline

from audio import SAMPLE_RATE
from errors import ModelLoadError
from formats import ends_sentence
from missed_speakers import MissedSpeakers
from resegmentation import Resegmentation
from speaker_clustering import SpeakerClustering
from speaker_confidence import SpeakerEvidence, speaker_evidence

FEATURES = "campplus_features"
"""Where the single pass leaves the recording's CAM++ features in pyannote's ``file``."""

Progress = Callable[[str, int, int], None]
"""Progress hook: ``(stage, completed, total)``, called as work is done."""


class NoPLDA(PLDA):
    """Stands in for a PLDA that an embedding model does not have; only non-VBx clustering may use it."""

    def __init__(self) -> None:
        pass

    def __call__(self, embeddings: np.ndarray) -> np.ndarray:
        raise RuntimeError("this pipeline has no PLDA; use a clustering other than VBxClustering")


class SpeakerDiarization(PyannoteSpeakerDiarization):
    """pyannote's speaker diarization for embeddings that come without a PLDA (e.g. CAM++).

    ``plda=None`` is allowed with any clustering but ``VBxClustering``, which needs a trained PLDA.
    ``clustering``: one of pyannote's, or ``SpeakerClustering`` (``speaker_clustering``; the offline default's).
    With ``single_pass`` set (CAM++ only, see ``load_pipeline``), the embedding network runs once over the
    recording instead of once per window (``CAMPPlusEmbedding.embed_recording``); with ``resegment`` as well, its
    features then correct who speaks when (``resegmentation.Resegmentation``), and with ``missed_speakers`` they
    first add the voices the clustering missed (``missed_speakers.MissedSpeakers``; not when ``num_speakers`` is
    given, and up to ``max_speakers``).
    """

    single_pass = False

    def __init__(
        self,
        *,
        plda=None,
        clustering: str = "AgglomerativeClustering",
        resegment: bool = False,
        missed_speakers: bool = False,
        **kwargs,
    ):
        if plda is None and clustering == "VBxClustering":
            raise ValueError("VBxClustering needs a PLDA")
        self.resegmentation = Resegmentation() if resegment else None
        self.missed_speakers = MissedSpeakers() if missed_speakers else None
        ours = clustering == SpeakerClustering.__name__
        plda = NoPLDA() if plda is None else plda
        super().__init__(plda=plda, clustering="AgglomerativeClustering" if ours else clustering, **kwargs)
        if ours:
            self.klustering = clustering
            self.clustering = SpeakerClustering(metric=self.clustering.metric)

    @property
    def embedding_model(self) -> torch.nn.Module | None:
        return getattr(self._embedding, "model_", None)

    def apply(self, file, *args, **kwargs):
        """pyannote's diarization, then the missed speakers and the resegmentation on the features the single pass
        left in ``file``."""
        output = super().apply(file, *args, **kwargs)
        features = file.pop(FEATURES, None)
        if self.resegmentation is None or features is None or getattr(output, "speaker_embeddings", None) is None:
            return output
        diarization = output.speaker_diarization
        labels = list(diarization.labels())
        centroids = output.speaker_embeddings[: len(labels)]
        if self.missed_speakers is not None and kwargs.get("num_speakers") is None:
            room = None if kwargs.get("max_speakers") is None else max(0, kwargs["max_speakers"] - len(labels))
            missed = self.missed_speakers(self.embedding_model, features, diarization, centroids, room)
            if len(missed):  # scaled like the clustering's centroids
                labels += _new_labels(labels, len(missed))
                centroids = np.vstack([centroids, missed * np.linalg.norm(centroids, axis=1).mean()])
        output.speaker_diarization, output.exclusive_speaker_diarization = self.resegmentation(
            self.embedding_model, features, diarization, output.exclusive_speaker_diarization, centroids, labels
        )
        output.speaker_embeddings = centroids[[labels.index(label) for label in output.speaker_diarization.labels()]]
        return output

    def get_embeddings(
        self,
        file,
        binary_segmentations: SlidingWindowFeature,
        exclude_overlap: bool = False,
        hook: Callable | None = None,
    ) -> np.ndarray:
        """(windows, local speakers, dimension) embeddings as pyannote's; with ``single_pass``, from one CAM++ pass."""
        if self.training or not self.single_pass:
            return super().get_embeddings(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
        model = self.embedding_model
        window = binary_segmentations.sliding_window
        masks = np.nan_to_num(binary_segmentations.data, nan=0.0).astype(np.float32)
        if exclude_overlap:
            # As pyannote: leave out overlapped frames unless too little of the speaker would remain.
            num_frames = masks.shape[1]
            min_num_frames = math.ceil(
                num_frames * self._embedding.min_num_samples / (window.duration * self._embedding.sample_rate)
            )
            clean = masks * (masks.sum(axis=2, keepdims=True) < 2)
            masks = np.where(clean.sum(axis=1, keepdims=True) > min_num_frames, clean, masks)
        waveform, _ = self._audio(file)
        starts = window.start + window.step * np.arange(len(masks))

        def progress(completed: int, total: int) -> None:
            if hook is not None:
                hook("embeddings", None, total=total, completed=completed)

        weights = masks.transpose(0, 2, 1).copy()
        embeddings, file[FEATURES] = model.embed_recording(  # the features for the resegmentation, after the clustering
            waveform.to(model.device), starts, window.duration, weights, self.embedding_batch_size, progress
        )
        return embeddings


def _new_labels(labels: list[str], count: int) -> list[str]:
    """``count`` labels after pyannote's ``SPEAKER_00``, ``SPEAKER_01``... that ``labels`` does not use."""
    free = (f"SPEAKER_{k:02d}" for k in itertools.count())
    return list(itertools.islice((label for label in free if label not in labels), count))


@dataclass(frozen=True)
class Turn:
    """A speech turn of one speaker, in seconds."""

    speaker: str
    start: float
    end: float


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


def load_pipeline(model: str, token: str | None, device: torch.device, single_pass: bool | None = None) -> Pipeline:
    """Load a diarization pipeline from a hub id or a local folder holding ``config.yaml``.

    ``single_pass``: compute CAM++ embeddings in one pass over each recording (``SpeakerDiarization``);
    ``None``: whenever the pipeline can.
    """
    pipeline = Pipeline.from_pretrained(model, token=token)
    if pipeline is None:
        raise ModelLoadError(
            f"could not load the diarization pipeline {model!r}: for gated pyannote models accept their "
            "conditions on the hub and set HF_TOKEN"
        )
    can = isinstance(pipeline, SpeakerDiarization) and hasattr(pipeline.embedding_model, "embed_recording")
    if single_pass and not can:
        raise ModelLoadError(
            f"DIARIZATION_SINGLE_PASS needs a pipeline with a CAM++ embedding (the offline default), not {model!r}"
        )
    if can:
        pipeline.single_pass = single_pass is not False
    return pipeline.to(device)


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


def diarize(
    pipeline: Pipeline,
    waveform: np.ndarray,
    num_speakers: int | None = None,
    min_speakers: int | None = None,
    max_speakers: int | None = None,
    progress: Progress | None = None,
) -> Diarization:
    """Run ``pipeline`` on a 16 kHz mono waveform; ``progress(step, completed, total)`` follows its batches."""

    artifacts: dict[str, object] = {}

    def hook(step: str, artifact: object, file: object = None, total: int | None = None, completed: int | None = None):
        if progress is not None and total:
            progress(step, min(completed or 0, total), total)
        if artifact is not None and step in ("segmentation", "embeddings"):
            artifacts[step] = artifact

    audio = {"waveform": torch.from_numpy(waveform)[None], "sample_rate": SAMPLE_RATE, "uri": "request"}
    output = pipeline(audio, num_speakers=num_speakers, min_speakers=min_speakers, max_speakers=max_speakers, hook=hook)
    full = getattr(output, "speaker_diarization", output)
    exclusive = getattr(output, "exclusive_speaker_diarization", output)
    turns = [
        Turn(str(speaker), float(segment.start), float(segment.end))
        for segment, _, speaker in exclusive.itertracks(yield_label=True)
    ]
    overlaps = [
        Overlap(
            tuple(str(label) for label in sorted(full.crop(region).labels())), float(region.start), float(region.end)
        )
        for region in full.get_overlap()
    ]
    centroids = getattr(output, "speaker_embeddings", None)  # rows in the order of ``full.labels()``
    labels = [str(label) for label in full.labels()]
    embeddings = {} if centroids is None else dict(zip(labels, centroids, strict=True))
    evidence = None
    if centroids is not None and len(artifacts) == 2:
        duration = len(waveform) / SAMPLE_RATE
        evidence = speaker_evidence(artifacts["segmentation"], artifacts["embeddings"], centroids, labels, duration)
    return Diarization(sorted(turns, key=lambda turn: (turn.start, turn.end)), overlaps, embeddings, evidence)


def _intervals(chunks: Sequence[Chunk], duration: float) -> list[tuple[float, float]]:
    """Fill in missing timestamps from the neighbours so every chunk has a (start, end) interval."""
    intervals = []
    previous_end = 0.0
    for i, chunk in enumerate(chunks):
        start = chunk.start if chunk.start is not None else previous_end
        end = chunk.end
        if end is None:
            following = next((c.start for c in chunks[i + 1 :] if c.start is not None), None)
            end = following if following is not None else duration
        end = max(start, end)
        intervals.append((start, end))
        previous_end = end
    return intervals


def _speaker_for(start: float, end: float, turns: TurnIndex) -> str | None:
    """The speaker whose turns overlap [start, end] most; the nearest turn's speaker when none overlaps."""
    overlap: dict[str, float] = {}
    for turn in turns.overlapping(start, end):
        shared = min(end, turn.end) - max(start, turn.start)
        if shared > 0:
            overlap[turn.speaker] = overlap.get(turn.speaker, 0.0) + shared
    if overlap:
        return max(overlap, key=overlap.get)
    nearest = turns.nearest((start + end) / 2)
    return None if nearest is None else nearest.speaker


def attribute(
    pieces: Sequence[Chunk],
    turns: Sequence[Turn],
    duration: float,
    overlaps: Sequence[Overlap] = (),
    separator: str = " ",
) -> tuple[list[str | None], list[SpeakerSegment]]:
    """The speaker of each piece, and the pieces joined into speaker turns.

    A piece goes to the speaker whose turns overlap it most, else to the one of the nearest turn; inside one of
    the ``overlaps`` it stays with the previous piece's speaker if that speaker is talking there. Word timings
    and turn boundaries are a little off, so a speaker change that lands a few words before the end of the
    previous speaker's sentence is moved to the end of that sentence, and otherwise one that lands a few words
    after a sentence end is moved back to it. Consecutive pieces of one speaker form a
    turn timed by its pieces, ending by the next turn's start. Every piece's text appears in exactly one turn,
    in order, joined by ``separator`` (none for languages written without spaces); nothing is dropped. A speaker
    of the diarization that no piece went to still has turns, without text (``_with_unheard``).
    """
    intervals = _intervals(pieces, duration)
    index = TurnIndex(turns)
    speakers = [_speaker_for(start, end, index) for start, end in intervals]
    speakers = _snap_changes_to_sentence_ends(pieces, _keep_speaker_in_overlaps(speakers, intervals, overlaps))
    segments = _align_to_turns(_group(pieces, speakers, intervals, separator), turns)
    return speakers, _with_unheard(segments, turns, overlaps)


_MIN_UNHEARD_S = 1.0


def _with_unheard(
    segments: list[SpeakerSegment], turns: Sequence[Turn], overlaps: Sequence[Overlap]
) -> list[SpeakerSegment]:
    """``segments`` and, for each speaker of the diarization that no word went to but who speaks
    ``_MIN_UNHEARD_S`` or more (their turns and the overlaps they are in), their speech as turns without text:
    Whisper wrote only the other voice where they talk over someone, or missed their words."""
    heard = {segment.speaker for segment in segments}
    spans: dict[str, list[tuple[float, float]]] = {}
    for turn in turns:
        spans.setdefault(turn.speaker, []).append((turn.start, turn.end))
    for overlap in overlaps:
        for speaker in overlap.speakers:
            spans.setdefault(speaker, []).append((overlap.start, overlap.end))
    unheard = []
    for speaker, regions in spans.items():
        speech = Timeline([Segment(start, end) for start, end in regions]).support()
        if speaker in heard or speech.duration() < _MIN_UNHEARD_S:
            continue
        unheard += [SpeakerSegment(speaker, "", segment.start, segment.end) for segment in speech]
    return sorted(segments + unheard, key=lambda segment: segment.start) if unheard else segments


def _keep_speaker_in_overlaps(
    speakers: list[str | None], intervals: Sequence[tuple[float, float]], overlaps: Sequence[Overlap]
) -> list[str | None]:
    """A piece whose middle lies where several people talk at once, the previous piece's speaker among them,
    stays with that speaker: Whisper follows the voice it was transcribing."""
    speakers = list(speakers)
    starts = [overlap.start for overlap in overlaps]
    for i in range(1, len(speakers)):
        middle = sum(intervals[i]) / 2
        k = bisect.bisect_right(starts, middle) - 1
        if k >= 0 and middle < overlaps[k].end and speakers[i - 1] in overlaps[k].speakers:
            speakers[i] = speakers[i - 1]
    return speakers


_MAX_BOUNDARY_SHIFT_S = 0.5


def _align_to_turns(segments: list[SpeakerSegment], turns: Sequence[Turn]) -> list[SpeakerSegment]:
    """Move each turn's start and end to the closest boundary of its speaker's diarization turns, when one is
    within ``_MAX_BOUNDARY_SHIFT_S`` (the diarization places boundaries more precisely than word alignment), and
    cut what still runs past the diarization turns of that speaker it overlaps (the alignment stretches a last
    word over the pause that follows it)."""

    def closest(time: float, boundaries: list[float]) -> float:
        """The nearest of the sorted ``boundaries`` (the earlier on a tie) if within reach, else ``time``."""
        i = bisect.bisect_left(boundaries, time)
        nearest = min(boundaries[max(0, i - 1) : i + 1], key=lambda boundary: abs(boundary - time), default=time)
        return nearest if abs(nearest - time) <= _MAX_BOUNDARY_SHIFT_S else time

    own_turns = {
        speaker: TurnIndex([t for t in turns if t.speaker == speaker]) for speaker in {t.speaker for t in turns}
    }
    aligned: list[SpeakerSegment] = []
    for segment in segments:
        own = own_turns.get(segment.speaker)
        if own is None:
            start, end = segment.start, segment.end
        else:
            start = closest(segment.start, own.starts)
            end = max(start, closest(segment.end, own.ends))
            held = own.overlapping(start, end)
            if held:
                start, end = max(start, min(turn.start for turn in held)), min(end, max(turn.end for turn in held))
        if aligned and aligned[-1].end > start:
            last = aligned[-1]
            start = max(start, last.start)
            aligned[-1] = SpeakerSegment(last.speaker, last.text, last.start, start)
        aligned.append(SpeakerSegment(segment.speaker, segment.text, start, max(start, end)))
    return aligned


_MAX_WORDS_TO_SENTENCE_END = 3


def _snap_changes_to_sentence_ends(pieces: Sequence[Chunk], speakers: list[str | None]) -> list[str | None]:
    speakers = list(speakers)
    for i in range(1, len(pieces)):
        if speakers[i] == speakers[i - 1] or ends_sentence(pieces[i - 1].text):
            continue
        later = next(
            (j for j in range(i, min(i + _MAX_WORDS_TO_SENTENCE_END, len(pieces))) if ends_sentence(pieces[j].text)),
            None,
        )
        if later is not None and all(speaker == speakers[i] for speaker in speakers[i : later + 1]):
            speakers[i : later + 1] = [speakers[i - 1]] * (later + 1 - i)
            continue
        earlier = next(
            (j for j in range(i - 2, max(-1, i - 2 - _MAX_WORDS_TO_SENTENCE_END), -1) if ends_sentence(pieces[j].text)),
            None,
        )
        if earlier is not None and all(speaker == speakers[i - 1] for speaker in speakers[earlier + 1 : i]):
            speakers[earlier + 1 : i] = [speakers[i]] * (i - 1 - earlier)
    return speakers


def _group(
    pieces: Sequence[Chunk],
    speakers: Sequence[str | None],
    intervals: Sequence[tuple[float, float]],
    separator: str,
) -> list[SpeakerSegment]:
    segments: list[SpeakerSegment] = []
    for piece, speaker, (start, end) in zip(pieces, speakers, intervals, strict=True):
        if segments and segments[-1].speaker == speaker:
            last = segments[-1]
            segments[-1] = SpeakerSegment(
                speaker, f"{last.text}{separator}{piece.text.strip()}".strip(), last.start, end
            )
        else:
            if segments and segments[-1].end > start:
                last = segments[-1]
                segments[-1] = SpeakerSegment(last.speaker, last.text, last.start, max(last.start, start))
            segments.append(SpeakerSegment(speaker, piece.text.strip(), start, end))
    return segments
