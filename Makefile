# `make demo` and `make test` create .venv on first use, install gradcli into it (with the
# torch extra, so the tests against PyTorch run: torch==2.13.*, a CPU build here), and run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,torch]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gradcli run graphs/mlp.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

# PyTorch figures appear where `import torch` works in that venv; BENCH_ARGS=--quick for a smoke run.
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python scripts/bench_engine.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
