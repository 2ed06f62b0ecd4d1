"""The endpoint end to end on real weights and a real recording."""

from __future__ import annotations

import base64
import itertools

import numpy as np
import pytest
from conftest import SAMPLE_RATE, encode
from evaluate import score
from metrics import normalize

from config import InferenceConfig
from speech.errors import InvalidParametersError, RequestError


def speaker_of(response: dict, phrase: str) -> str:
    matches = [turn["speaker"] for turn in response["speakers"] if phrase in turn["text"]]
    assert len(matches) == 1, f"{phrase!r} in {response['speakers']}"
    return matches[0]


def test_response_schema(sample_response):
    assert set(sample_response) >= {
        "text",
        "chunks",
        "speakers",
        "overlaps",
        "language",
        "language_probability",
        "duration",
        "parameters",
        "words",
    }
    assert sample_response["language"] == "en"
    assert sample_response["language_probability"] == 1.0  # English-only model: not detected
    assert sample_response["duration"] == 30.0
    assert sample_response["chunks"] and sample_response["speakers"] and sample_response["words"]  # all asked for
    for chunk in sample_response["chunks"]:
        assert set(chunk) == {"text", "timestamp", "avg_logprob", "no_speech_prob", "compression_ratio", "temperature"}
        start, end = chunk["timestamp"]
        assert 0.0 <= start <= end <= 30.0
        assert chunk["avg_logprob"] <= 0.0 and 0.0 <= chunk["no_speech_prob"] <= 1.0
        assert chunk["compression_ratio"] > 0.0 and chunk["temperature"] == 0.0  # greedy: nothing decoded again
    for turn in sample_response["speakers"]:
        assert set(turn) == {"speaker", "text", "timestamp", "confidence"}
        assert 0.0 <= turn["confidence"] <= 1.0
    for word in sample_response["words"]:
        assert set(word) == {"word", "start", "end", "probability", "speaker", "speaker_confidence"}
        assert 0.0 <= word["start"] <= word["end"] <= 30.0 and 0.0 <= word["probability"] <= 1.0


def test_speaker_confidence_flags_the_words_at_speaker_changes(sample, sample_response):
    """Words a person should check (confidence under 0.5) lie within a second of a speaker change of the
    reference; most words, inside turns, are sure."""
    rttm = sample.audio.with_suffix(".rttm").read_text().splitlines()
    changes = [time for line in rttm for time in _turn_bounds(line)]
    confidences = [word["speaker_confidence"] for word in sample_response["words"]]
    assert sorted(confidences)[len(confidences) // 2] >= 0.9
    unsure = [word for word in sample_response["words"] if word["speaker_confidence"] < 0.5]
    assert unsure
    for word in unsure:
        assert min(abs(word["start"] - time) for time in changes) < 1.0, word


def _turn_bounds(rttm_line: str) -> tuple[float, float]:
    start, duration = map(float, rttm_line.split()[3:5])
    return start, start + duration


def test_overlapping_speech_is_reported(sample_response):
    # the reference has both speakers at once around 18.15-18.59 s and 27.85-28.50 s
    overlaps = sample_response["overlaps"]
    for start, end in [(18.15, 18.59), (27.85, 28.50)]:
        assert any(o["timestamp"][0] < end and start < o["timestamp"][1] for o in overlaps)
    assert all(o["speakers"] == ["SPEAKER_00", "SPEAKER_01"] for o in overlaps)


def test_two_speakers_on_the_sample(sample_response):
    assert {turn["speaker"] for turn in sample_response["speakers"]} == {"SPEAKER_00", "SPEAKER_01"}


def test_diane_and_sheila_are_different_speakers(sample_response):
    assert speaker_of(sample_response, "This is Diane in New Jersey") != speaker_of(sample_response, "I'm Sheila")


def test_the_words_that_matter_are_heard(sample_response):
    assert "Chicago" in sample_response["text"]
    assert "Yankee" in sample_response["text"]


def test_quality_on_the_sample(sample, sample_response):
    """Measured on CPU (tiny.en, the bundle's diarization; 2026-12): WER 14.9 %, cpWER 16.1 %, DER 17.4 %. The
    bounds leave one more word error (a word is 1.15 % of the reference) and 1.6 points of DER."""
    scores = score(sample, sample_response)
    assert scores["wer"] <= 0.165
    assert scores["cpwer"] <= 0.175
    assert scores["der"] <= 0.19


def test_every_word_appears_once_in_order_in_the_speaker_turns(sample_response):
    words = [w["word"] for w in sample_response["words"]]
    assert normalize(" ".join(words)) == normalize(sample_response["text"])
    assert normalize(" ".join(t["text"] for t in sample_response["speakers"])) == normalize(sample_response["text"])
    starts = [w["start"] for w in sample_response["words"]]
    assert starts == sorted(starts)


def test_speaker_turns_are_timed_by_their_words(sample_response):
    turns = sample_response["speakers"]
    assert turns[0]["timestamp"][0] > 5.0  # the call starts after 6 s of ringing, not at 0
    for previous, turn in itertools.pairwise(turns):
        assert previous["timestamp"][1] <= turn["timestamp"][0] + 1e-6


def test_base64_and_raw_bytes_give_the_same_answer(handler, sample, sample_response):
    encoded = base64.b64encode(sample.audio.read_bytes()).decode()
    response = handler({"inputs": encoded, "parameters": {"return_timestamps": "word"}})
    assert _untimed(response) == _untimed(sample_response)


def _untimed(response: dict) -> dict:
    return {**response, "decoding": {**response["decoding"], "seconds": None}}


def test_speaker_count_hint_is_honoured(handler, sample):
    response = handler({"inputs": sample.audio.read_bytes(), "parameters": {"num_speakers": 1}})
    assert {turn["speaker"] for turn in response["speakers"]} == {"SPEAKER_00"}
    assert response["parameters"]["num_speakers"] == 1


def test_stereo_48k_mp3_of_the_sample(handler, sample_waveform):
    resampled = np.interp(np.arange(0, len(sample_waveform), 1 / 3), np.arange(len(sample_waveform)), sample_waveform)
    data = encode(np.stack([resampled, resampled]), 48000, "mp3", "libmp3lame")
    response = handler({"inputs": data})
    assert "Chicago" in response["text"]
    assert len({turn["speaker"] for turn in response["speakers"]}) == 2


def test_silence_produces_no_text_and_no_speakers(handler):
    silence = encode(np.zeros(5 * SAMPLE_RATE), SAMPLE_RATE, "wav", "pcm_s16le")
    response = handler({"inputs": silence})
    assert response["text"] == ""
    assert response["speakers"] == []
    assert response["overlaps"] == []
    assert response["duration"] == 5.0


def _noise(kind: str, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(0)
    white = rng.standard_normal(int(seconds * SAMPLE_RATE))
    if kind == "white":
        return 0.05 * white
    brown = np.cumsum(white)
    brown -= np.convolve(brown, np.ones(400) / 400, mode="same")  # drifts removed: a rumble
    return 0.3 * brown / np.abs(brown).max()


@pytest.mark.parametrize("kind", ["white", "rumble"])
def test_noise_produces_no_invented_text(handler, kind):
    """Whisper alone writes "I'm going to do that." on this white noise and ". . . ." on this rumble."""
    response = handler({"inputs": encode(_noise(kind, 40), SAMPLE_RATE, "wav", "pcm_s16le")})
    assert response["text"] == ""
    assert response["chunks"] == response["speakers"] == []


def _slowed(waveform: np.ndarray, seconds: float, factor: float) -> np.ndarray:
    """The first ``seconds`` of a recording played ``factor`` times slower (linear interpolation)."""
    n = int(seconds * SAMPLE_RATE)
    return np.interp(np.arange(0, n, 1 / factor), np.arange(n), waveform[:n]).astype(np.float32)


def test_a_repetition_loop_on_non_speech_is_dropped_not_decoded_again(handler, sample_waveform):
    """At half speed tiny.en loops ("I'm going to go to the next one." x3, then "whoa, whoa, ..."; gzip ratio 18);
    Whisper's no-speech rule finds the window to be non-speech, so it is neither kept nor sampled again."""
    transcript = handler.transcriber.transcribe(_slowed(sample_waveform, 15, 2.0), InferenceConfig())
    assert transcript.text == ""
    assert transcript.decoding.fallback_windows == 0


def test_a_repetition_loop_is_replaced_even_when_no_sampled_decoding_is_sure(handler, sample_waveform):
    """Without the no-speech rule the half-speed loop is sampled again; every sampled decoding is either repetitive
    or below the log-probability threshold, so the best non-repetitive one replaces the loop."""
    transcript = handler.transcriber.transcribe(
        _slowed(sample_waveform, 15, 2.0), InferenceConfig(no_speech_threshold=None)
    )
    assert transcript.decoding.fallback_windows == 1
    words = transcript.text.lower().split()
    assert words and "whoa," not in words and len(words) < 2 * len(set(words))


def test_a_repetitive_decoding_is_sampled_again_and_kept_when_nothing_better_comes(handler, sample_waveform):
    """With the threshold below any real text's compression ratio, every sampled decoding fails too: the window
    counts as decoded again and Whisper's greedy decoding stays."""
    clip = sample_waveform[: 10 * SAMPLE_RATE]
    greedy = handler.transcriber.transcribe(clip, InferenceConfig())
    strict = handler.transcriber.transcribe(clip, InferenceConfig(compression_ratio_threshold=1.01))
    assert (greedy.decoding.fallback_windows, strict.decoding.fallback_windows) == (0, 1)
    assert strict.text == greedy.text and "Hello" in greedy.text


def test_a_prompt_sets_the_spelling(handler, sample_waveform):
    """Without a prompt tiny.en hears "Sheila and Texas"; a prompt with the names makes it "Sheila in Texas", and
    the prompt itself is not part of the transcript."""
    plain = handler.transcriber.transcribe(sample_waveform, InferenceConfig())
    prompted = handler.transcriber.transcribe(
        sample_waveform, InferenceConfig(prompt="Diane in New Jersey, Sheila in Texas.")
    )
    assert "Sheila and Texas" in plain.text
    assert "Sheila in Texas" in prompted.text
    assert prompted.text.count("Diane") == 1


def test_windows_conditioned_on_the_previous_text_keep_every_word_in_order(handler, sample, sample_response):
    """With 10 s windows each window reads the text before it, one window at a time; the transcript stays as
    good as the default one and its words stay in time order."""
    response = handler(
        {
            "inputs": sample.audio.read_bytes(),
            "parameters": {"condition_on_previous_text": True, "chunk_length_s": 10, "return_timestamps": "word"},
        }
    )
    assert response["decoding"]["windows"] >= 3
    assert response["parameters"]["batch_size"] == 1
    assert score(sample, response)["wer"] <= score(sample, sample_response)["wer"] + 0.05
    starts = [word["start"] for word in response["words"]]
    assert starts == sorted(starts)


@pytest.mark.parametrize("data", [{"parameters": {}}, "just a string"])
def test_a_request_that_is_not_an_object_with_inputs_is_refused(handler, data):
    """The handler's own check of the request's shape (the toolkit calls it without the server); bad audio and
    bad base64 are refused as test_bad_input shows, through the server and this handler."""
    with pytest.raises(RequestError, match='the request must be an object with "inputs"') as refused:
        handler(data)
    assert refused.value.status_code == 400


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"speakers": 2}, "unknown parameter 'speakers'"),
        ({"language": "fr"}, "English-only"),
        ({"language": "klingon"}, "not a language this model knows"),
        ({"task": "translate"}, "English-only"),
        ({"min_speakers": 3, "max_speakers": 2}, "larger than max_speakers"),
        ({"prompt": "Hello there. " * 100}, "prompt is 300 tokens long; Whisper reads at most 223"),
        ({"prompt": "Names: Diane. <|endoftext|>"}, r"prompt: .*disallowed special token: <\|endoftext\|>"),
    ],
)
def test_bad_parameters(handler, sample, parameters, message):
    with pytest.raises(InvalidParametersError, match=message):
        handler({"inputs": sample.audio.read_bytes(), "parameters": parameters})


def test_english_is_accepted_by_an_english_only_model(handler, sample):
    response = handler({"inputs": sample.audio.read_bytes(), "parameters": {"language": "English"}})
    assert response["language"] == "en"


def test_beam_search_decodes_speech_without_the_assistant(handler, clip_wav):
    response = handler({"inputs": clip_wav, "parameters": {"beam_size": 5}})
    assert response["parameters"]["beam_size"] == 5
    assert response["decoding"]["assisted"] is False
    assert "Diane in New Jersey" in response["text"]
    assert len({turn["speaker"] for turn in response["speakers"]}) == 2


def test_beam_search_leaves_silence_to_greedy_decoding(handler):
    """A beam on 30 s of silence repeats " ." up to the token limit (a repetitive window, decoded again); beams
    only run where greedy decoding heard words, so nothing is decoded again here."""
    transcript = handler.transcriber.transcribe(
        np.zeros(30 * SAMPLE_RATE, dtype=np.float32), InferenceConfig(beam_size=5)
    )
    assert transcript.text == ""
    assert transcript.decoding.fallback_windows == 0


def test_subtitles_and_rttm_come_inside_the_json_response(handler, clip_wav):
    response = handler({"inputs": clip_wav, "parameters": {"response_format": "srt"}})
    assert response["srt"].startswith("1\n00:00:0") and "SPEAKER_0" in response["srt"]
    assert "words" not in response  # the cues follow the words, which are only returned when asked for
    rttm = handler({"inputs": clip_wav, "parameters": {"response_format": "rttm"}})["rttm"]
    assert {line.split()[7] for line in rttm.splitlines()} == {t["speaker"] for t in response["speakers"]}
