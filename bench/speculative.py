"""Speculative decoding: Whisper's decoder time with and without the assistant, on the same windows, in one run.

    python bench/speculative.py                  # the pyannote sample and bench/corpus/*.wav
    python bench/speculative.py FILE...
    ASR_MODEL=.bundle/whisper-base python bench/speculative.py FILE...   # base and its draft
    ASR_MODEL=.bundle/whisper-base python bench/speculative.py --draft-layers 0 5 FILE...

The models are the endpoint's (``ASR_MODEL``, ``ASSISTANT_MODEL``: unset, the draft beside the ASR model).
``--draft-layers`` keeps only those decoder layers of the assistant (the distil-whisper recipe starts its
2-layer decoder from the teacher's first and last layers; here untrained). Every window (cut as the endpoint
cuts them) goes through ``generate`` plain and assisted, both at batch 1, one after the other; decoder time =
``generate`` time minus the encoder's. A multilingual model decodes each file in the language it detects on
the file, as the endpoint does. Per file it prints the tokens, both decoder times, their ratio, the acceptance
rate and whether the tokens are identical; then where the assisted time goes (draft steps, Whisper's
verification passes, the rest of the loop) and, unless ``--windows-only``, whole-file transcription with the
endpoint's batched default (8 windows at a time, no assistant) against assisted (one window at a time).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

from config import InferenceConfig, ModelSettings
from speech.asr import decoding
from speech.audio import SAMPLE_RATE, decode, pyannote_sample_path

CORPUS = Path(__file__).resolve().parent / "corpus"


class Timers:
    """Seconds spent in the encoder, in Whisper's decoder passes and in drafting, from hooks."""

    def __init__(self, model: torch.nn.Module):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._time(model.get_encoder(), "encoder")
        self._time(model, "whisper passes")
        draft = decoding.DraftCandidates.get_candidates

        def timed_draft(generator, input_ids, **kwargs):
            started = time.perf_counter()
            result = draft(generator, input_ids, **kwargs)
            self.seconds["draft steps"] += time.perf_counter() - started
            self.calls["draft steps"] += result[0].shape[1] - input_ids.shape[1]
            return result

        decoding.DraftCandidates.get_candidates = timed_draft

    def _time(self, module: torch.nn.Module, name: str) -> None:
        started: list[float] = []
        module.register_forward_pre_hook(lambda *_: started.append(time.perf_counter()))

        def done(*_):
            self.seconds[name] += time.perf_counter() - started.pop()
            self.calls[name] += 1

        module.register_forward_hook(done)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--draft-layers", type=int, nargs="+", help="the assistant's decoder layers to keep")
    parser.add_argument("--draft-int8", action="store_true", help="every linear layer of the draft in int8")
    parser.add_argument("--rounds", type=int, default=1, help="decode each window this many times; keep the fastest")
    parser.add_argument("--windows-only", action="store_true", help="skip the whole-file transcriptions")
    args = parser.parse_args()
    files = args.files or [pyannote_sample_path(), *sorted(CORPUS.glob("*.wav"))]

    import handler  # noqa: F401  (quiet transformers, as the endpoint runs it)
    from speech.asr.language import detect_language, recognition_options
    from speech.asr.model import Whisper
    from speech.asr.transcriber import WhisperTranscriber
    from speech.asr.windows import split_windows

    settings = ModelSettings()
    if not settings.assistant_model:
        sys.exit("no ASSISTANT_MODEL: nothing to compare")
    whisper = Whisper(
        settings.asr_model, settings.assistant_model, settings.torch_device, settings.torch_dtype, settings.token
    )
    transcriber = WhisperTranscriber(whisper)
    model, config = whisper.model, InferenceConfig()
    layers = whisper.assistant.model.decoder.layers
    if args.draft_layers:
        whisper.assistant.model.decoder.layers = torch.nn.ModuleList(layers[i] for i in args.draft_layers)
        model.set_assistant(whisper.assistant)
    if args.draft_int8:
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
        torch.ao.quantization.quantize_dynamic(model.draft, {torch.nn.Linear: qconfig}, inplace=True)
    timers = Timers(model)
    print(
        f"ASR {settings.asr_model}, assistant {settings.assistant_model} (decoder layers "
        f"{args.draft_layers or list(range(len(layers)))} of {len(layers)}"
        f"{', all linear layers int8' if args.draft_int8 else ''}), {settings.torch_device}, "
        f"{torch.get_num_threads()} threads, fastest of {args.rounds} round(s) per window"
    )

    @torch.inference_mode()
    def options_for(windows) -> tuple[dict, str]:
        """``generate``'s options for a file's windows, and its language (detected on them, as the endpoint does)."""
        language = recognition_options(whisper, config).language
        if language is None:
            language, _ = detect_language(whisper, windows[:3], config.no_speech_threshold)
        options = {"return_timestamps": whisper.timestamps, "return_segments": True, "return_dict_in_generate": True}
        if whisper.multilingual:
            options.update(language=language, task=config.task)
        return options, language

    @torch.inference_mode()
    def generate(window, options: dict, assisted: bool) -> tuple[list[int], float, decoding.DraftCounts]:
        inputs = whisper.features([window.samples], attention_mask=True)
        features = inputs.input_features.to(whisper.device, whisper.dtype)
        options = dict(options)
        if assisted:
            options["assistant_model"] = whisper.assistant
        counts = model.count_drafts()
        encoder_before = timers.seconds["encoder"]
        started = time.perf_counter()
        output = model.generate(features, attention_mask=inputs.attention_mask.to(whisper.device), **options)
        decoder = time.perf_counter() - started - (timers.seconds["encoder"] - encoder_before)
        if whisper.timestamps:
            tokens = [t for segment in output["segments"][0] for t in segment["tokens"].tolist()]
        else:  # decoded without timestamp tokens (Whisper base): one sequence, prompt included
            tokens = output["sequences"][0].tolist()
        return tokens, decoder, counts

    warm_up = split_windows(decode(pyannote_sample_path().read_bytes(), 60).waveform[: 5 * SAMPLE_RATE], 30)
    generate(warm_up[0], options_for(warm_up)[0], True)
    header = (
        f"{'file':<14} {'lang':>4} {'win':>3} {'tokens':>6} {'plain s':>8} {'assisted s':>10} {'ratio':>6} "
        f"{'accept':>7} same"
    )
    print(header)
    totals = defaultdict(float)
    profile: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    all_same = True
    for path in files:
        windows = split_windows(decode(path.read_bytes(), 7200).waveform, config.chunk_length_s)
        options, language = options_for(windows)
        plain_s = assisted_s = 0.0
        tokens = drafted = accepted = 0
        same = True
        for window in windows:
            plain_decoder = assisted_decoder = float("inf")
            for _ in range(args.rounds):
                plain_tokens, seconds, _ = generate(window, options, assisted=False)
                plain_decoder = min(plain_decoder, seconds)
                timers.reset()
                assisted_tokens, seconds, counts = generate(window, options, assisted=True)
                assisted_decoder = min(assisted_decoder, seconds)
            for name, seconds in timers.seconds.items():  # the last round's
                profile[name] += seconds
                calls[name] += timers.calls[name]
            plain_s, assisted_s = plain_s + plain_decoder, assisted_s + assisted_decoder
            tokens, drafted, accepted = tokens + len(plain_tokens), drafted + counts.drafted, accepted + counts.accepted
            same &= plain_tokens == assisted_tokens
        all_same &= same
        for key, value in (
            ("plain", plain_s),
            ("assisted", assisted_s),
            ("tokens", tokens),
            ("drafted", drafted),
            ("accepted", accepted),
        ):
            totals[key] += value
        print(
            f"{path.stem[:14]:<14} {language:>4} {len(windows):>3} {tokens:>6} {plain_s:>8.2f} {assisted_s:>10.2f} "
            f"{plain_s / assisted_s:>5.2f}x {accepted / max(drafted, 1):>7.1%} {'yes' if same else 'NO'}"
        )
    print(
        f"{'all':<14} {'':>4} {'':>3} {int(totals['tokens']):>6} {totals['plain']:>8.2f} {totals['assisted']:>10.2f} "
        f"{totals['plain'] / totals['assisted']:>5.2f}x {totals['accepted'] / max(totals['drafted'], 1):>7.1%} "
        f"{'yes' if all_same else 'NO'}"
    )
    print(
        f"\nplain: {totals['plain'] / totals['tokens'] * 1000:.1f} ms of decoder per token; assisted: "
        f"{totals['assisted'] / totals['tokens'] * 1000:.1f} ms"
    )
    assisted_total = totals["assisted"] + profile["encoder"]
    print("where the assisted generate time goes:")
    for name in ("encoder", "draft steps", "whisper passes"):
        each = profile[name] / max(calls[name], 1) * 1000
        print(f"  {name:<16} {profile[name]:7.2f} s  {calls[name]:5d} calls  {each:6.1f} ms each")
    rest = assisted_total - sum(profile[name] for name in ("encoder", "draft steps", "whisper passes"))
    print(f"  {'rest of the loop':<16} {rest:7.2f} s  (logits processors, verification, cache bookkeeping)")

    if args.windows_only:
        return
    print("\nwhole files, transcribe() as the endpoint runs it (alignment and no-speech pass included):")
    for path in files:
        waveform = decode(path.read_bytes(), 7200).waveform
        times = {}
        for name, parameters in (("batched (8, no assistant)", {"assisted": False}), ("assisted", {"assisted": True})):
            started = time.perf_counter()
            transcriber.transcribe(waveform, InferenceConfig(**parameters))
            times[name] = time.perf_counter() - started
        line = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in times.items())
        print(f"  {path.stem:<14} {line}")


if __name__ == "__main__":
    main()
