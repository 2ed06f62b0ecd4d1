"""The offline default's clustering: a voice heard little is kept, an echo of a known voice is not (nor a blend that
recurs through hours), hints bind; the spectral clustering of the missed-speaker search counts by the eigengap."""

import numpy as np
import pytest

from speech.speakers.clustering import SpeakerClustering, merge_similar, spectral_clusters


def _voices(*groups: tuple[np.ndarray, int], seed: int = 0) -> np.ndarray:
    """Embeddings scattered (cosine ~0.9) around each ``(direction, count)``."""
    rng = np.random.default_rng(seed)
    rows = [direction + 0.02 * rng.standard_normal((count, len(direction))) for direction, count in groups]
    return np.concatenate(rows)


def _clustering(keep_distance: float = 0.35) -> SpeakerClustering:
    clustering = SpeakerClustering()
    clustering.instantiate({"threshold": 0.6, "min_cluster_size": 12, "keep_distance": keep_distance})
    return clustering


@pytest.fixture(scope="module")
def directions() -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(1).standard_normal((192, 4)))[0].T


def test_a_voice_heard_a_few_times_is_a_speaker_of_its_own(directions):
    a, b, rare, _ = directions
    embeddings = _voices((a, 40), (b, 40), (rare, 3))
    assert len(set(_clustering().cluster(embeddings.copy(), 1, 83))) == 3
    assert len(set(_clustering(keep_distance=2.0).cluster(embeddings.copy(), 1, 83))) == 2  # pyannote's rule


def test_a_few_embeddings_close_to_a_voice_join_it(directions):
    a, b, _, _ = directions
    near_a = a + 0.3 * b  # cosine distance 0.04 from a
    clusters = _clustering().cluster(_voices((a, 40), (b, 40), (near_a, 3)), 1, 83)
    assert len(set(clusters)) == 2
    assert set(clusters[80:]) == {clusters[0]}


def test_a_blend_that_recurs_through_hours_of_a_meeting_is_not_a_speaker(directions):
    """Blends of two voices (overlapped speech) that the cut keeps apart grow with the recording: past a few hundred
    they are still under 1 % of the embeddings and join the voice they sound like, while a voice of its own that
    says as little is kept."""
    a, b, rare, _ = directions
    blend = a + 0.8 * b  # cosine distance 0.22 from a: apart after the cut, within keep_distance
    clusters = _clustering(keep_distance=0.4).cluster(_voices((a, 6000), (b, 6000), (blend, 100), (rare, 100)))
    assert len(set(clusters)) == 3
    assert set(clusters[12000:12100]) == {clusters[0]}
    assert len(set(clusters[12100:])) == 1 and clusters[12100] not in (clusters[0], clusters[6000])


@pytest.mark.parametrize(
    ("hints", "expected"), [({"num_clusters": 2}, 2), ({"max_clusters": 2}, 2), ({"min_clusters": 4}, 4)]
)
def test_speaker_count_hints_are_hard_constraints(directions, hints, expected):
    a, b, rare, _ = directions
    embeddings = _voices((a, 40), (b, 40), (rare, 3))
    bounds = {"min_clusters": 1, "max_clusters": len(embeddings), **hints}
    if "num_clusters" in hints:
        bounds["min_clusters"] = bounds["max_clusters"] = hints["num_clusters"]
    assert len(set(_clustering().cluster(embeddings, **bounds))) == expected


def test_the_spectral_clustering_counts_voices_by_the_eigengap(directions):
    a, b, c, _ = directions
    embeddings = _voices((a, 30), (b, 30), (c, 30))
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    clusters = spectral_clusters(unit, pruning=0.01, min_neighbours=6, max_clusters=10)
    assert [len(set(clusters[i : i + 30])) for i in (0, 30, 60)] == [1, 1, 1]
    assert len(set(clusters)) == 3
    assert len(set(spectral_clusters(unit, 0.01, 6, 10, num_clusters=2))) == 2
    assert len(set(merge_similar(unit, clusters, similarity=-1.0))) == 1  # all alike enough: one cluster


def test_a_long_recording_is_clustered_on_a_bounded_dendrogram_with_the_same_speakers(directions, monkeypatch):
    """More embeddings than ``MAX_LINKED`` (a meeting of hours): the dendrogram holds an evenly spaced subset and the
    others join the nearest cluster; the speakers are those of the whole dendrogram, hints included."""
    import speech.speakers.clustering as clustering_module

    a, b, c, rare = directions
    embeddings = _voices((a, 300), (b, 200), (c, 100), (rare, 15))
    order = np.random.default_rng(2).permutation(len(embeddings))  # speakers take turns
    embeddings = embeddings[order]
    whole = _clustering().cluster(embeddings)
    monkeypatch.setattr(clustering_module, "MAX_LINKED", 150)
    bounded = _clustering().cluster(embeddings)
    assert len(set(whole)) == 4
    assert len(set(zip(bounded, whole, strict=True))) == 4  # the same partition, whatever the labels
    assert len(set(_clustering().cluster(embeddings, num_clusters=3))) == 3
