"""Bounded work per second of audio (token limits, fallback budget) and sampling with a generator of its own."""

from __future__ import annotations

import math
import subprocess
import threading
import time

import numpy as np
import pytest
import torch
from conftest import SAMPLE_RATE, encode
from transformers import WhisperForConditionalGeneration, WhisperProcessor

from config import InferenceConfig
from speech.asr import decoding
from speech.asr.decoding import GumbelSampling, TokenBudget, WindowRows, is_looping, token_limit
from speech.audio import decode

EOS, TIMESTAMP_BEGIN = 50256, 50363  # tiny.en


def test_the_token_limit_is_whispers_scaled_to_the_audio_with_a_floor():
    assert token_limit(3000) == 224  # 30 s: Whisper's sample_len
    assert token_limit(1000) == 75
    assert token_limit(100) == decoding.MIN_TOKENS


@pytest.mark.parametrize(
    ("tokens", "looping"),
    [
        ([257, 11] * 12, True),  # " one," 12 times
        ([7, 12] * 11 + [7], False),  # one repeat short
        ([TIMESTAMP_BEGIN, 257, 11, TIMESTAMP_BEGIN + 50, TIMESTAMP_BEGIN + 50] + [257, 11] * 11, True),  # across
        ([15496, 13] * 3, False),  # "Hello. Hello. Hello."
        (list(range(100, 160)), False),
        ([1, 2, 3, 4, 5, 6, 7, 8] * 4, True),
    ],
)
def test_a_repetition_loop_is_recognised_on_the_text_tokens(tokens, looping):
    assert is_looping(tokens, EOS) is looping


def _budget(frames: int, tokens: list[int]) -> int:
    """The token TokenBudget lets through after ``tokens`` (a pass of a window of ``frames``), if it forces one."""
    budget = TokenBudget(WindowRows([frames]), TIMESTAMP_BEGIN, EOS)
    budget.set_begin_index(1)
    scores = budget(torch.tensor([[50257, *tokens]]), torch.zeros(1, 51864))
    allowed = torch.isfinite(scores[0]).nonzero().flatten().tolist()
    return allowed[0] if len(allowed) == 1 else -1


def test_a_pass_at_its_limit_is_closed_with_the_windows_end_then_end_of_text():
    text = [TIMESTAMP_BEGIN, *range(100, 100 + token_limit(500) - 1)]
    assert _budget(500, text[:-1]) == -1  # one under the limit: free
    assert _budget(500, text) == TIMESTAMP_BEGIN + 250  # 5 s: <|5.00|>
    assert _budget(500, [*text, TIMESTAMP_BEGIN + 250]) == EOS


def test_gumbel_sampling_draws_from_the_tempered_distribution():
    """Argmax of logits / T plus the processor's noise, over many positions, follows softmax(logits / T)."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    sampler = GumbelSampling(WindowRows([3000]), 0.5, [7])
    draws = [int(sampler(torch.zeros(1, n, dtype=torch.long), logits).argmax()) for n in range(1, 20001)]
    frequencies = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(frequencies, (logits[0] / 0.5).softmax(-1).numpy(), atol=0.01)
    again = GumbelSampling(WindowRows([3000]), 0.5, [7])
    assert draws[:50] == [int(again(torch.zeros(1, n, dtype=torch.long), logits).argmax()) for n in range(1, 51)]


@pytest.fixture(scope="module")
def mandarin(tmp_path_factory) -> bytes:
    """8.6 s of Mandarin from espeak-ng: tiny.en, English-only, loops on it ("1-1-1-1-...")."""
    path = tmp_path_factory.mktemp("mandarin") / "cmn.wav"
    text = "今天天气很好。我们一起去公园散步吧。我喜欢喝茶。"
    subprocess.run(["espeak-ng", "-v", "cmn", "-w", str(path), text], check=True, capture_output=True)
    return path.read_bytes()


def test_a_hostile_clip_is_decoded_within_its_token_budget(handler, mandarin, monkeypatch):
    """Greedy decoding loops and is cut short; the fallback's sampled decodings get what is left of the window's
    budget: the request generates no more than 1.5 times Whisper's token limit (224 tokens per 30 s) for the
    audio, plus the timestamp that closes each decoding (it used to generate 447 tokens at each of six
    temperatures). The response says which sampled decodings the budget skipped and that the text it keeps was
    cut short (measured: 27 + 27 + 43 tokens for 8.6 s; every sampled decoding loops too, so greedy's stays)."""
    generated = []
    generate = WhisperForConditionalGeneration.generate

    def counting(model, *args, **kwargs):  # a spy on Whisper's generate: every decoding still runs
        output = generate(model, *args, **kwargs)
        generated.extend(sum(len(segment["tokens"]) for segment in window) for window in output["segments"])
        return output

    monkeypatch.setattr(WhisperForConditionalGeneration, "generate", counting)
    response = handler({"inputs": mandarin, "parameters": {}})
    counts = response["decoding"]
    assert counts["fallback_windows"] == 1
    assert counts["fallback_decodings"] + counts["fallback_decodings_skipped"] == 5  # temperatures 0.2 ... 1.0
    assert counts["fallback_decodings_skipped"] > 0
    assert len(generated) == 1 + counts["fallback_decodings"]  # greedy, then each sampled decoding
    whispers_limit = math.ceil(224 / 30 * response["duration"])
    assert sum(generated) <= 1.5 * whispers_limit + len(generated), generated
    assert counts["truncated_windows"] == 1
    window = f"window 1 of 1 (0.0-{response['duration']:.1f} s)"
    skipped = counts["fallback_decodings_skipped"]
    assert response["warnings"] == [
        f"{window}: decoding cut short (the same words repeated over and over); its text may be incomplete",
        f"{window}: {skipped} sampled decoding(s) of the temperature fallback skipped, budget spent",
    ]


def test_the_samples_words_are_those_whisper_decodes_without_the_limits(handler, sample_waveform, sample_response):
    """The sample's window (141 tokens of 224) is neither cut short nor sampled again, and Whisper's own
    ``generate``, without the token budget and the loop check, gives the same words."""
    assert sample_response["decoding"]["truncated_windows"] == 0
    assert sample_response["decoding"]["fallback_windows"] == 0
    assert not any("cut short" in warning for warning in sample_response["warnings"])
    path = handler.settings.asr_model
    whisper = WhisperForConditionalGeneration.from_pretrained(path).eval()
    processor = WhisperProcessor.from_pretrained(path)
    features = processor.feature_extractor(sample_waveform, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    with torch.inference_mode():
        tokens = whisper.generate(features.input_features, return_timestamps=True)
    unbounded = processor.batch_decode(tokens, skip_special_tokens=True)[0]
    assert sample_response["text"].split() == unbounded.split()
    assert "Sheila and Texas" in unbounded and "Yankee" in unbounded


def _slowed(waveform: np.ndarray, seconds: float, factor: float) -> np.ndarray:
    n = int(seconds * SAMPLE_RATE)
    return np.interp(np.arange(0, n, 1 / factor), np.arange(n), waveform[:n]).astype(np.float32)


def test_concurrent_requests_that_sample_get_the_text_each_gets_alone(handler, sample_waveform):
    """The half-speed sample without the no-speech rule needs the sampled fallback (test_handler). Two threads
    sending it at once, while a third reseeds torch's process-wide generator, get the text it gets alone: sampling
    draws from the request's own generators."""
    request = {
        "inputs": encode(_slowed(sample_waveform, 15, 2.0), SAMPLE_RATE, "wav", "pcm_s16le"),
        "parameters": {"no_speech_threshold": None},
    }
    alone = handler(request)
    assert alone["decoding"]["fallback_decodings"] > 0
    texts: list[str] = []
    done = threading.Event()

    def reseed() -> None:
        while not done.is_set():
            torch.manual_seed(int(torch.randint(1000, (1,))))
            time.sleep(0.01)

    threads = [threading.Thread(target=lambda: texts.append(handler(request)["text"])) for _ in range(2)]
    noise = threading.Thread(target=reseed)
    for thread in [noise, *threads]:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    noise.join()
    assert texts == [alone["text"], alone["text"]]


def test_sampling_at_a_temperature_is_reproducible_and_the_same_with_the_assistant(handler, sample_waveform):
    """``temperature`` > 0 samples with the request's own generators: the same text on every call, whatever the
    process-wide seed, and the same with the assistant (its drafts see the noise of the model checking them)."""
    clip = decode(encode(sample_waveform[: 10 * SAMPLE_RATE], SAMPLE_RATE, "wav", "pcm_s16le"), 60).waveform
    torch.manual_seed(1)
    plain = handler.transcriber.transcribe(clip, InferenceConfig(temperature=0.8, assisted=False))
    torch.manual_seed(2)
    assisted = handler.transcriber.transcribe(clip, InferenceConfig(temperature=0.8, assisted=True, batch_size=1))
    assert assisted.decoding.assisted_windows == 1
    assert plain.text == assisted.text
    assert plain.text != handler.transcriber.transcribe(clip, InferenceConfig()).text  # it did sample
