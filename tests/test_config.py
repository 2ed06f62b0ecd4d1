"""Request parameters and environment settings."""

from __future__ import annotations

import pytest
import torch

from config import InferenceConfig, ModelSettings
from speech.errors import InvalidParametersError
from tools.offline_bundle import BUNDLE_DIR


def test_defaults_are_the_offline_bundle(monkeypatch):
    for name in ("ASR_MODEL", "ASSISTANT_MODEL", "DIARIZATION_MODEL", "HF_TOKEN", "DEVICE", "DTYPE"):
        monkeypatch.delenv(name, raising=False)
    settings = ModelSettings()
    assert settings.asr_model == str(BUNDLE_DIR / "whisper-tiny.en")
    assert settings.diarization_model == str(BUNDLE_DIR / "speaker-diarization")
    assert settings.assistant_model == str(BUNDLE_DIR / "whisper-tiny.en-draft")
    assert settings.token is None


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("ASR_MODEL", "openai/whisper-large-v3")
    monkeypatch.setenv("ASSISTANT_MODEL", "distil-whisper/distil-large-v3")
    monkeypatch.setenv("DIARIZATION_MODEL", "pyannote/speaker-diarization-community-1")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("DEVICE", "cpu")
    monkeypatch.setenv("DTYPE", "bfloat16")
    settings = ModelSettings()
    assert settings.asr_model == "openai/whisper-large-v3"
    assert settings.assistant_model == "distil-whisper/distil-large-v3"
    assert settings.diarization_model == "pyannote/speaker-diarization-community-1"
    assert settings.token == "hf_secret_value"
    assert "hf_secret_value" not in repr(settings)
    assert settings.torch_device == torch.device("cpu")
    assert settings.torch_dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("asr_model", "assistant"),
    [(str(BUNDLE_DIR / "whisper-base"), str(BUNDLE_DIR / "whisper-base-draft")), ("openai/whisper-large-v3", None)],
)
def test_an_unset_assistant_follows_the_asr_model(monkeypatch, asr_model, assistant):
    monkeypatch.delenv("ASSISTANT_MODEL", raising=False)
    monkeypatch.setenv("ASR_MODEL", asr_model)
    assert ModelSettings().assistant_model == assistant


def test_empty_diarization_model_disables_diarization(monkeypatch):
    monkeypatch.setenv("DIARIZATION_MODEL", "")
    assert ModelSettings().diarization_model is None


def test_auto_dtype_follows_the_device():
    assert ModelSettings(device="cpu").torch_dtype == torch.float32
    assert ModelSettings(device="cuda").torch_dtype == torch.float16


def test_warm_up_defaults_to_gpu_only(monkeypatch):
    assert not ModelSettings(device="cpu").warms_up
    assert ModelSettings(device="cuda").warms_up
    monkeypatch.setenv("WARM_UP", "false")
    assert not ModelSettings(device="cuda").warms_up
    monkeypatch.setenv("WARM_UP", "true")
    assert ModelSettings(device="cpu").warms_up


def test_parameter_defaults():
    config = InferenceConfig.from_parameters(None)
    assert config.task == "transcribe"
    assert config.language is None
    assert config.effective_batch_size == 8
    assert config.assisted == "auto"
    assert config.chunk_length_s == 30.0
    assert config.beam_size == 1
    assert config.return_timestamps == "chunk"


def test_unknown_parameters_are_named():
    with pytest.raises(InvalidParametersError, match=r"unknown parameter 'num_speaker'.*unknown parameter 'beam'"):
        InferenceConfig.from_parameters({"num_speaker": 2, "beam": 5})


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"num_speakers": 2, "min_speakers": 1}, "num_speakers excludes min_speakers and max_speakers"),
        ({"num_speakers": 2, "max_speakers": 3}, "num_speakers excludes min_speakers and max_speakers"),
        ({"min_speakers": 4, "max_speakers": 2}, r"min_speakers \(4\) is larger than max_speakers \(2\)"),
        ({"num_speakers": 0}, "num_speakers: Input should be greater than or equal to 1"),
        ({"min_speakers": -1}, "min_speakers: Input should be greater than or equal to 1"),
        ({"task": "summarize"}, "task: Input should be 'transcribe' or 'translate'"),
        ({"batch_size": "many"}, "batch_size: Input should be a valid integer"),
        ({"chunk_length_s": 60}, "chunk_length_s: Input should be less than or equal to 30"),
        ({"assisted": True, "batch_size": 4}, "batch_size must be 1, not 4"),
        ({"condition_on_previous_text": True, "batch_size": 2}, "condition_on_previous_text .* must be 1, not 2"),
        ({"assisted": "sometimes"}, "assisted: Input should be True, False or 'auto'"),
        ({"beam_size": 0}, "beam_size: Input should be greater than or equal to 1"),
        ({"beam_size": 5, "temperature": 0.4}, "use temperature 0 with beam_size > 1"),
        ({"beam_size": 5, "assisted": True}, "assisted decoding is greedy: beam_size must be 1"),
    ],
)
def test_invalid_parameters(parameters, message):
    with pytest.raises(InvalidParametersError, match=message):
        InferenceConfig.from_parameters(parameters)


def test_speaker_hints_that_agree():
    assert InferenceConfig.from_parameters({"num_speakers": 3}).num_speakers == 3
    config = InferenceConfig.from_parameters({"min_speakers": 2, "max_speakers": 2})
    assert (config.min_speakers, config.max_speakers) == (2, 2)


def test_assisted_defaults_to_batch_size_one():
    assert InferenceConfig.from_parameters({"assisted": True}).effective_batch_size == 1
    assert InferenceConfig.from_parameters({"assisted": "true"}).assisted is True
    assert InferenceConfig.from_parameters({"assisted": "auto", "batch_size": 4}).effective_batch_size == 4


def test_parameters_must_be_an_object():
    with pytest.raises(InvalidParametersError, match="expected an object, got list"):
        InferenceConfig.from_parameters([1])
