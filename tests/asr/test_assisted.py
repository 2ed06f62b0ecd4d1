"""Speculative decoding: the draft decoder, identical transcripts with and without it, and misuse."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import torch
from corpus import Conversation, build
from transformers import BertConfig, WhisperConfig, WhisperForCausalLM, WhisperForConditionalGeneration

from config import InferenceConfig, ModelSettings
from handler import EndpointHandler
from speech.asr.decoding import DraftDecoder
from speech.asr.model import Whisper
from speech.asr.transcriber import WhisperTranscriber
from speech.audio import SAMPLE_RATE, decode
from speech.errors import InvalidParametersError, ModelLoadError
from tools.offline_bundle import BASE_DIR_NAME, BASE_DRAFT_DIR_NAME, BUNDLE_DIR, DRAFT_DIR_NAME, WHISPER_DIR_NAME

CPU = torch.device("cpu")


def load(model: str, assistant: str | None) -> WhisperTranscriber:
    """A transcriber of ``model`` with the draft model ``assistant``, on the CPU in float32."""
    return WhisperTranscriber(Whisper(model, assistant, CPU, torch.float32))


@pytest.fixture(scope="module")
def conversations(tmp_path_factory) -> list:
    """Three short synthesized conversations: two voices with overlaps, three with noise, espeak with noise."""
    folder = tmp_path_factory.mktemp("conversations")
    voices = {
        "overlap": ("flite-awb", "espeak-us-f"),
        "noise": ("flite-slt", "flite-kal", "espeak-gb-m"),
        "espeak": ("espeak-us-f", "espeak-gb-m"),
    }
    waveforms = []
    for seed, (name, cast) in enumerate(voices.items(), start=20):
        build(Conversation(name, seed, cast, 40, 20.0 if name != "overlap" else None, 0.25, 40.0), folder)
        waveforms.append(decode((folder / f"{name}.wav").read_bytes(), 600).waveform)
    return waveforms


def test_draft_decoder_computes_whisper_decoder_logits():
    """Unquantized (as on GPU), the lean draft gives the decoder's logits, whether fed one token or several."""
    decoder = WhisperForCausalLM.from_pretrained(BUNDLE_DIR / DRAFT_DIR_NAME, dtype=torch.float32).eval()
    draft = DraftDecoder(decoder.model.decoder, decoder.proj_out, quantize=False).eval()
    encoder_output = torch.randn(1, 1500, decoder.config.d_model, generator=torch.Generator().manual_seed(0))
    tokens = torch.tensor([50257, 50363, 440, 1049, 1110, 286, 262, 3504, 11])
    with torch.inference_mode():
        expected = decoder(input_ids=tokens[None], encoder_outputs=encoder_output, use_cache=False).logits[0, 3:]
        state = draft.start(encoder_output)
        steps = [draft.step(state, tokens[:4])] + [draft.step(state, token[None]) for token in tokens[4:]]
        state.length = 6  # forget the last three tokens, as after a rejected draft, and feed them again
        again = draft.step(state, tokens[6:])
    torch.testing.assert_close(torch.stack(steps), expected, atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(again, expected[-1], atol=2e-4, rtol=1e-4)


def test_assisted_words_are_the_plain_ones(handler, sample_waveform, conversations):
    """Same words, same times, on the pyannote sample and on three synthesized conversations."""
    transcriber = handler.transcriber
    for waveform in [sample_waveform, *conversations]:
        plain = transcriber.transcribe(waveform, InferenceConfig(assisted=False, batch_size=1))
        assisted = transcriber.transcribe(waveform, InferenceConfig(assisted=True))
        assert assisted.words == plain.words
        assert assisted.segments == plain.segments
        assert assisted.decoding.assisted_windows == assisted.decoding.windows
        assert assisted.decoding.accepted_tokens > 0.7 * assisted.decoding.drafted_tokens
        assert plain.decoding.drafted_tokens == 0


@pytest.fixture(scope="module")
def base() -> WhisperTranscriber:
    """The bundle's multilingual Whisper base with its own draft, as ``ASR_MODEL=.bundle/whisper-base`` loads them."""
    return load(str(BUNDLE_DIR / BASE_DIR_NAME), str(BUNDLE_DIR / BASE_DRAFT_DIR_NAME))


def _spanish() -> np.ndarray:
    text = "Buenas tardes. El tren a Sevilla sale a las cinco y llega antes de la cena."
    wav = subprocess.run(["espeak-ng", "-v", "es", "-s", "140", "--stdout", text], capture_output=True, check=True)
    return decode(wav.stdout, 60).waveform


@pytest.mark.parametrize(
    ("clip", "parameters"),
    [("sample", {}), ("spanish", {}), ("spanish", {"task": "translate"})],
)
def test_base_assisted_words_are_the_plain_ones(base, sample_waveform, clip, parameters):
    """Whisper base and its draft: the same words and times as plain greedy decoding, in English (the sample's
    first 12 s), in Spanish (language detected) and translated from Spanish."""
    waveform = sample_waveform[: 12 * SAMPLE_RATE] if clip == "sample" else _spanish()
    plain = base.transcribe(waveform, InferenceConfig(assisted=False, **parameters))
    assisted = base.transcribe(waveform, InferenceConfig(assisted=True, **parameters))
    assert plain.language == assisted.language == ("en" if clip == "sample" else "es")
    assert len(plain.words) > 10
    assert assisted.words == plain.words
    assert assisted.segments == plain.segments
    assert assisted.decoding.assisted_windows == 1
    assert assisted.decoding.accepted_tokens > 0.5 * assisted.decoding.drafted_tokens  # 69 % on the sample's 12 s


@pytest.fixture(scope="module")
def base_endpoint() -> EndpointHandler:
    """The endpoint with ``ASR_MODEL=.bundle/whisper-base`` (its draft the assistant) and the default diarization."""
    return EndpointHandler(settings=ModelSettings(asr_model=str(BUNDLE_DIR / BASE_DIR_NAME)))


@pytest.mark.parametrize("meeting", ["EN2001e_0000s", "EN2002a_0000s"])
def test_base_assisted_answers_real_meetings(ami_dev, base_endpoint, meeting):
    """Whisper base and its draft through the endpoint on real meetings (AMI, 2 and 4 speakers), ``assisted: true``:
    where base leaves out speech, several holes of a window are decoded again, each with the assistant (once a 500,
    as transformers assists a batch of one), and the words, times and speakers are those of plain decoding."""
    audio = (ami_dev / f"{meeting}.wav").read_bytes()
    parameters = {"return_timestamps": "word"}
    assisted = base_endpoint({"inputs": audio, "parameters": {**parameters, "assisted": True}})
    plain = base_endpoint({"inputs": audio, "parameters": {**parameters, "assisted": False}})
    decoding = assisted["decoding"]
    assert decoding["windows"] == 1 and decoding["holes"] >= 2  # several holes decoded at once, plain
    assert decoding["assisted_windows"] == 1 + decoding["holes"]
    assert plain["decoding"]["holes"] == decoding["holes"]
    assert len(assisted["words"]) > 50
    assert assisted["words"] == plain["words"]


def test_the_response_reports_the_assistant(sample_response):
    """The sample is one window: "auto" assists it and says how many drafted tokens Whisper accepted."""
    decoding = sample_response["decoding"]
    assert decoding["assisted"] and decoding["windows"] == decoding["assisted_windows"] == 1
    assert decoding["drafted_tokens"] >= decoding["accepted_tokens"] > 100
    assert decoding["acceptance_rate"] > 0.75
    assert sample_response["parameters"]["assisted"] == "auto"


def test_auto_batches_long_recordings_without_the_assistant(handler, conversations):
    transcript = handler.transcriber.transcribe(conversations[0], InferenceConfig())
    assert transcript.decoding.windows == 2
    assert transcript.decoding.assisted_windows == 0


def test_assisted_without_an_assistant_is_an_error(sample_waveform):
    settings = ModelSettings(assistant_model="")
    transcriber = load(settings.asr_model, settings.assistant_model)
    with pytest.raises(InvalidParametersError, match="no assistant model is loaded"):
        transcriber.transcribe(sample_waveform, InferenceConfig(assisted=True))
    assert transcriber.transcribe(sample_waveform[:80000], InferenceConfig()).decoding.assisted_windows == 0


def _checkpoint(folder, **overrides):
    main = json.loads((BUNDLE_DIR / WHISPER_DIR_NAME / "config.json").read_text())
    WhisperConfig(**{**main, **overrides}).save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"vocab_size": 51865}, "vocabulary of 51865 tokens, the main model 51864"),
        ({"eos_token_id": 0}, "eos_token_id 0, the main model 50256: their tokenizers differ"),
        ({"num_mel_bins": 128}, "expects 128 mel bins, the main model 80"),
        ({"d_model": 512, "architectures": ["WhisperForCausalLM"]}, "d_model 512"),
    ],
)
def test_an_incompatible_assistant_is_refused_at_load(tmp_path, overrides, message):
    with pytest.raises(ModelLoadError, match=message):
        load(str(BUNDLE_DIR / WHISPER_DIR_NAME), _checkpoint(tmp_path, **overrides))


def test_an_assistant_that_is_not_whisper_is_refused_at_load(tmp_path):
    BertConfig().save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="is a 'bert' model, not a Whisper one"):
        load(str(BUNDLE_DIR / WHISPER_DIR_NAME), str(tmp_path))


def test_assisted_sampling_draws_text(handler, sample_waveform):
    """With a temperature, drafts are checked against Whisper's samples: the result is one of Whisper's draws."""
    torch.manual_seed(0)
    transcript = handler.transcriber.transcribe(sample_waveform, InferenceConfig(assisted=True, temperature=0.5))
    assert transcript.decoding.assisted_windows == 1
    assert len(transcript.words) > 40  # the sample holds about 90 words


@pytest.mark.parametrize("own_encoder", [False, True])
def test_a_full_whisper_assistant(tmp_path, sample_waveform, own_encoder):
    """A full Whisper drafts too. With the main model's encoder (as distil-whisper keeps its teacher's), it reads
    the main model's encoder output; with an encoder of its own, it encodes each window itself."""
    main = str(BUNDLE_DIR / WHISPER_DIR_NAME)
    assistant = main
    if own_encoder:
        model = WhisperForConditionalGeneration.from_pretrained(main)
        with torch.no_grad():
            model.model.encoder.layer_norm.bias.add_(0.01)
        model.save_pretrained(tmp_path)
        assistant = str(tmp_path)
    transcriber = load(main, assistant)
    assert transcriber.whisper.model.draft_encodes == own_encoder
    clip = sample_waveform[: 12 * SAMPLE_RATE]
    assisted = transcriber.transcribe(clip, InferenceConfig(assisted=True))
    assert assisted.words == transcriber.transcribe(clip, InferenceConfig(assisted=False)).words
    assert assisted.decoding.accepted_tokens > 0.7 * assisted.decoding.drafted_tokens
