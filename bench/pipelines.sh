#!/usr/bin/env bash
# The embedded default's pipeline against pyannote's community-1 method on the same segmentation and CAM++, each
# with and without the project's steps after the clustering (missed speakers, resegmentation), through the endpoint:
#
#   bash bench/pipelines.sh --corpus bench/corpus --set holdout=bench/corpus-holdout --each
#
# Arguments go to bench/evaluate.py. "community-1" is pyannote's own SpeakerDiarization class with VBx clustering
# (threshold 0.6, Fa 0.07, Fb 0.8) and the PLDA of bench/fit_plda.py, loaded by its hub id from a cache made from the
# bundle (python -m tools.hub_cache) with HF_HUB_OFFLINE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
CACHE=bench/cache/hub
$PY -m tools.hub_cache $CACHE >/dev/null
for pipeline in default community-1; do
    for steps in true false; do
        echo "## pipeline: $pipeline, DIARIZATION_STEPS=$steps"
        if [ $pipeline = community-1 ]; then
            HF_HUB_CACHE=$CACHE HF_HUB_OFFLINE=1 DIARIZATION_MODEL=pyannote/speaker-diarization-community-1 \
                DIARIZATION_STEPS=$steps $PY bench/evaluate.py "$@"
        else
            DIARIZATION_STEPS=$steps $PY bench/evaluate.py "$@"
        fi
    done
done
