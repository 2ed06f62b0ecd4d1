# Set-up is part of every target: a venv with pinned packages, then the offline model bundle.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: setup bundle demo serve test lint clean

$(INSTALLED): requirements.txt requirements-local.txt requirements-bundle.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -r requirements-local.txt -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps --require-hashes -r requirements-bundle.txt
	touch $@

setup: $(INSTALLED)

bundle: setup
	$(BIN)/python offline_bundle.py

demo: bundle
	$(BIN)/python -m cli transcribe

serve: bundle
	$(BIN)/python -m cli serve

test: bundle
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .bundle
