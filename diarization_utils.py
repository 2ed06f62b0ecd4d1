"""The diarization pipeline and the merge of words with speaker turns, under the name the design card and the offline
bundle's ``config.yaml`` (``diarization_utils.SpeakerDiarization``) use; the code lives in ``speech``."""

from speech.attribution import attribute
from speech.speakers.pipeline import SpeakerDiarization, diarize, load_pipeline
from speech.types import Diarization, Overlap, SpeakerSegment, Turn

__all__ = [
    "Diarization",
    "Overlap",
    "SpeakerDiarization",
    "SpeakerSegment",
    "Turn",
    "attribute",
    "diarize",
    "load_pipeline",
]
