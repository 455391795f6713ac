# Two commands do all the set-up: `make serve` and `make test`. Both create or reuse .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8080
ARGS   ?=

.PHONY: serve test lint fmt bench-loop clean

serve: $(VENV)/.installed
	$(BIN)/rtc-agent serve --host $(HOST) --port $(PORT) $(ARGS)

test: $(VENV)/.installed-dev
	$(BIN)/ruff check rtc_agent tests
	$(BIN)/pytest -q $(ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check rtc_agent tests

fmt: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix rtc_agent tests

bench-loop: $(VENV)/.installed
	$(BIN)/rtc-agent bench loop --out docs/benchmarks/loop.json

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $(VENV)/.installed $@

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
