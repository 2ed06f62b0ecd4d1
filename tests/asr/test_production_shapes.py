"""The production models' shapes through the endpoint: large-v3 (128 mel bins, 51,866 tokens with ``<|yue|>``, its
token ids and alignment heads), large-v3-turbo (a 4-layer decoder) and a distil-large-v3-style draft, as random-weight
checkpoints (``whisper_shapes``). Their text is noise; what is checked is that every path answers, well formed."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLE_RATE, encode
from transformers.models.whisper.tokenization_whisper import LANGUAGES
from whisper_shapes import LARGE_V3, LARGE_V3_IDS, LARGE_V3_TURBO, MEL_BINS, VOCAB_SIZE, build_draft, build_whisper

from config import ModelSettings
from handler import EndpointHandler
from service.streaming import TextDelta
from tools.offline_bundle import BASE_DIR_NAME, BUNDLE_DIR


@pytest.fixture(scope="session")
def production_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """large-v3, large-v3-turbo and the draft, built offline from the bundle's whisper-base tokenizer."""
    folder = tmp_path_factory.mktemp("production-whisper")
    base = BUNDLE_DIR / BASE_DIR_NAME
    return {
        "large-v3": build_whisper(LARGE_V3, base, folder / LARGE_V3.name),
        "large-v3-turbo": build_whisper(LARGE_V3_TURBO, base, folder / LARGE_V3_TURBO.name),
        "draft": build_draft(folder / "distil-large-v3"),
    }


@pytest.fixture(scope="module", params=["large-v3", "large-v3-turbo"])
def endpoint(request, production_checkpoints) -> EndpointHandler:
    """The endpoint with ``ASR_MODEL`` a production shape, the draft as ``ASSISTANT_MODEL``, the default diarization."""
    checkpoints = production_checkpoints
    settings = ModelSettings(asr_model=str(checkpoints[request.param]), assistant_model=str(checkpoints["draft"]))
    return EndpointHandler(settings=settings)


@pytest.fixture(scope="module")
def clip(sample_waveform) -> bytes:
    """6 s of the pyannote sample, speech from its start (a random model dates its words there), two speakers (a
    random model decodes every window to its token limit)."""
    return encode(sample_waveform[int(6.8 * SAMPLE_RATE) : int(12.8 * SAMPLE_RATE)], SAMPLE_RATE, "wav", "pcm_s16le")


def _well_formed(response: dict, duration: float) -> None:
    """A response with text, chunks timed inside the clip, and words in order, each with a speaker."""
    assert isinstance(response["text"], str) and response["text"].strip()
    assert response["chunks"] and response["speakers"]
    for chunk in response["chunks"]:
        start, end = chunk["timestamp"]
        assert 0 <= start <= end <= duration + 0.02
    starts = [word["start"] for word in response.get("words", [])]
    assert starts == sorted(starts)
    for word in response.get("words", []):
        assert 0 <= word["start"] <= word["end"] <= duration + 0.02
        assert word["speaker"] is not None


def test_the_checkpoints_have_large_v3s_shapes(endpoint):
    """What the endpoint loaded: large-v3's mel bins, vocabulary, special tokens, decoder depth, alignment heads."""
    whisper = endpoint.whisper
    config, generation = whisper.model.config, whisper.generation_config
    assert config.num_mel_bins == whisper.processor.feature_extractor.feature_size == MEL_BINS
    assert config.vocab_size == len(whisper.processor.tokenizer) == VOCAB_SIZE
    ids = whisper.processor.tokenizer.convert_tokens_to_ids(list(LARGE_V3_IDS))
    assert dict(zip(LARGE_V3_IDS, ids, strict=True)) == LARGE_V3_IDS
    assert len(generation.lang_to_id) == 100 and generation.lang_to_id["<|yue|>"] == LARGE_V3_IDS["<|yue|>"]
    assert whisper.timestamp_begin == LARGE_V3_IDS["<|0.00|>"]
    assert whisper.prompt("yue", "translate") == [50258, 50358, 50359]
    shape = LARGE_V3 if config.decoder_layers == LARGE_V3.decoder_layers else LARGE_V3_TURBO
    assert [tuple(head) for head in generation.alignment_heads] == list(shape.alignment_heads)
    assert whisper.assistant.config.decoder_layers == 2 and not whisper.model.draft_encodes


def test_plain_with_word_timestamps_and_language_detection(endpoint, clip):
    response = endpoint({"inputs": clip, "parameters": {"assisted": False, "return_timestamps": "word"}})
    _well_formed(response, 6.0)
    assert response["words"]
    assert response["language"] in LANGUAGES
    assert response["decoding"]["assisted_windows"] == 0


def test_assisted_gives_the_plain_text(endpoint, clip):
    """The draft's drafts are checked by the model: the same words, times and speakers as plain decoding."""
    parameters = {"return_timestamps": "word", "language": "en"}
    assisted = endpoint({"inputs": clip, "parameters": {**parameters, "assisted": True}})
    plain = endpoint({"inputs": clip, "parameters": {**parameters, "assisted": False}})
    _well_formed(assisted, 6.0)
    decoding = assisted["decoding"]
    assert decoding["assisted_windows"] == decoding["windows"] == 1
    assert decoding["drafted_tokens"] > 0
    assert assisted["words"] == plain["words"]


@pytest.mark.parametrize("assisted", [False, True])
def test_windows_batched_or_assisted_one_at_a_time(endpoint, clip, assisted):
    """5 s windows: two windows decoded in one batch, or with the assistant one after the other."""
    response = endpoint({"inputs": clip, "parameters": {"chunk_length_s": 5, "assisted": assisted}})
    _well_formed(response, 6.0)
    decoding = response["decoding"]
    assert decoding["windows"] == 2
    assert decoding["assisted_windows"] == (2 if assisted else 0)


@pytest.mark.parametrize(("language", "task"), [("yue", "transcribe"), ("fr", "translate")])
def test_a_language_and_translation(endpoint, clip, language, task):
    """Cantonese, large-v3's new language token, and translation from French."""
    response = endpoint({"inputs": clip, "parameters": {"language": language, "task": task}})
    _well_formed(response, 6.0)
    assert response["language"] == response["parameters"]["language"] == language
    assert response["parameters"]["task"] == task


def test_streaming(endpoint, clip):
    """Window by window, the text goes out as deltas that add up to the response's text."""
    events: list = []
    response = endpoint({"inputs": clip, "parameters": {"chunk_length_s": 5, "batch_size": 1}}, emit=events.append)
    _well_formed(response, 6.0)
    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    assert len(deltas) >= 1
    assert "".join(deltas) == response["text"]


PRODUCTION = r"""
import json, sys
from handler import EndpointHandler

handler = EndpointHandler()
response = handler({"inputs": open(sys.argv[1], "rb").read(), "parameters": {"assisted": True}})
print(json.dumps({"mel_bins": handler.whisper.model.config.num_mel_bins, "assisted": response["decoding"]["assisted"],
                  "speakers": len(response["speakers"]), "clustering": type(handler.diarization.clustering).__name__}))
"""


def test_the_production_configuration_by_hub_id_offline(production_checkpoints, clip, tmp_path):
    """ASR_MODEL=openai/whisper-large-v3, ASSISTANT_MODEL=distil-whisper/distil-large-v3 and
    DIARIZATION_MODEL=pyannote/speaker-diarization-community-1, their stand-ins in a Hugging Face cache, loaded by id
    with HF_HUB_OFFLINE=1: an assisted request answers."""
    import json
    import os
    import subprocess
    import sys

    from conftest import ROOT

    from tools.hub_cache import COMMUNITY_1, add_repository, build, folder_files

    cache = build(tmp_path / "hub")
    add_repository(cache, "openai/whisper-large-v3", folder_files(production_checkpoints["large-v3"]))
    add_repository(cache, "distil-whisper/distil-large-v3", folder_files(production_checkpoints["draft"]))
    (tmp_path / "clip.wav").write_bytes(clip)
    models = {
        "ASR_MODEL": "openai/whisper-large-v3",
        "ASSISTANT_MODEL": "distil-whisper/distil-large-v3",
        "DIARIZATION_MODEL": COMMUNITY_1,
    }
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", **models}
    done = subprocess.run(
        [sys.executable, "-c", PRODUCTION, str(tmp_path / "clip.wav")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out == {"mel_bins": MEL_BINS, "assisted": True, "speakers": out["speakers"], "clustering": "VBxClustering"}
    assert out["speakers"] > 0
