"""A Hugging Face hub cache made from the offline bundle, so that the production configuration's hub ids load with
``HF_HUB_OFFLINE=1`` and nothing downloaded:

- ``pyannote/speaker-diarization-community-1``: laid out as community-1 is (pyannote's own
  ``pyannote.audio.pipelines.SpeakerDiarization``, ``VBxClustering`` with community-1's parameters,
  ``$model/segmentation``, ``$model/embedding``, ``$model/plda``), holding the bundle's segmentation-3.0, CAM++ and
  its PLDA;
- ``openai/whisper-base`` and ``openai/whisper-tiny.en``: the bundle's Whisper checkpoints.

    python -m tools.hub_cache CACHE_DIR
    HF_HUB_CACHE=CACHE_DIR HF_HUB_OFFLINE=1 DIARIZATION_MODEL=pyannote/speaker-diarization-community-1 \\
        ASR_MODEL=openai/whisper-base python -m service.cli transcribe
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path

import yaml

from tools.offline_bundle import BASE_DIR_NAME, BUNDLE_DIR, DIARIZATION_DIR_NAME, WHISPER_DIR_NAME

COMMUNITY_1 = "pyannote/speaker-diarization-community-1"
COMMUNITY_1_CONFIG = {
    "version": "4.0.0",
    "pipeline": {
        "name": "pyannote.audio.pipelines.SpeakerDiarization",
        "params": {
            "clustering": "VBxClustering",
            "embedding": "$model/embedding",
            "embedding_batch_size": 32,
            "embedding_exclude_overlap": True,
            "plda": "$model/plda",
            "segmentation": "$model/segmentation",
            "segmentation_batch_size": 32,
        },
    },
    "params": {
        "clustering": {"threshold": 0.6, "Fa": 0.07, "Fb": 0.8},
        "segmentation": {"min_duration_off": 0.0},
    },
}
"""community-1's ``config.yaml`` (pyannote.audio 4)."""


def add_repository(cache: Path, repo_id: str, files: dict[str, Path | bytes]) -> Path:
    """Put ``files`` (path in the repository -> a file to copy, or its bytes) into ``cache`` as the snapshot of
    ``repo_id``'s main branch, laid out as ``huggingface_hub`` keeps downloads. Returns the snapshot folder."""
    repository = cache / f"models--{repo_id.replace('/', '--')}"
    digest = hashlib.sha1()
    for name in sorted(files):
        digest.update(name.encode())
    commit = digest.hexdigest()
    snapshot = repository / "snapshots" / commit
    shutil.rmtree(repository, ignore_errors=True)
    for name, source in files.items():
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(source, bytes):
            target.write_bytes(source)
        else:
            shutil.copyfile(source, target)
    (repository / "refs").mkdir(parents=True)
    (repository / "refs" / "main").write_text(commit)
    return snapshot


def folder_files(folder: Path) -> dict[str, Path]:
    return {str(path.relative_to(folder)): path for path in sorted(folder.rglob("*")) if path.is_file()}


def build(cache: Path, bundle: Path = BUNDLE_DIR) -> Path:
    """Write the cache's repositories from ``bundle`` (built by ``python -m tools.offline_bundle``)."""
    diarization = bundle / DIARIZATION_DIR_NAME
    parts = {
        name: path
        for name, path in folder_files(diarization).items()
        if name.split("/")[0] in ("segmentation", "embedding", "plda")
    }
    config = yaml.safe_dump(COMMUNITY_1_CONFIG, sort_keys=False).encode()
    add_repository(cache, COMMUNITY_1, {**parts, "config.yaml": config})
    add_repository(cache, "openai/whisper-base", folder_files(bundle / BASE_DIR_NAME))
    add_repository(cache, "openai/whisper-tiny.en", folder_files(bundle / WHISPER_DIR_NAME))
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", type=Path, help="the cache folder (HF_HUB_CACHE)")
    parser.add_argument("--bundle-dir", type=Path, default=BUNDLE_DIR)
    args = parser.parse_args()
    print(f"hub cache ready: {build(args.cache, args.bundle_dir)}")


if __name__ == "__main__":
    main()
