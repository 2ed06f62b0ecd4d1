"""Speech recognition with Whisper: windows, decoding (assisted or not), word timing, language."""
