"""``multichannel`` on two-channel calls: words on the right channel, the voices of a channel told apart, labels
on both channels, and the time against the same call mixed down to mono, in one run.

    python bench/multichannel.py

Calls (``bench/calls.py``) of test-set Kokoro voices and test-topic sentences (none used by the tests): a caller on
channel 0 and two agents on channel 1, each side bleeding into the other at -20 dB; the same with a line echo
(the far side again 0.25 s later at -15 dB); and one agent, bleed at -12 dB.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from calls import score, two_channel_call
from sentences import TEST

from handler import EndpointHandler

CALLS = {
    "bleed -20 dB, 2 agents": dict(agents=("af_sarah", "am_michael"), bleed_db=-20.0),
    "bleed -20 dB + echo, 2 agents": dict(agents=("af_sarah", "am_michael"), bleed_db=-20.0, echo_s=0.25),
    "bleed -12 dB, 1 agent": dict(agents=("af_nicole",), bleed_db=-12.0),
}


def main() -> None:
    handler = EndpointHandler()
    sentences = [s for topic in TEST.values() for s in topic if len(s.split()) >= 5][:14]
    print("call                               words  right channel  agents apart  shared labels  time x mono")
    for name, options in CALLS.items():
        call = two_channel_call("bm_lewis", sentences=sentences, **options)
        stereo, mono = call.wav(), call.wav(mono=True)
        began = time.perf_counter()
        handler.respond({"inputs": mono, "parameters": {}})
        mixed_s = time.perf_counter() - began
        began = time.perf_counter()
        response = handler.respond(
            {"inputs": stereo, "parameters": {"multichannel": True, "return_timestamps": "word"}}
        )
        split_s = time.perf_counter() - began
        found = score(response, call)
        apart = f"{found.agents_apart / found.agent_words:.1%}" if len(options["agents"]) > 1 else "-"
        print(
            f"{name:34s} {found.words:5d}  {found.right_channel / found.heard:13.1%}  {apart:>12s}  "
            f"{len(found.shared_labels):13d}  {split_s / mixed_s:11.2f}"
        )
    print("(right channel: of the words found in a turn of the call; agents apart: of channel 1's agent words)")


if __name__ == "__main__":
    main()
