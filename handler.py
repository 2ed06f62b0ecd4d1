"""Hugging Face Inference Endpoints custom handler: speaker-attributed transcripts from one request."""

from __future__ import annotations

import os

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "0")  # no telemetry unless the operator turns it on

from pathlib import Path

import torch
import transformers

from asr import Progress, WhisperTranscriber
from audio import decode, request_bytes
from config import InferenceConfig, ModelSettings
from diarization_utils import NO_DIARIZATION, attribute, diarize, load_pipeline
from errors import EndpointError, InferenceError, ModelLoadError, RequestError
from offline_bundle import BUNDLE_DIR

transformers.logging.set_verbosity_error()  # generate()'s notices about options it sets itself
transformers.logging.disable_progress_bar()


class EndpointHandler:
    """Loads Whisper, the optional assistant and the diarization pipeline once; each call serves one request.

    ``path`` is the repository folder the Inference Endpoints toolkit passes; models come from ``ModelSettings``.
    """

    def __init__(self, path: str = "", settings: ModelSettings | None = None):
        self.settings = settings or ModelSettings()
        for model in (self.settings.asr_model, self.settings.diarization_model):
            if model and Path(model).is_relative_to(BUNDLE_DIR) and not Path(model).exists():
                raise ModelLoadError(f"{model} is missing: build the offline bundle with `make bundle`")
        device, dtype, token = self.settings.torch_device, self.settings.torch_dtype, self.settings.token
        self.transcriber = WhisperTranscriber(
            self.settings.asr_model, self.settings.assistant_model, device, dtype, token
        )
        self.diarization = (
            load_pipeline(self.settings.diarization_model, token, device) if self.settings.diarization_model else None
        )

    def __call__(self, data: dict, progress: Progress | None = None) -> dict:
        """``{"inputs": base64 text | bytes, "parameters": {...}}`` -> text, chunks and speaker turns.

        ``progress(stage, completed, total)`` is called as transcription and diarization advance.
        """
        if not isinstance(data, dict) or "inputs" not in data:
            raise RequestError('the request must be an object with "inputs" (base64 audio) and optional "parameters"')
        config = InferenceConfig.from_parameters(data.get("parameters"))
        data_bytes = request_bytes(data["inputs"], self.settings.max_request_bytes)
        audio = decode(data_bytes, self.settings.max_audio_duration_s)
        try:
            transcript = self.transcriber.transcribe(audio.waveform, config, progress)
            diarization = (
                diarize(
                    self.diarization,
                    audio.waveform,
                    config.num_speakers,
                    config.min_speakers,
                    config.max_speakers,
                    progress,
                )
                if self.diarization is not None
                else NO_DIARIZATION
            )
        except EndpointError:
            raise
        except torch.OutOfMemoryError:
            raise InferenceError("out of memory while processing the recording; try a shorter one") from None
        except Exception as error:
            raise InferenceError(f"inference failed ({type(error).__name__})") from error
        word_speakers, speakers = attribute(transcript.words, diarization.turns, audio.duration)
        response = {
            "text": transcript.text,
            "chunks": [{"text": c.text, "timestamp": [c.start, c.end]} for c in transcript.chunks],
            "speakers": [
                {"speaker": s.speaker, "text": s.text, "timestamp": [round(s.start, 3), round(s.end, 3)]}
                for s in speakers
            ],
            "overlaps": [
                {"speakers": list(o.speakers), "timestamp": [round(o.start, 3), round(o.end, 3)]}
                for o in diarization.overlaps
            ],
            "language": transcript.language,
            "duration": round(audio.duration, 3),
            "parameters": {
                **config.model_dump(),
                "batch_size": config.effective_batch_size,
                "language": transcript.language,
            },
        }
        if config.return_timestamps == "word":
            response["words"] = [
                {"word": w.text, "start": w.start, "end": w.end, "speaker": speaker}
                for w, speaker in zip(transcript.words, word_speakers, strict=True)
            ]
        return response
