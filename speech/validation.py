"""A request checked in one place, before any audio is decoded: its shape, every parameter, and what the loaded
models can do with them (language, task, prompt, assistant, known speakers)."""

from __future__ import annotations

from dataclasses import dataclass

from config import InferenceConfig, ModelSettings
from speech.asr.language import RecognitionOptions, recognition_options
from speech.asr.model import Whisper
from speech.audio import AudioSource, request_audio
from speech.errors import InvalidParametersError, RequestError
from speech.speakers.voiceprints import SpeakerEmbedder, references
from speech.types import Voiceprint


@dataclass(frozen=True)
class ValidRequest:
    """A request that passed every check: its parameters, what Whisper is to do, the known speakers as
    voiceprints, and the audio file (its bytes or an open file, not decoded yet)."""

    config: InferenceConfig
    recognition: RecognitionOptions
    known: list[Voiceprint]
    audio: AudioSource


def validate(data: object, whisper: Whisper, embedder: SpeakerEmbedder | None, settings: ModelSettings) -> ValidRequest:
    """Check ``{"inputs": ..., "parameters": {...}}``; raise the ``RequestError`` that names the first problem."""
    if not isinstance(data, dict) or "inputs" not in data:
        raise RequestError('the request must be an object with "inputs" (base64 audio) and optional "parameters"')
    config = InferenceConfig.from_parameters(data.get("parameters"))
    recognition = recognition_options(whisper, config)
    known = _known_speakers(config, embedder, settings)
    audio = request_audio(data["inputs"], settings.max_request_bytes, settings.max_file_bytes)
    return ValidRequest(config, recognition, known, audio)


def _known_speakers(
    config: InferenceConfig, embedder: SpeakerEmbedder | None, settings: ModelSettings
) -> list[Voiceprint]:
    """The request's known speakers as voiceprints of ``embedder``'s model; refused without diarization."""
    if embedder is None:
        asked = ("known_speaker_references", "known_speaker_embeddings", "return_embeddings")
        asked = [name for name in asked if getattr(config, name)]
        if asked:
            raise InvalidParametersError(f"{', '.join(asked)}: this endpoint has no diarization model")
        return []
    audio = list(zip(config.known_speaker_names or [], config.known_speaker_references or [], strict=True))
    prints = [(known.speaker, known.model, known.embedding) for known in config.known_speaker_embeddings or []]
    return references(audio, prints, embedder, settings.max_audio_duration_s, settings.decode_timeout_s)
