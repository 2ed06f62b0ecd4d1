"""The pyannote diarization pipeline: loading it (a folder or a hub id), the project's subclass (single pass,
missed speakers, resegmentation) that pyannote's own class is adopted into, and running it on a waveform."""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import TYPE_CHECKING

import numpy as np
import torch
from pyannote.audio import Pipeline
from pyannote.audio.core.plda import PLDA
from pyannote.audio.pipelines import SpeakerDiarization as PyannoteSpeakerDiarization
from pyannote.core import SlidingWindowFeature

from speech.audio import SAMPLE_RATE, float_samples
from speech.errors import ModelLoadError
from speech.hub import loading, pipeline_files
from speech.speakers.clustering import SpeakerClustering
from speech.speakers.confidence import speaker_evidence
from speech.speakers.missed_speakers import MissedSpeakers
from speech.speakers.resegmentation import Resegmentation
from speech.speakers.voice_windows import AudioWindows, FeatureWindows, VoiceWindows
from speech.types import Diarization, Overlap, Progress, Turn

if TYPE_CHECKING:  # CAM++ (speakerlab) is imported only by a pipeline that uses it
    from speech.speakers.campplus import RecordingFeatures

FEATURES = "campplus_features"
"""Where the single pass leaves the recording's CAM++ features in pyannote's ``file``."""


class NoPLDA(PLDA):
    """Stands in for a PLDA that an embedding model does not have; only non-VBx clustering may use it."""

    def __init__(self) -> None:
        pass

    def __call__(self, embeddings: np.ndarray) -> np.ndarray:
        raise RuntimeError("this pipeline has no PLDA; use a clustering other than VBxClustering")


class SpeakerDiarization(PyannoteSpeakerDiarization):
    """pyannote's speaker diarization with the project's steps after the clustering, for any embedding model.

    ``plda=None`` is allowed with any clustering but ``VBxClustering``, which needs a trained PLDA.
    ``clustering``: one of pyannote's, or ``SpeakerClustering`` (``speaker_clustering``; the offline default's).
    With ``missed_speakers``, short windows of the recording first add the voices the clustering missed
    (``missed_speakers.MissedSpeakers``; not when ``num_speakers`` is given, and up to ``max_speakers``); with
    ``resegment`` they then correct who speaks when (``resegmentation.Resegmentation``). With ``single_pass`` set
    (CAM++ only, see ``load_pipeline``), the embedding network runs once over the recording instead of once per
    window (``CAMPPlusEmbedding.embed_recording``) and the steps pool their windows from that pass's features;
    otherwise they embed their windows' audio (``voice_windows``). ``adopt`` gives a pipeline of pyannote's own
    class (community-1's) these steps.
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

    @classmethod
    def adopt(cls, pipeline: PyannoteSpeakerDiarization, steps: bool = True) -> SpeakerDiarization:
        """``pipeline`` (pyannote's class, as loaded: models, clustering, PLDA, parameters) as this class, with the
        missed-speaker search and the resegmentation when ``steps``."""
        pipeline.__class__ = cls
        pipeline.resegmentation = Resegmentation() if steps else None
        pipeline.missed_speakers = MissedSpeakers() if steps else None
        return pipeline

    @property
    def embedding_model(self) -> torch.nn.Module | None:
        return _embedding_model(self)

    def voice_windows(self, file, features: RecordingFeatures | None = None) -> VoiceWindows:
        """The recording's windows for the steps: pooled from the single pass's ``features``, or from its audio."""
        if features is not None:
            return FeatureWindows(self.embedding_model, features)
        waveform, sample_rate = self._audio(file)
        return AudioWindows(self._embedding, waveform, sample_rate, self.embedding_batch_size)

    def apply(self, file, *args, **kwargs):
        """pyannote's diarization, then the missed speakers and the resegmentation."""
        output = super().apply(file, *args, **kwargs)
        features = file.pop(FEATURES, None)
        if self.resegmentation is None or getattr(output, "speaker_embeddings", None) is None:
            return output
        diarization = output.speaker_diarization
        labels = list(diarization.labels())
        if not labels:  # no speech
            return output
        centroids = output.speaker_embeddings[: len(labels)]
        voices = self.voice_windows(file, features)
        if self.missed_speakers is not None and kwargs.get("num_speakers") is None:
            room = None if kwargs.get("max_speakers") is None else max(0, kwargs["max_speakers"] - len(labels))
            missed = self.missed_speakers(voices, diarization, centroids, room)
            if len(missed):  # scaled like the clustering's centroids
                labels += _new_labels(labels, len(missed))
                centroids = np.vstack([centroids, missed * np.linalg.norm(centroids, axis=1).mean()])
        output.speaker_diarization, output.exclusive_speaker_diarization = self.resegmentation(
            voices, diarization, output.exclusive_speaker_diarization, centroids, labels
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
        masks = binary_segmentations.data > 0  # binary, NaN where a window was not stitched: as pyannote's 0 or 1
        if exclude_overlap:
            # As pyannote: leave out overlapped frames unless too little of the speaker would remain.
            num_frames = masks.shape[1]
            min_num_frames = math.ceil(
                num_frames * self._embedding.min_num_samples / (window.duration * self._embedding.sample_rate)
            )
            clean = masks & (masks.sum(axis=2, keepdims=True, dtype=np.uint8) < 2)
            masks = np.where(clean.sum(axis=1, keepdims=True) > min_num_frames, clean, masks)
        waveform, _ = self._audio(file)
        starts = window.start + window.step * np.arange(len(masks))

        def progress(completed: int, total: int) -> None:
            if hook is not None:
                hook("embeddings", None, total=total, completed=completed)

        weights = masks.transpose(0, 2, 1)
        embeddings, file[FEATURES] = model.embed_recording(  # the features for the resegmentation, after the clustering
            waveform.to(model.device), starts, window.duration, weights, self.embedding_batch_size, progress
        )
        return embeddings

    def reconstruct(
        self, segmentations: SlidingWindowFeature, hard_clusters: np.ndarray, count: SlidingWindowFeature
    ) -> SlidingWindowFeature:
        """pyannote's, with the clustered segmentations at the segmentations' dtype, not float64 (2 hours, 3 speakers:
        50 MB, not twice 100)."""
        num_chunks, num_frames, _ = segmentations.data.shape
        shape = (num_chunks, num_frames, np.max(hard_clusters) + 1)
        clustered = np.full(shape, np.nan, dtype=segmentations.data.dtype)
        for c, (cluster, segmentation) in enumerate(zip(hard_clusters, segmentations.data, strict=True)):
            for k in np.unique(cluster[cluster != -2]):
                clustered[c, :, k] = np.max(segmentation[:, cluster == k], axis=1)
        return self.to_diarization(SlidingWindowFeature(clustered, segmentations.sliding_window), count)


def _new_labels(labels: list[str], count: int) -> list[str]:
    """``count`` labels after pyannote's ``SPEAKER_00``, ``SPEAKER_01``... that ``labels`` does not use."""
    free = (f"SPEAKER_{k:02d}" for k in itertools.count())
    return list(itertools.islice((label for label in free if label not in labels), count))


def load_pipeline(
    model: str, token: str | None, device: torch.device, single_pass: bool | None = None, steps: bool = True
) -> Pipeline:
    """Load a diarization pipeline from a hub id or a local folder holding ``config.yaml``.

    A pipeline of pyannote's own ``SpeakerDiarization`` class (community-1's) is adopted into the project's
    subclass, with the missed-speaker search and the resegmentation unless ``steps`` is false (which also turns
    them off in a pipeline of the project's class). ``single_pass``: compute CAM++ embeddings in one pass over
    each recording; ``None``: whenever the pipeline can.
    """
    # pyannote prints its own guess (a private or gated repository) when a download fails: ``loading`` says what
    with loading("diarization pipeline", model, lambda: pipeline_files(model)), redirect_stdout(io.StringIO()):
        pipeline = Pipeline.from_pretrained(model, token=token)
    if pipeline is None:
        raise ModelLoadError(
            f"could not load the diarization pipeline {model!r}: for gated pyannote models accept their "
            "conditions on the hub and set HF_TOKEN"
        )
    if type(pipeline) is PyannoteSpeakerDiarization:  # a subclass of another project keeps its own behaviour
        pipeline = SpeakerDiarization.adopt(pipeline, steps)
    elif isinstance(pipeline, SpeakerDiarization) and not steps:
        pipeline.resegmentation = pipeline.missed_speakers = None
    can = isinstance(pipeline, SpeakerDiarization) and hasattr(pipeline.embedding_model, "embed_recording")
    if single_pass and not can:
        raise ModelLoadError(
            f"DIARIZATION_SINGLE_PASS needs a pipeline with a CAM++ embedding (the offline default), not {model!r}"
        )
    if can:
        pipeline.single_pass = single_pass is not False
    for model in (getattr(getattr(pipeline, "_segmentation", None), "model", None), _embedding_model(pipeline)):
        if isinstance(model, torch.nn.Module):
            model.register_forward_pre_hook(_float_input, with_kwargs=True)
    return pipeline.to(device)


def _embedding_model(pipeline: Pipeline) -> torch.nn.Module | None:
    return getattr(getattr(pipeline, "_embedding", None), "model_", None)


def _float_input(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """The pipeline's models take 16-bit PCM waveforms too (``diarize``'s), scaled batch by batch."""
    return ((float_samples(args[0]), *args[1:]), kwargs) if args else None


def diarize(
    pipeline: Pipeline,
    waveform: np.ndarray,
    num_speakers: int | None = None,
    min_speakers: int | None = None,
    max_speakers: int | None = None,
    progress: Progress | None = None,
) -> Diarization:
    """Run ``pipeline`` on a 16 kHz mono waveform (float32, or 16-bit PCM with a pipeline of ``load_pipeline``'s);
    ``progress(step, completed, total)`` follows its batches."""

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
    notes = []
    if not isinstance(pipeline, SpeakerDiarization):
        notes.append(
            f"the diarization pipeline is a {type(pipeline).__name__}, not pyannote's SpeakerDiarization: "
            "no missed-speaker search or resegmentation"
        )
    if centroids is None:
        notes.append("the diarization pipeline gives no speaker embeddings: no confidence, names or voiceprints")
    turns.sort(key=lambda turn: (turn.start, turn.end))
    return Diarization(turns, overlaps, embeddings, evidence, tuple(notes))
