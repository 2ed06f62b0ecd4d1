# Set-up is part of every target: Debian packages, a venv with pinned packages, then the offline model bundle.
PYTHON ?= python3
VENV := .venv
# The Inference Endpoints container installs requirements.txt alone: container-test checks that this is enough.
CONTAINER_VENV := .venv-container
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
# ffmpeg: audio decoding for pyannote's file inputs; flite, espeak-ng, sox: the synthesized test recordings;
# chromium: the demo page test; nodejs: npm fetches the Kokoro voices (bench/kokoro.py) for the test speech
SYSTEM_PACKAGES := ffmpeg flite espeak-ng sox chromium nodejs

.PHONY: system setup bundle demo serve test container-test lint clean

system:
	@missing=$$(for pkg in $(SYSTEM_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || echo $$pkg; done); \
	if [ -n "$$missing" ]; then \
		if command -v apt-get >/dev/null; then \
			sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
			$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing; \
		else \
			echo "not a Debian system: install" $$missing "yourself" >&2; \
		fi; \
	fi

$(INSTALLED): requirements.txt requirements-local.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -r requirements-local.txt -r requirements-dev.txt
	touch $@

setup: system $(INSTALLED)

bundle: setup
	$(BIN)/python -m tools.offline_bundle

demo: bundle
	$(BIN)/python -m service.cli transcribe

serve: bundle
	$(BIN)/python -m service.cli serve

test: bundle
	$(BIN)/python -m pytest -q

container-test: bundle
	rm -rf $(CONTAINER_VENV)
	$(PYTHON) -m venv $(CONTAINER_VENV)
	$(CONTAINER_VENV)/bin/pip install --quiet --upgrade pip
	$(CONTAINER_VENV)/bin/pip install --quiet -r requirements.txt $$(grep '^pytest==' requirements-dev.txt)
	$(CONTAINER_VENV)/bin/python -m pytest -q -p no:cacheprovider container

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(CONTAINER_VENV) .bundle
