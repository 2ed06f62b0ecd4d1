"""Choose the speaker clustering by measurement: the number of speakers found and the DER of each candidate.

    python bench/speaker_count.py ami=../shared/data/ami-dev tune=bench/kokoro/tune flite=bench/corpus \
        sample sample:15 --grid

Each ``NAME=FOLDER`` is a set of recordings with references (``*.stm`` beside ``*.wav``, or ``bench/corpus.py``
JSON); ``sample`` is the pyannote sample, ``sample:15`` its first 15 s. The segmentation and the embeddings of each
recording are computed once by the offline default's pipeline and kept in ``bench/cache/clustering``; every
candidate clustering then runs on the same embeddings, so a grid takes seconds. ``--split-pauses 0.2`` cuts each
local speaker of a window at its pauses before the embeddings (``split_at_pauses``); ``--resegment-grid`` scores
settings of the resegmentation (``resegmentation.Resegmentation``) after the default clustering, ``--missed-grid``
those of the missed-speaker search (``missed_speakers.MissedSpeakers``); ``--separability`` scores no clustering
but how well CAM++ tells the true speakers apart on their own turns (``separability``). Scores per set:
recordings whose number of speakers is right, too low and too high, and the pooled DER of the pipeline's turns
against the reference turns (collar 0, overlap scored).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluate import Reference, pyannote_sample, read_folder
from kokoro import wav_bytes
from metrics import annotation
from pyannote.audio.pipelines.clustering import BaseClustering
from pyannote.core import Segment, SlidingWindowFeature, Timeline
from pyannote.metrics.diarization import DiarizationErrorRate
from pyannote.pipeline.parameter import Integer, Uniform
from sklearn.metrics import roc_auc_score

from config import ModelSettings
from speech.audio import SAMPLE_RATE, decode
from speech.speakers.clustering import SpeakerClustering, merge_similar, spectral_clusters
from speech.speakers.missed_speakers import MissedSpeakers
from speech.speakers.pipeline import FEATURES, load_pipeline
from speech.speakers.resegmentation import Resegmentation, active_frames, runs

CACHE = Path(__file__).resolve().parent / "cache" / "clustering"


def read_set(spec: str) -> tuple[str, list[Reference]]:
    """``sample``, ``sample:SECONDS`` (its beginning) or ``NAME=FOLDER``."""
    if spec == "sample":
        return "sample", [pyannote_sample()]
    if spec.startswith("sample:"):
        return spec, [_beginning(pyannote_sample(), float(spec.split(":")[1]))]
    name, folder = spec.split("=", 1)
    return name, read_folder(Path(folder))


def _beginning(reference: Reference, seconds: float) -> Reference:
    """The first ``seconds`` of a recording, with the reference turns that start in them (cut at the end)."""
    waveform = decode(reference.audio.read_bytes(), 7200, 60).waveform[: int(seconds * SAMPLE_RATE)]
    path = CACHE / f"{reference.name}-{seconds:g}s.wav"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav_bytes(waveform))
    turns = [(who, start, min(end, seconds), text) for who, start, end, text in reference.turns if start < seconds]
    return Reference(path.stem, path, turns)


class CachedPipeline:
    """The default pipeline with its segmentation and embeddings computed once per recording (with the
    resegmentation on, the embeddings once per run: its CAM++ features are kept in memory, not on disk). With
    ``split_pauses`` (seconds), each local speaker of a window is cut at its pauses of that length into speakers of
    their own before the embeddings (a candidate for voices that the segmentation puts in one track)."""

    def __init__(self, single_pass: bool = True, split_pauses: float | None = None) -> None:
        settings = ModelSettings()
        self.pipeline = load_pipeline(settings.diarization_model, settings.token, torch.device("cpu"), single_pass)
        config = yaml.safe_load(Path(settings.diarization_model, "config.yaml").read_text())
        del config["pipeline"]["params"]["clustering"], config["params"]["clustering"]  # not what is cached
        config["pipeline"]["params"].pop("resegment", None)
        config["pipeline"]["params"].pop("missed_speakers", None)
        if not single_pass:
            config["single_pass"] = False
        if split_pauses:
            config["split_pauses"] = split_pauses
        key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
        self.folder = CACHE / key
        self.folder.mkdir(parents=True, exist_ok=True)
        self._segmentations = self.pipeline.get_segmentations
        self._embeddings = self.pipeline.get_embeddings
        self.pipeline.get_segmentations = self._cached("segmentations", self._segmentations)
        if split_pauses:
            frames = round(split_pauses / self.pipeline._segmentation.model.receptive_field.step)
            segmentations = self.pipeline.get_segmentations
            self.pipeline.get_segmentations = lambda file, **kwargs: split_at_pauses(
                segmentations(file, **kwargs), frames
            )
        self._features: dict[str, tuple] = {}
        self.pipeline.get_embeddings = self._cached("embeddings", self._embeddings)
        if single_pass and self.pipeline.resegmentation is not None:
            self.pipeline.get_embeddings = self._with_features

    def _with_features(self, file, *args, **kwargs):
        uri = file["uri"]
        if uri not in self._features:
            embeddings = self._embeddings(file, *args, **kwargs)
            self._features[uri] = (embeddings, file[FEATURES])
        embeddings, file[FEATURES] = self._features[uri]
        return embeddings

    def _cached(self, what: str, compute: Callable) -> Callable:
        def get(file, *args, **kwargs):
            path = self.folder / f"{file['uri']}.{what}.pkl"
            if path.exists():
                return pickle.loads(path.read_bytes())
            value = compute(file, *args, **kwargs)
            path.write_bytes(pickle.dumps(value))
            return value

        return get

    def __call__(self, uri: str, waveform: np.ndarray, clustering=None, **hints):
        if clustering is not None:
            self.pipeline.clustering = clustering
        audio = {"waveform": torch.from_numpy(waveform)[None], "sample_rate": SAMPLE_RATE, "uri": uri}
        return self.pipeline(audio, **hints).speaker_diarization


def split_at_pauses(segmentations: SlidingWindowFeature, frames: int) -> SlidingWindowFeature:
    """Each local speaker's activity in each window cut where it pauses for more than ``frames``: one column per
    run (the frame-wise sum, and so the speaker count, is unchanged)."""
    data = np.nan_to_num(segmentations.data)
    windows = []
    for window in data:
        columns = []
        for activity in window.T:
            active = np.flatnonzero(activity > 0)
            for run in np.split(active, np.flatnonzero(np.diff(active) > frames) + 1) if len(active) else []:
                column = np.zeros_like(activity)
                column[run[0] : run[-1] + 1] = activity[run[0] : run[-1] + 1]
                columns.append(column)
        windows.append(columns)
    split = np.zeros((*data.shape[:2], max(1, *(len(columns) for columns in windows))), dtype=data.dtype)
    for i, columns in enumerate(windows):
        for k, column in enumerate(columns):
            split[i, :, k] = column
    return SlidingWindowFeature(split, segmentations.sliding_window)


@dataclass
class SetScore:
    right: int = 0
    low: int = 0
    high: int = 0
    der: DiarizationErrorRate | None = None

    def line(self) -> str:
        return f"count right {self.right:2d} low {self.low:2d} high {self.high:2d}  DER {abs(self.der):6.1%}"


def score(
    pipeline: CachedPipeline, name: str, references: list[Reference], clustering, verbose: bool, oracle: bool
) -> SetScore:
    result = SetScore(der=DiarizationErrorRate(collar=0.0, skip_overlap=False))
    for reference in references:
        waveform = decode(reference.audio.read_bytes(), 7200, 60).waveform
        truth = reference.speakers
        hints = {"num_speakers": truth} if oracle else {}
        output = pipeline(_uri(name, reference), waveform, clustering, **hints)
        found = len(output.labels())
        der = result.der(
            annotation((speaker, start, end) for speaker, start, end, _ in reference.turns),
            output,
            uem=Timeline([Segment(0.0, len(waveform) / SAMPLE_RATE)]),
        )
        result.right += found == truth
        result.low += found < truth
        result.high += found > truth
        if verbose:
            print(f"    {reference.name:24s} speakers {truth} found {found}  DER {der:6.1%}")
    return result


def _uri(name: str, reference: Reference) -> str:
    recording = hashlib.sha256(reference.audio.read_bytes()).hexdigest()[:8]  # a rebuilt corpus is new
    return f"{name}-{reference.name}-{recording}"


def separability(pipeline: CachedPipeline, name: str, references: list[Reference]) -> None:
    """How well CAM++ tells the reference speakers apart, whatever the segmentation and the clustering do: the
    embedding of each stretch where one reference speaker talks alone (0.5 s or more, from the single pass's
    features), and for the pair of speakers it tells apart worst, the AUC of same-speaker against
    different-speaker cosines (1: every same-speaker pair more alike than every other pair) and their means."""
    model = pipeline.pipeline.embedding_model
    frame = model.frame_seconds
    for reference in references:
        uri = _uri(name, reference)
        pipeline(uri, decode(reference.audio.read_bytes(), 7200, 60).waveform)
        features = pipeline._features[uri][1]
        truth = annotation((who, start, end) for who, start, end, _ in reference.turns)
        active = active_frames(truth, list(truth.labels()), features.shape[-1], frame)
        single = active.sum(axis=1) == 1
        stretches = [s for s in runs(single, active.argmax(axis=1)) if (s.stop - s.start) * frame >= 0.5]
        with torch.inference_mode():
            units = np.concatenate(
                [model.pool(features[:, s][None], torch.ones(1, 1, s.stop - s.start))[0].numpy() for s in stretches]
            )
        units /= np.linalg.norm(units, axis=1, keepdims=True)
        owner = np.array([int(active[s.start].argmax()) for s in stretches])
        cosine = units @ units.T
        pairs = []
        for a, b in itertools.combinations(np.unique(owner), 2):
            same = [cosine[np.ix_(owner == k, owner == k)][np.triu_indices((owner == k).sum(), 1)] for k in (a, b)]
            same = np.concatenate(same)
            other = cosine[np.ix_(owner == a, owner == b)].ravel()
            if len(same):
                auc = roc_auc_score(np.r_[np.ones(len(same)), np.zeros(len(other))], np.r_[same, other])
                pairs.append((auc, same.mean(), other.mean()))
        worst = min(pairs, key=lambda pair: pair[0], default=(np.nan, np.nan, np.nan))
        print(
            f"    {reference.name:24s} stretches {len(stretches):3d}  worst pair AUC {worst[0]:.3f}  "
            f"same {worst[1]:.2f} different {worst[2]:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", metavar="NAME=FOLDER|sample")
    parser.add_argument("--verbose", action="store_true", help="a line per recording")
    parser.add_argument("--grid", action="store_true", help="every candidate, not only the default and the former")
    parser.add_argument("--oracle", action="store_true", help="give each recording its true number of speakers")
    parser.add_argument("--per-window", action="store_true", help="CAM++ per window, as pyannote (not single pass)")
    parser.add_argument("--split-pauses", type=float, metavar="SECONDS", help="cut local speakers at such pauses")
    parser.add_argument("--resegment-grid", action="store_true", help="resegmentation settings, default clustering")
    parser.add_argument("--missed-grid", action="store_true", help="missed-speaker settings, default clustering")
    parser.add_argument("--separability", action="store_true", help="how well CAM++ tells the true speakers apart")
    args = parser.parse_args()
    pipeline = CachedPipeline(single_pass=not args.per_window, split_pauses=args.split_pauses)
    sets = [read_set(spec) for spec in args.sets]
    if args.separability:
        for name, references in sets:
            print(name)
            separability(pipeline, name, references)
        return
    default = pipeline.pipeline.clustering
    if args.resegment_grid:
        trials = resegmentations(default)
    elif args.missed_grid:
        trials = missed_speaker_settings(default)
    else:
        trials = candidates(default, args.grid)
    for label, clustering, *steps in trials:
        for step in steps:  # the pipeline's resegmentation or missed-speaker search
            setattr(pipeline.pipeline, *step)
        print(label)
        for name, references in sets:
            print(f"  {name:12s} {score(pipeline, name, references, clustering, args.verbose, args.oracle).line()}")


def resegmentations(clustering):
    """The default clustering without resegmentation (nor missed speakers), then with each resegmentation setting."""
    yield "no resegmentation", clustering, ("resegmentation", None), ("missed_speakers", None)
    for window, margin, min_run, rounds in itertools.product((1.0, 1.5), (0.1, 0.2, 0.3), (0.3, 1.0), (1, 3)):
        resegmentation = Resegmentation(window=window, margin=margin, min_run=min_run, rounds=rounds)
        yield f"{resegmentation}", clustering, ("resegmentation", resegmentation)
    for min_speech in (0.0, 1.0, 4.0):
        resegmentation = Resegmentation(min_speech=min_speech)
        yield f"{resegmentation}", clustering, ("resegmentation", resegmentation)


def missed_speaker_settings(clustering):
    """The default clustering and resegmentation without the missed-speaker search, then with each of its
    settings (3D-Speaker's: pruning 0.01, 6 neighbours at least, clusters of 4 windows or fewer folded in)."""
    yield "no missed speakers", clustering, ("missed_speakers", None)
    for window, pruning, merge in itertools.product((1.0, 1.5), (0.01, 0.03), (0.6, 0.7, 0.8)):
        missed = MissedSpeakers(window=window, pruning=pruning, merge_similarity=merge)
        yield f"{missed}", clustering, ("missed_speakers", missed)


def candidates(default, grid: bool):
    """The offline default and, with ``grid``, the clusterings it was chosen from: pyannote's agglomerative
    clustering as the bundle had it until 2026-12-06 (every small cluster merged: ``keep_distance`` 2), small
    clusters kept as voices of their own beyond other distances, higher thresholds, and 3D-Speaker's spectral
    clustering."""
    yield "offline default (.bundle config.yaml)", default
    for keep in (0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 2.0) if grid else ():
        clustering = SpeakerClustering()
        clustering.instantiate({"threshold": 0.6, "min_cluster_size": 12, "keep_distance": keep})
        yield f"centroid linkage, threshold 0.6, min size 12, keep small clusters beyond {keep}", clustering
    for threshold, keep in itertools.product((0.7, 0.8), (0.4, 0.6)) if grid else ():
        clustering = SpeakerClustering()
        clustering.instantiate({"threshold": threshold, "min_cluster_size": 12, "keep_distance": keep})
        yield f"centroid linkage, threshold {threshold}, min size 12, keep small clusters beyond {keep}", clustering
    for pruning in (0.012, 0.05, 0.1, 0.2) if grid else ():
        for neighbours in (4, 6, 10):
            for merge in (0.6, 0.7, 0.8):
                clustering = SpectralSpeakerClustering()
                parameters = {"pruning": pruning, "min_neighbours": neighbours, "merge_similarity": merge}
                clustering.instantiate({**parameters, "max_speakers": 10})
                yield f"spectral {parameters}", clustering


class SpectralSpeakerClustering(BaseClustering):
    """3D-Speaker's spectral clustering of CAM++ embeddings: cosine affinities, each row pruned to its
    ``pruning`` share of largest values (at least ``min_neighbours``), the number of speakers at the largest
    eigengap of the graph Laplacian (up to ``max_speakers``), k-means on the eigenvectors; clusters whose centroids
    are within cosine ``merge_similarity`` are merged. ``num_clusters``, ``min_clusters`` and ``max_clusters`` bound
    the count."""

    expects_num_clusters: bool = False

    def __init__(self, metric: str = "cosine", constrained_assignment: bool = False):
        super().__init__(metric=metric, constrained_assignment=constrained_assignment)
        self.pruning = Uniform(0.0, 1.0)
        self.min_neighbours = Integer(1, 20)
        self.merge_similarity = Uniform(0.0, 1.0)
        self.max_speakers = Integer(1, 30)

    def cluster(
        self,
        embeddings: np.ndarray,
        min_clusters: int | None = None,
        max_clusters: int | None = None,
        num_clusters: int | None = None,
    ) -> np.ndarray:
        unit = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
        low = max(1, min_clusters or 1)
        high = min(max_clusters or self.max_speakers, self.max_speakers)
        clusters = spectral_clusters(unit, self.pruning, self.min_neighbours, high, low, num_clusters)
        return clusters if num_clusters else merge_similar(unit, clusters, self.merge_similarity, low)


if __name__ == "__main__":
    main()
