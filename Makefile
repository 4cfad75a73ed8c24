# The two commands of the README, each doing its own set-up.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-on lint install clean bench chaos docs lock

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/interlude demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site (mkdocs.yml) into site/; --strict fails on a broken link or a Python
# name mkdocstrings cannot resolve.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The suite in parallel processes: most acceptance tests wait on real workers, not the CPU.
# Bytecode is written (and read) even where the environment says not to write it
# (PYTHONDONTWRITEBYTECODE): the suite starts hundreds of Python processes (workers, beat,
# CLI commands, the test processes with their rewritten test modules), and each would
# otherwise compile the project's sources again.
# PYTEST_ARGS: more of pytest's options (make test PYTEST_ARGS=--record-durations).
TEST_PROCESSES ?= 4
PYTEST_ARGS ?=
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadgroup
test: lint
	$(PYTEST) $(PYTEST_ARGS)

# The unit and integration tests on another Python, in its own virtualenv (the README promises
# 3.11 or newer): make test-on PYTHON=/path/to/python3.13 VENV=.venv-3.13
test-on: $(BIN)/.installed
	$(PYTEST) tests/unit tests/integration $(PYTEST_ARGS)

# interlude against LangGraph and DBOS (W1, three-step, W4); needs PostgreSQL and Redis local
# and RIVALS_PYTHON, a Python with langgraph langgraph-checkpoint-postgres dbos installed.
bench: $(BIN)/.installed
	@test -n "$(RIVALS_PYTHON)" || { echo "set RIVALS_PYTHON=/path/to/venv/bin/python"; exit 2; }
	$(BIN)/python -m bench.compare --rivals-python $(RIVALS_PYTHON)

# The chaos run (docs/how-to/chaos.md): make chaos MINUTES=12 SEED=7 [BROKER=rabbitmq]
MINUTES ?= 2
SEED ?= 1
BROKER ?= redis
chaos: $(BIN)/.installed
	$(BIN)/python -m bench.chaos --minutes $(MINUTES) --seed $(SEED) --broker $(BROKER)

# The image's pinned packages (deploy/requirements.lock), from this environment's versions.
lock: $(BIN)/.installed
	$(BIN)/python deploy/lock.py

clean:
	rm -rf $(VENV) .interlude *.egg-info site
