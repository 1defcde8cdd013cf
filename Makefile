# `make demo` and `make test` create .venv on first use, install gradcli into it (with the
# torch extra, so the tests against PyTorch run: torch==2.13.*, a CPU build here), and run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench bytecode clean

# An editable install (-e) leaves gradcli's bytecode to its first runs (pip compiles
# only the files a regular install copies), and where bytecode is not written
# (PYTHONDONTWRITEBYTECODE=1, a read-only checkout) every start would compile every
# module again: the install step compiles the package, and `bytecode` (which demo,
# test and bench run) recompiles what changed since.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,torch]'
	$(BIN)/python -m compileall -q gradcli
	touch $(STAMP)

bytecode: $(STAMP)
	$(BIN)/python -m compileall -q gradcli

demo: bytecode
	$(BIN)/gradcli run graphs/mlp.yaml

test: bytecode
	$(BIN)/python -m pytest -q

# PyTorch figures appear where `import torch` works in that venv; BENCH_ARGS=--quick for a smoke run.
BENCH_ARGS ?=
bench: bytecode
	$(BIN)/python scripts/bench_engine.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
