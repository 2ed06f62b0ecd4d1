"""Speaker-attributed transcripts: audio in, Whisper words and pyannote speakers merged, every response shape out."""
