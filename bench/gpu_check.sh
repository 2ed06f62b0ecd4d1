#!/usr/bin/env bash
# Tests and per-flow timings of the endpoint on a GPU: the device machine lent through the `device` tool
# (H200, no network; its python3 has torch, torchaudio and transformers but not pyannote.audio, PyAV, pydantic...).
#
# Everything the check needs travels in gpu_carry/ (git-ignored): this project's other packages (cp312 wheels,
# unpacked), the bundle's Whisper and diarization folders, the 10-minute conversation, and recorded flite/espeak-ng
# output for the conversations tests/asr/test_assisted.py synthesizes (the device has no TTS), whisper-base's tokenizer
# (tests/asr/whisper_shapes.py builds large-v3's from it). That is about 175 MB, more than one call carries (64 MiB),
# so it goes in three parts, the last call running the check:
#
#   bash bench/gpu_check.sh prepare                 # here, after `make bundle`: writes gpu_carry/{1,2,3}
#   run(carry=["gpu_carry/1"], command="bash bench/gpu_check.sh stash 1")                 # also tries the imports
#   run(carry=["gpu_carry/2"], command="bash bench/gpu_check.sh stash 2")
#   run(carry=["gpu_carry/3"], command="bash bench/gpu_check.sh check", timeout_s=540)
#
# Make the three calls back to back: the machine goes back after 30 s idle, the stash with it (check says so).
# check: reassembles and sha256-checks the carry, rebuilds the draft from Whisper (offline_bundle.build_draft), runs
# bench/benchmark.py's measure() in a fresh process per run (endpoint on the sample and on 10 minutes, peer on the
# sample: wall, RTF, peak RSS, peak GPU memory allocated, load and warm-up included), the sample request after request
# in one process (plain against assisted), then tests/test_handler.py, tests/asr/test_assisted.py and
# tests/asr/test_production_shapes.py (ModelSettings picks cuda and float16), then the production shapes at full size
# (random weights: large-v3 and large-v3-turbo, each with a distil-large-v3-style draft; whisper_shapes.py): load, the
# sample plain against assisted, peak GPU memory. Random weights loop to the token budget and the draft's tokens are
# almost never accepted: this times the models' steps and memory, not what a trained draft saves.
# Log, results and junit XML land in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STASH=${STASH:-/root/stash} SITE=${SITE:-/root/site} TTS_BIN=${TTS_BIN:-/root/tts-bin}  # SITE must end in /site
SPLIT=60M

tts_shim() {  # $1: folder for stand-ins of flite and espeak-ng that record (TTS_RECORD=1) or replay their output
    mkdir -p "$1"
    cat >"$1/tts" <<'EOF'
#!/usr/bin/env python3
import hashlib, os, shutil, subprocess, sys
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
out = args.index("-o" if name == "flite" else "-w") + 1
key = hashlib.sha256("\0".join([name, *args[: out - 1], *args[out + 1 :]]).encode()).hexdigest()[:32]
cached = os.path.join(os.environ["TTS_CACHE"], key + ".wav")
if os.environ.get("TTS_RECORD"):
    subprocess.run([os.environ["TTS_REAL_" + name.replace("-", "_")], *args], check=True)
    shutil.copyfile(args[out], cached)
elif os.path.exists(cached):
    shutil.copyfile(cached, args[out])
else:
    sys.exit(f"{name}: no recorded output for {args!r}; run `bash bench/gpu_check.sh prepare` again")
EOF
    chmod +x "$1/tts"
    ln -sf tts "$1/flite"
    ln -sf tts "$1/espeak-ng"
}

prepare() {
    local stage=gpu_carry/stage
    rm -rf gpu_carry && mkdir -p $stage/gpu_tts $stage/bench/recordings $stage/.bundle gpu_carry/{1,2,3}
    # The packages the device lacks, or has in another version, at the versions of .venv (requirements*.txt pins).
    local names="transformers pyannote.audio pyannote.core pyannote.database pyannote.metrics pyannote.pipeline
        asteroid-filterbanks julius torch-audiomentations torch_pitch_shift primePy optuna colorlog
        opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp opentelemetry-exporter-otlp-proto-grpc
        opentelemetry-exporter-otlp-proto-http opentelemetry-exporter-otlp-proto-common opentelemetry-proto
        opentelemetry-exporter-http-transport opentelemetry-exporter-otlp-common opentelemetry-semantic-conventions
        googleapis-common-protos protobuf pydantic pydantic_core pydantic-settings annotated-types typing-inspection
        python-dotenv typing_extensions av speakerlab-slim rapidfuzz"
    local pins
    pins=$(.venv/bin/python -c 'import sys, importlib.metadata as m; print(*(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' $names)
    .venv/bin/pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --target gpu_carry/site $pins
    tar -C gpu_carry -cf - site | nice -n 19 xz -6 -T1 >$stage/site.tar.xz
    cp -r .bundle/whisper-tiny.en .bundle/speaker-diarization .bundle/bundle.json $stage/.bundle/
    mkdir -p $stage/.bundle/whisper-base
    cp .bundle/whisper-base/{tokenizer.json,tokenizer_config.json,special_tokens_map.json,added_tokens.json} \
        .bundle/whisper-base/generation_config.json $stage/.bundle/whisper-base/
    sha256sum .bundle/whisper-tiny.en-draft/model.safetensors >$stage/draft.sha256
    .venv/bin/python -c 'import sys; sys.path[:0] = ["bench", "."]; from benchmark import recording; recording(10)'
    cp bench/recordings/conversation-10min.{wav,json} $stage/bench/recordings/
    # Record the TTS calls of tests/asr/test_assisted.py's `conversations` fixture (the same three conversations).
    tts_shim gpu_carry/tts-bin
    local flite espeak
    flite=$(command -v flite) espeak=$(command -v espeak-ng)
    PATH="$PWD/gpu_carry/tts-bin:$PATH" TTS_RECORD=1 TTS_CACHE="$PWD/$stage/gpu_tts" \
        TTS_REAL_flite=$flite TTS_REAL_espeak_ng=$espeak .venv/bin/python - <<'EOF'
import sys, tempfile
from pathlib import Path
sys.path[:0] = ["bench", "."]
from corpus import Conversation, build
voices = {
    "overlap": ("flite-awb", "espeak-us-f"),
    "noise": ("flite-slt", "flite-kal", "espeak-gb-m"),
    "espeak": ("espeak-us-f", "espeak-gb-m"),
}
with tempfile.TemporaryDirectory() as folder:
    for seed, (name, cast) in enumerate(voices.items(), start=20):
        build(Conversation(name, seed, cast, 40, 20.0 if name != "overlap" else None, 0.25, 40.0), Path(folder))
EOF
    (cd $stage && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum >SHA256SUMS)
    tar -C $stage -cf - site.tar.xz SHA256SUMS draft.sha256 .bundle bench gpu_tts | split -b $SPLIT - gpu_carry/part.
    mv gpu_carry/part.aa gpu_carry/1/ && mv gpu_carry/part.ab gpu_carry/2/ && mv gpu_carry/part.ac gpu_carry/3/
    test ! -e gpu_carry/part.ad || { echo "the carry needs a fourth part: raise SPLIT" >&2; exit 1; }
    rm -rf $stage gpu_carry/site
    du -sh gpu_carry/{1,2,3}
}

environment() {
    export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 PYANNOTE_METRICS_ENABLED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    export PATH="$TTS_BIN:$PATH" TTS_CACHE=$PWD/gpu_tts
}

unpack_site() {  # the packages come first in part 1: they are extracted from it alone
    test -d $SITE/pydantic && return
    tar -xOf $STASH/part.aa --occurrence=1 site.tar.xz |
        $PY -c 'import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz").extractall(sys.argv[1], filter="data")' "$(dirname $SITE)"
}

versions() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    $PY - <<'EOF' || true
import importlib.metadata as m, sys, torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "cuda", torch.version.cuda,
      "| available", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
for name in ("transformers", "huggingface_hub", "tokenizers", "accelerate", "torchaudio", "pyannote.audio", "av",
             "pydantic", "numpy", "scipy", "lightning", "pytest"):
    print(f"{name} {m.version(name)}", end=" | ")
print()
EOF
}

stash() {  # $1: part number; part 1 also unpacks the packages and tries the imports
    mkdir -p $STASH && cp gpu_carry/"$1"/* $STASH/ && ls -l $STASH
    if [ "$1" = 1 ]; then
        environment
        unpack_site
        versions
        $PY -c 'import sys; sys.path[:0] = ["bench", "tests", "."]; import handler, benchmark, conftest, metrics, evaluate
from config import ModelSettings as M; s = M(); print("imports ok:", s.torch_device, s.torch_dtype)' || echo "IMPORT CHECK FAILED"
    fi
}

measure() {  # $1: flow, $2: audio file, $3: time limit (s); a fresh process per run, as benchmark.py --measure
    local result
    if result=$(timeout "$3" $PY - "$1" "$2" <<'EOF'
import json, sys
from pathlib import Path
import torch
sys.path[:0] = ["bench", "."]
from benchmark import measure
result = measure(sys.argv[1], Path(sys.argv[2]))
cuda = torch.cuda.is_available()
result.update(file=Path(sys.argv[2]).name, rtf=round(result["wall_s"] / result["audio_s"], 4),
              gpu_peak_mb=round(torch.cuda.max_memory_allocated() / 2**20) if cuda else None,
              gpu_reserved_mb=round(torch.cuda.max_memory_reserved() / 2**20) if cuda else None)
print(json.dumps(result))
EOF
    ); then
        echo "$result" | tail -n 1 | tee -a "$OUT/results.jsonl"
    else
        local status=$?
        echo "{\"flow\": \"$1\", \"file\": \"$(basename "$2")\", \"failed\": $status}" | tee -a "$OUT/results.jsonl"
    fi
}

check() {
    OUT=${OUT:-/tmp/gpu_check}
    mkdir -p "$OUT"
    exec > >(tee -a "$OUT/gpu_check.log") 2>&1
    mkdir -p $STASH && cp gpu_carry/3/* $STASH/
    for part in aa ab ac; do
        test -f $STASH/part.$part || {
            echo "part.$part is missing from $STASH: the machine went back between the calls; make all three again"
            exit 3
        }
    done
    cat $STASH/part.a? | tar -xf -
    sha256sum --quiet -c SHA256SUMS
    echo "carry: sha256 ok"
    environment
    unpack_site
    versions
    tts_shim $TTS_BIN
    $PY -c 'from tools.offline_bundle import BUNDLE_DIR as B, build_draft; build_draft(B / "whisper-tiny.en", B / "whisper-tiny.en-draft")'
    sha256sum -c draft.sha256 || echo "note: the draft rebuilt here differs byte-wise from the local one"
    $PY -c 'from config import ModelSettings as M; s = M(); print("ModelSettings:", s.torch_device, s.torch_dtype)'

    echo "== benchmark (a fresh process per run)"
    local sample
    sample=$($PY -c 'from speech.audio import pyannote_sample_path; print(pyannote_sample_path())')
    measure endpoint "$sample" 150
    measure endpoint bench/recordings/conversation-10min.wav 200
    measure peer "$sample" 150
    $PY - "$OUT/results.jsonl" <<'EOF'
import json, sys
print(f"{'flow':9s} {'file':26s} {'audio s':>8s} {'wall s':>8s} {'RTF':>7s} {'peak RSS MB':>12s} {'GPU peak MB':>12s}")
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "wall_s" not in r:
        print(f"{r['flow']:9s} {r['file']:26s} failed ({r['failed']})")
        continue
    print(f"{r['flow']:9s} {r['file']:26s} {r['audio_s']:8.1f} {r['wall_s']:8.2f} {r['rtf']:7.4f} "
          f"{r['peak_rss_mb']:12.0f} {r['gpu_peak_mb']!s:>12s}")
EOF

    echo "== the sample, request after request in one process (on GPU the load includes the warm-up requests)"
    timeout 200 $PY - "$sample" <<'EOF' | tee "$OUT/requests.txt" || echo "requests: exit status $?"
import sys, time
from pathlib import Path
sys.path[:0] = ["."]
started = time.perf_counter()
from handler import EndpointHandler
handler = EndpointHandler()
print(f"load {time.perf_counter() - started:.2f} s")
data = Path(sys.argv[1]).read_bytes()
for assisted in (False, False, "auto", "auto", True):
    started = time.perf_counter()
    decoding = handler({"inputs": data, "parameters": {"assisted": assisted}})["decoding"]
    print(f"assisted {assisted!s:5s}  wall {time.perf_counter() - started:6.3f} s  generate {decoding['seconds']:6.3f} s"
          f"  assisted windows {decoding['assisted_windows']}  acceptance {decoding['acceptance_rate']}")
EOF

    echo "== tests"
    timeout 300 $PY -m pytest -q -p no:cacheprovider -rfE --tb=short --junitxml="$OUT/pytest.xml" \
        tests/test_handler.py tests/asr/test_assisted.py tests/asr/test_production_shapes.py || echo "pytest exit status $?"

    echo "== production shapes at full size, random weights (the sample, language en; load includes the warm-up)"
    timeout 300 $PY - "$sample" <<'EOF' | tee "$OUT/production_shapes.txt" || echo "production shapes: exit status $?"
import sys, tempfile, time
from pathlib import Path
import torch
sys.path[:0] = ["tests/asr", "."]
from whisper_shapes import LARGE_V3, LARGE_V3_TURBO, build_draft, build_whisper
from config import ModelSettings
from handler import EndpointHandler
from tools.offline_bundle import BASE_DIR_NAME, BUNDLE_DIR
folder = Path(tempfile.mkdtemp())
draft = build_draft(folder / "distil-large-v3", full_size=True)
data = Path(sys.argv[1]).read_bytes()
for shape in (LARGE_V3, LARGE_V3_TURBO):
    model = build_whisper(shape, BUNDLE_DIR / BASE_DIR_NAME, folder / shape.name, full_size=True)
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    handler = EndpointHandler(settings=ModelSettings(asr_model=str(model), assistant_model=str(draft)))
    print(f"{shape.name} + draft: load {time.perf_counter() - started:.1f} s, {handler.whisper.dtype}")
    for assisted in (False, False, True, True):
        started = time.perf_counter()
        decoding = handler({"inputs": data, "parameters": {"assisted": assisted, "language": "en"}})["decoding"]
        print(f"  assisted {assisted!s:5s}  wall {time.perf_counter() - started:6.2f} s  generate "
              f"{decoding['seconds']:6.2f} s  drafted {decoding['drafted_tokens']}  accepted {decoding['accepted_tokens']}")
    print(f"  peak GPU memory allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MB")
    del handler
    torch.cuda.empty_cache()
EOF
}

case "${1:-}" in
    prepare) prepare ;;
    stash) stash "${2:?part number}" ;;
    check) check ;;
    *) echo "usage: $0 prepare | stash 1|2 | check" >&2; exit 2 ;;
esac
