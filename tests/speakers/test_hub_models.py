"""The production configuration by hub id, offline: a community-1-shaped pipeline (pyannote's own class, VBx with
the bundle's PLDA) and Whisper base from a Hugging Face cache, with ``HF_HUB_OFFLINE=1``; and loading failures that
say what to do."""

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SENTENCES, encode, kokoro_dialogue

from speech.audio import SAMPLE_RATE, decode
from tools.hub_cache import COMMUNITY_1, build

REQUESTS = r"""
import json, sys
from handler import EndpointHandler

handler = EndpointHandler()
requests = json.load(open(sys.argv[1]))
out = {
    "class": type(handler.diarization).__mro__[1].__module__ + "." + type(handler.diarization).__mro__[1].__name__,
    "clustering": type(handler.diarization.clustering).__name__,
    "steps": handler.diarization.resegmentation is not None,
    "single_pass": handler.diarization.single_pass,
}
for name, request in requests.items():
    out[name] = handler(request)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("hub"))


def _run(cache: Path, environment: dict, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", **environment}
    return subprocess.run(
        [sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


def test_community_1_and_whisper_base_by_hub_id_offline(hub_cache, sample, tmp_path):
    """Loaded by their ids from the cache: pyannote's own class with VBx, the project's steps on it; the sample
    comes back with its two speakers, every turn with a confidence, and known-speaker references name the voices
    that speak and not one that does not."""
    audio = sample.audio.read_bytes()
    waveform = decode(audio, 60).waveform
    diane = encode(waveform[int(10.78 * SAMPLE_RATE) : int(14.18 * SAMPLE_RATE)], SAMPLE_RATE, "wav", "pcm_s16le")
    sheila = encode(waveform[int(21.93 * SAMPLE_RATE) : int(28.42 * SAMPLE_RATE)], SAMPLE_RATE, "wav", "pcm_s16le")
    absent, _ = kokoro_dialogue([("am_adam", SENTENCES[0])])
    stranger = encode(absent[: 8 * SAMPLE_RATE], SAMPLE_RATE, "wav", "pcm_s16le")
    inputs = base64.b64encode(audio).decode()
    known = {
        "known_speaker_names": ["Diane", "Sheila", "Dan"],
        "known_speaker_references": [base64.b64encode(clip).decode() for clip in (diane, sheila, stranger)],
    }
    requests = {
        "json": {"inputs": inputs, "parameters": {"return_timestamps": "word"}},
        "known": {"inputs": inputs, "parameters": {**known, "response_format": "srt"}},
    }
    (tmp_path / "requests.json").write_text(json.dumps(requests))
    environment = {"DIARIZATION_MODEL": COMMUNITY_1, "ASR_MODEL": "openai/whisper-base"}
    done = _run(hub_cache, environment, REQUESTS, str(tmp_path / "requests.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["class"] == "pyannote.audio.pipelines.speaker_diarization.SpeakerDiarization"
    assert (out["clustering"], out["steps"], out["single_pass"]) == ("VBxClustering", True, True)
    response = out["json"]
    assert len({turn["speaker"] for turn in response["speakers"]}) == 2
    assert all(turn["confidence"] is not None for turn in response["speakers"])
    assert not response["warnings"]
    assert "Diane" in out["known"]["srt"] and "-->" in out["known"]["srt"]
    matches = {match["name"]: match for match in out["known"]["known_speakers"]}
    assert matches["Diane"]["matched"] and matches["Sheila"]["matched"] and not matches["Dan"]["matched"]
    assert {turn["speaker"] for turn in out["known"]["speakers"]} == {"Diane", "Sheila"}


MISSING = r"""
import sys
import torch
from speech.asr.model import Whisper
from speech.errors import ModelLoadError
from speech.speakers.pipeline import load_pipeline
for kind, model in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        if kind == "pipeline":
            load_pipeline(model, None, torch.device("cpu"))
        else:
            Whisper(model, None, torch.device("cpu"), torch.float32)
    except ModelLoadError as error:
        print(error)
"""


def test_a_file_missing_from_the_offline_cache_is_named(hub_cache):
    """A file gone from the cache, a pipeline or a Whisper not in it: the error names the model, the file and what
    to do, not a traceback."""
    snapshot = next((hub_cache / f"models--{COMMUNITY_1.replace('/', '--')}" / "snapshots").iterdir())
    (snapshot / "plda" / "plda.npz").rename(snapshot / "plda" / "moved.npz")
    models = ["pipeline", COMMUNITY_1, "pipeline", "pyannote/no-such-pipeline", "asr", "openai/whisper-large-v3"]
    try:
        done = _run(hub_cache, {}, MISSING, *models)
    finally:
        (snapshot / "plda" / "moved.npz").rename(snapshot / "plda" / "plda.npz")
    plda, unknown, whisper = done.stdout.strip().splitlines()  # nothing else on stdout
    assert COMMUNITY_1 in plda and "plda/plda.npz" in plda and "HF_HUB_OFFLINE" in plda, done.stderr[-2000:]
    assert "pyannote/no-such-pipeline" in unknown and "config.yaml is not in the local" in unknown
    assert "openai/whisper-large-v3" in whisper and "config.json is not in the local" in whisper


@pytest.fixture(scope="module")
def resnet_pipeline(tmp_path_factory) -> Path:
    """A stand-in of community-1 with its shapes: pyannote's class, a WeSpeaker ResNet34 embedding (256-d, random
    weights), VBx with a 128-dimension PLDA (an identity one), the bundle's segmentation."""
    import lightning
    import numpy as np
    import torch
    import yaml
    from pyannote.audio.core.task import Problem, Resolution, Specifications
    from pyannote.audio.models.embedding import WeSpeakerResNet34

    from tools.hub_cache import COMMUNITY_1_CONFIG
    from tools.offline_bundle import BUNDLE_DIR, DIARIZATION_DIR_NAME

    folder = tmp_path_factory.mktemp("resnet-pipeline")
    torch.manual_seed(0)
    model = WeSpeakerResNet34()
    model.specifications = Specifications(problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK, duration=10.0)
    checkpoint = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    model.on_save_checkpoint(checkpoint)
    checkpoint["pytorch-lightning_version"] = lightning.__version__
    (folder / "embedding").mkdir()
    torch.save(checkpoint, folder / "embedding" / "pytorch_model.bin")
    (folder / "plda").mkdir()
    np.savez(folder / "plda" / "xvec_transform.npz", mean1=np.zeros(256), mean2=np.zeros(128), lda=np.eye(256, 128))
    np.savez(folder / "plda" / "plda.npz", mu=np.zeros(128), tr=np.eye(128), psi=np.ones(128))
    shutil.copytree(BUNDLE_DIR / DIARIZATION_DIR_NAME / "segmentation", folder / "segmentation")
    (folder / "config.yaml").write_text(yaml.safe_dump(COMMUNITY_1_CONFIG))
    return folder


def test_the_steps_run_on_a_resnet_embedding(resnet_pipeline, sample_waveform):
    """Any embedding pyannote loads: the resegmentation and missed-speaker search embed their windows' audio, every
    turn has a confidence, and known speakers say that the threshold is not calibrated for this embedding."""
    from config import ModelSettings
    from handler import EndpointHandler

    handler = EndpointHandler(settings=ModelSettings(diarization_model=str(resnet_pipeline)))
    assert handler.diarization.resegmentation is not None and not handler.diarization.single_pass
    clip = encode(sample_waveform[: 10 * SAMPLE_RATE], SAMPLE_RATE, "wav", "pcm_s16le")
    reference = base64.b64encode(
        encode(sample_waveform[7 * SAMPLE_RATE : 10 * SAMPLE_RATE], SAMPLE_RATE, "wav", "pcm_s16le")
    )
    parameters = {"known_speaker_names": ["Diane"], "known_speaker_references": [reference.decode()]}
    response = handler({"inputs": clip, "parameters": parameters})
    assert response["speakers"] and all(turn["confidence"] is not None for turn in response["speakers"])
    assert [warning for warning in response["warnings"] if "diarization pipeline" in warning] == []  # every step ran
    assert any("speaker_match_threshold 0.605 is calibrated for the CAM++" in w for w in response["warnings"])
