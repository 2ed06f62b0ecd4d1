"""How many speakers, and which embedding is whose: clustering of the diarization's speaker embeddings, and
3D-Speaker's spectral clustering (``spectral_clusters``) for the short windows of ``missed_speakers``."""

from __future__ import annotations

import numpy as np
from pyannote.audio.pipelines.clustering import BaseClustering
from pyannote.pipeline.parameter import Integer, Uniform
from scipy.cluster.hierarchy import fcluster, linkage
from sklearn.cluster import KMeans

MIN_SHARE = 0.01
"""The share of the embeddings below which a cluster is small whatever its size: over 1,200 embeddings (about 10
minutes of conversation) it is more than pyannote's ``min_cluster_size`` of 12, so shorter recordings are
clustered as before."""


class SpeakerClustering(BaseClustering):
    """pyannote's agglomerative clustering (centroid linkage of unit embeddings, stopped at ``threshold``) that
    keeps a speaker who says little.

    pyannote merges every cluster of fewer than ``min_cluster_size`` embeddings (at most a tenth of them) into the
    nearest large one, so a voice heard for a few seconds in a meeting disappears into another speaker. Here a
    small cluster joins the nearest larger one only if it sounds like it (cosine distance of the centroids at most
    ``keep_distance``); otherwise it is a voice of its own. On long recordings a cluster is also small below
    ``MIN_SHARE`` of the embeddings: the blends of overlapped speech that the cut leaves apart grow with the
    recording, and past a few hundred they would pass any fixed size. ``num_clusters``, ``min_clusters`` and
    ``max_clusters`` are hard constraints: the dendrogram is then cut where it gives that many large clusters (or
    that many).
    """

    expects_num_clusters: bool = False

    def __init__(self, metric: str = "cosine", constrained_assignment: bool = False):
        super().__init__(metric=metric, constrained_assignment=constrained_assignment)
        self.threshold = Uniform(0.0, 2.0)
        self.min_cluster_size = Integer(1, 20)
        self.keep_distance = Uniform(0.0, 2.0)

    def cluster(
        self,
        embeddings: np.ndarray,
        min_clusters: int | None = None,
        max_clusters: int | None = None,
        num_clusters: int | None = None,
    ) -> np.ndarray:
        count = len(embeddings)
        if count == 1:
            return np.zeros(1, dtype=int)
        unit = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
        linked = Dendrogram(unit)
        smallest = max(min(self.min_cluster_size, max(1, round(0.1 * count))), round(MIN_SHARE * count))
        clusters = linked.cut(self.threshold, "distance")
        clusters = merge_small(unit, clusters, smallest, self.keep_distance)
        found = clusters.max() + 1
        wanted = (
            num_clusters
            or (min_clusters if min_clusters and found < min_clusters else None)
            or (max_clusters if max_clusters and found > max_clusters else None)
        )
        if wanted is not None and found != wanted:
            # As pyannote: the first cut of the dendrogram with that many large clusters, the small ones merged;
            # if none has, the first cut with as many clusters, its smallest merged down to that many.
            fallback = None
            for size in range(wanted, len(linked.points) + 1):
                cut = linked.cut(size, "maxclust")
                if (np.bincount(cut) >= smallest).sum() == wanted:
                    return merge_small(unit, cut, smallest)
                if fallback is None and cut.max() + 1 >= wanted:
                    fallback = cut
            clusters = _fewest(unit, fallback, wanted) if fallback is not None else clusters
        return np.unique(clusters, return_inverse=True)[1]


MAX_LINKED = 4000
"""Embeddings the dendrogram is built on at most: its distances take n * (n - 1) / 2 doubles (64 MB for 4000; 0.5 GB
for the 11,000 of a 2-hour meeting, quadratic beyond)."""


class Dendrogram:
    """Centroid linkage of unit embeddings; of an evenly spaced ``MAX_LINKED`` of them when there are more (the
    windows overlap, so neighbours sound alike), each other embedding then taking the cluster of the nearest
    centroid of a cut."""

    def __init__(self, unit: np.ndarray):
        self.unit = unit
        self.points = np.linspace(0, len(unit) - 1, min(len(unit), MAX_LINKED)).round().astype(int)
        self.linkage = linkage(unit[self.points], method="centroid", metric="euclidean")

    def cut(self, t: float, criterion: str) -> np.ndarray:
        """Each embedding's cluster (from 0) in scipy's ``fcluster(linkage, t, criterion)``."""
        linked = fcluster(self.linkage, t, criterion=criterion) - 1
        if len(self.points) == len(self.unit):
            return linked
        return np.argmax(self.unit @ centroids(self.unit[self.points], linked).T, axis=1)


def centroid(members: np.ndarray) -> np.ndarray:
    """The unit-length mean of unit embeddings."""
    mean = members.mean(axis=0)
    return mean / np.linalg.norm(mean)


def centroids(unit: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    """The centroid of each cluster of the ``unit`` embeddings, labelled 0 to n - 1."""
    return np.stack([centroid(unit[clusters == label]) for label in range(clusters.max() + 1)])


def merge_small(unit: np.ndarray, clusters: np.ndarray, smallest: int, within: float = 2.0) -> np.ndarray:
    """Clusters of fewer than ``smallest`` members, largest first, join the nearest cluster kept so far when its
    centroid is within ``within`` (cosine distance; 2 always), else are kept. Labels renumbered from 0."""
    clusters = clusters.copy()
    labels, sizes = np.unique(clusters, return_counts=True)
    order = np.argsort(-sizes, kind="stable")
    kept = [label for label, size in zip(labels[order], sizes[order], strict=True) if size >= smallest]
    if not kept:
        return np.zeros_like(clusters)
    for label in labels[order]:
        if label in kept:
            continue
        own = centroid(unit[clusters == label])
        similarity = [float(centroid(unit[clusters == other]) @ own) for other in kept]
        nearest = int(np.argmax(similarity))
        if 1.0 - similarity[nearest] <= within:
            clusters[clusters == label] = kept[nearest]
        else:
            kept.append(label)
    return np.unique(clusters, return_inverse=True)[1]


def spectral_clusters(
    unit: np.ndarray,
    pruning: float,
    min_neighbours: int,
    max_clusters: int,
    min_clusters: int = 1,
    num_clusters: int | None = None,
) -> np.ndarray:
    """3D-Speaker's spectral clustering of unit embeddings: cosine affinities, each row pruned to its ``pruning``
    share of largest values (at least ``min_neighbours``), as many clusters as the largest eigengap of the graph
    Laplacian says (from ``min_clusters`` to ``max_clusters``; ``num_clusters`` if given), k-means on the
    eigenvectors. Labels 0 to n - 1."""
    count = len(unit)
    if count <= 2:
        return np.zeros(count, dtype=int)
    affinity = unit @ unit.T
    dropped = min(int((1 - pruning) * count), count - min_neighbours)
    if dropped > 0:
        lowest = np.argsort(affinity, axis=1)[:, :dropped]
        np.put_along_axis(affinity, lowest, 0.0, axis=1)
    affinity = 0.5 * (affinity + affinity.T)
    np.fill_diagonal(affinity, 0.0)
    laplacian = np.diag(np.abs(affinity).sum(axis=1)) - affinity
    eigenvalues, eigenvectors = np.linalg.eigh(laplacian)
    if num_clusters:
        wanted = min(num_clusters, count)
    else:
        low, high = max(1, min_clusters), min(count - 1, max_clusters)
        gaps = np.diff(eigenvalues[low - 1 : high + 1])
        wanted = int(np.argmax(gaps)) + low if len(gaps) else low
    if wanted == 1:
        return np.zeros(count, dtype=int)
    clusters = KMeans(wanted, n_init=10, random_state=0).fit_predict(eigenvectors[:, :wanted])
    return np.unique(clusters, return_inverse=True)[1]


def merge_similar(unit: np.ndarray, clusters: np.ndarray, similarity: float, fewest: int = 1) -> np.ndarray:
    """Merge the two clusters with the most similar centroids while that cosine is above ``similarity`` and more
    than ``fewest`` are left. Labels renumbered from 0."""
    clusters = np.unique(clusters, return_inverse=True)[1]
    while clusters.max() + 1 > fewest:
        means = centroids(unit, clusters)
        cosine = means @ means.T
        np.fill_diagonal(cosine, -np.inf)
        a, b = np.unravel_index(int(np.argmax(cosine)), cosine.shape)
        if cosine[a, b] < similarity:
            break
        clusters[clusters == b] = a
        clusters = np.unique(clusters, return_inverse=True)[1]
    return clusters


def _fewest(unit: np.ndarray, clusters: np.ndarray, wanted: int) -> np.ndarray:
    """Merge the smallest cluster into the one with the nearest centroid until ``wanted`` are left."""
    clusters = np.unique(clusters, return_inverse=True)[1]
    while clusters.max() + 1 > wanted:
        sizes = np.bincount(clusters)
        smallest = int(np.argmin(sizes))
        means = centroids(unit, clusters)
        similarity = means @ means[smallest]
        similarity[smallest] = -np.inf
        clusters[clusters == smallest] = int(np.argmax(similarity))
        clusters = np.unique(clusters, return_inverse=True)[1]
    return clusters
