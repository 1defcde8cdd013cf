# `make demo` and `make test` create .venv on first use, install the exact versions of
# requirements/dev.lock into it (the test tools and a CPU build of torch, so the tests
# against PyTorch run), then gradcli itself, and run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LOCK   := requirements/dev.lock

.PHONY: demo test test-latest test-torch test-gpu lock bench bytecode clean

# An editable install (-e) leaves gradcli's bytecode to its first runs (pip compiles
# only the files a regular install copies), and where bytecode is not written
# (PYTHONDONTWRITEBYTECODE=1, a read-only checkout) every start would compile every
# module again: the install step compiles the package, and `bytecode` (which demo,
# test and bench run) recompiles what changed since.
$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m compileall -q gradcli
	touch $(STAMP)

bytecode: $(STAMP)
	$(BIN)/python -m compileall -q gradcli

demo: bytecode
	$(BIN)/gradcli run graphs/mlp.yaml

test: bytecode
	$(BIN)/python -m pytest -q

# The newest releases that pyproject.toml admits, in a venv of their own, so that a
# release that breaks gradcli is seen here before a user meets it.
test-latest:
	test -x .venv-latest/bin/python || $(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --quiet --upgrade pip
	.venv-latest/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[dev,torch,onnx,dask]'
	.venv-latest/bin/python -m pip list --format freeze | grep -i -E '^(numpy|pyyaml|click|rich|torch|pytest|hypothesis)=='
	.venv-latest/bin/python -m pytest -q -p no:cacheprovider

# The tests that run PyTorch (marked `torch` by tests/conftest.py), against another torch
# release: make test-torch TORCH=2.14.1. The rest of the lock stays as it is.
TORCH ?= 2.14.1
test-torch:
	test -x .venv-torch-$(TORCH)/bin/python || $(PYTHON) -m venv .venv-torch-$(TORCH)
	.venv-torch-$(TORCH)/bin/python -m pip install --quiet --upgrade pip
	grep -v '^torch==' $(LOCK) > .venv-torch-$(TORCH)/lock.txt
	.venv-torch-$(TORCH)/bin/python -m pip install --quiet -r .venv-torch-$(TORCH)/lock.txt 'torch==$(TORCH)'
	.venv-torch-$(TORCH)/bin/python -m pip install --quiet --no-deps -e .
	.venv-torch-$(TORCH)/bin/python -m pytest -q -p no:cacheprovider -m torch

# The tests that need a CUDA device (marked `gpu`); elsewhere they are reported as skipped.
test-gpu: bytecode
	$(BIN)/python -m pytest -q -m gpu -rs

# Refresh requirements/dev.lock (see "Refreshing the lock" in docs/development.md).
# pip-tools resolves with pip itself, so it honours the same pip configuration that
# installs the lock; torch is held at requirements/torch.txt's release, a CPU build.
lock:
	test -x .venv-lock/bin/python || $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet 'pip-tools==7.6.2'
	.venv-lock/bin/pip-compile --quiet --upgrade --extra dev --extra torch --extra onnx --extra dask --strip-extras \
	    --allow-unsafe --no-emit-index-url --no-emit-find-links -c requirements/torch.txt \
	    -o $(LOCK) pyproject.toml
	sed -i -e 's/^torch==\([^+]*\)+cpu$$/torch==\1/' $(LOCK)

# PyTorch figures appear where `import torch` works in that venv; BENCH_ARGS=--quick for a smoke run.
BENCH_ARGS ?=
bench: bytecode
	$(BIN)/python scripts/bench_engine.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-latest .venv-lock .venv-torch-* build *.egg-info
