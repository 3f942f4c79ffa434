# The README's two commands (`make quickstart`, `make test`); .ci/run runs `make test` too.
# A fresh machine needs only python3, bash and make: everything else is installed into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: quickstart test install dev lint qa-reference

# torch is pinned first, from its CPU build, so that a CPU-only machine never pulls CUDA packages
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0

install: $(BIN)/python
	$(BIN)/pip install -q .

# editable: the tests (and a developer's `pytest FILES`) run the code in src/, not a copy installed earlier
dev: $(BIN)/python
	$(BIN)/pip install -q -e ".[dev]"

# the main job on the bundled books: pre-training, the held-out score, a cloze probe, fill-mask examples
quickstart: install
	$(BIN)/bertkit quickstart

lint: dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# two pytest-xdist workers, a test file per worker at a time. Developers: run the files you changed with
# `$(BIN)/python -m pytest -q -n 0 FILES`; tests/README.md says which file covers what (each behaviour once).
# The 15 slowest tests are listed at the end: the suite's target is 4 minutes on 2 cores.
test: lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15

# transformers 4.57.1's question-answering answers for the QA fixture (tests/hf_qa.py), the reference that
# tests/parity/test_pipeline_parameters.py reads from tests/fixtures/qa/hf_qa_reference.json.gz: transformers 5
# dropped that pipeline, so the script installs 4.57.1 into a throwaway directory and runs it there. Run it when
# the test says the fixture changed. (tests/data/test_qa_agreement.py runs the pipeline live: see tests/hf_qa.py.)
qa-reference: dev
	$(BIN)/python tests/fixtures/qa/regenerate.py
