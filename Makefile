# docgraph: `make run` indexes the bundled sample corpus and answers two queries;
# `make test` runs the test suite. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The default index of every docgraph command (store.path), so the README's tour runs as
# written after `make run`, without --index and without embedding the corpus again.
DEMO_INDEX := .docgraph/index.db
# Test processes: one per core, at most 4 (pytest-xdist; each test file runs whole in one
# process, so a module's servers start once). TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(max(1, min(4, os.cpu_count() or 1)))")

.PHONY: install run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/docgraph --index $(DEMO_INDEX) index examples/corpus --namespace demo
	$(VENV)/bin/docgraph --index $(DEMO_INDEX) search "What caused the Rotterdam outage?" -k 3
	$(VENV)/bin/docgraph --index $(DEMO_INDEX) search "What does error E-417 mean?" -k 3

test: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

bench: install
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .docgraph .pytest_cache .mypy_cache .ruff_cache
