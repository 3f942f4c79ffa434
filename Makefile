# The README's two commands (`make quickstart`, `make test`); .ci/run runs `make test` too.
# A fresh machine needs only python3, bash and make: everything else is installed into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# transformers 4.57 apart from the dev extras' transformers 5: the reference for bertkit's question-answering
# conventions (tests/hf_qa.py runs its pipeline in a child process; transformers 5 dropped that pipeline)
T4 := $(VENV)/transformers4
T4_PACKAGES := "transformers==4.57.1" "huggingface-hub>=0.34,<1.0" "tokenizers>=0.22,<=0.23.0" requests urllib3 \
	idna charset-normalizer certifi

.PHONY: quickstart test install dev lint

# torch is pinned first, from its CPU build, so that a CPU-only machine never pulls CUDA packages
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0

install: $(BIN)/python
	$(BIN)/pip install -q .

dev: $(BIN)/python
	$(BIN)/pip install -q ".[dev]"
	$(BIN)/pip install -q --upgrade --no-deps --target $(T4) $(T4_PACKAGES)

# the main job on the bundled books: pre-training, the held-out score, a cloze probe, fill-mask examples
quickstart: install
	$(BIN)/bertkit quickstart

lint: dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# two pytest-xdist workers, a test file per worker at a time
test: lint
	BERTKIT_TRANSFORMERS4=$(CURDIR)/$(T4) $(BIN)/python -m pytest -q -n 2 --dist loadfile
