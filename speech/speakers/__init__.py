"""Who spoke when: the pyannote pipeline and the project's steps around it, and voiceprints."""
