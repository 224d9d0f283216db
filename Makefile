PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The demo needs the core package only (no PyTorch); the suite needs the test
# extras and PyTorch with the model libraries behind `hf:`, `timm:`, `torchvision:`.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed

.PHONY: demo test test-full test-stories bench install clean lint

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The demo's install: numpy and numba first (as pyproject.toml requires them),
# then the kernel compiles (the step setup.py runs, two processes where two
# cores are free) while the rest of the core package installs beside it. As in
# setup.py, a kernel that fails to compile fails nothing: the first replay
# compiles it. An interrupted install stops the compile too.
KERNEL_REQUIREMENTS := $(shell sed -n 's/^ *"\(numpy\|numba\)\([^"]*\)",*$$/\1\2/p' pyproject.toml)
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q $(foreach r,$(or $(KERNEL_REQUIREMENTS),numpy numba),'$(r)')
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/python -m dtrforensics.cli.kernel_notice & \
	kernel=$$!; trap 'kill $$kernel 2>/dev/null' INT TERM; \
	DTRF_BUILD_KERNEL=0 $(BIN)/pip install -q -e .; core=$$?; \
	wait $$kernel || echo "dtrforensics: the replay kernel was not compiled: the first replay compiles it"; \
	test $$core = 0
	touch $(DEMO_STAMP)

# The suite's install: the core first without the kernel (DTRF_BUILD_KERNEL=0,
# setup.py), then the kernel compiles on one core (the same step setup.py
# runs) while the extras (PyTorch and its CUDA libraries, mostly unpacking)
# install on the other. As in setup.py, a kernel that fails to compile fails
# nothing: the first replay compiles it. Then the same step once more, which
# only loads the library unless the extras changed what the kernel was
# compiled against (numba, llvmlite: the library's key). After the kernel, that
# core compiles the engine calls the tests make from Python (tests/compile_ahead.py).
$(STAMP): pyproject.toml | $(BIN)/python
	DTRF_BUILD_KERNEL=0 $(BIN)/pip install -q -e .
	{ $(BIN)/python -m dtrforensics.cli.kernel_notice || echo "dtrforensics: the replay kernel \
	was not compiled: the first replay compiles it"; $(BIN)/python tests/compile_ahead.py; } & \
	kernel=$$!; \
	DTRF_BUILD_KERNEL=0 $(BIN)/pip install -q -e '.[test,torch,lint]'; extras=$$?; \
	wait $$kernel; \
	test $$extras = 0
	$(BIN)/python -m dtrforensics.cli.kernel_notice || echo "dtrforensics: the first replay compiles the kernel"
	touch $(STAMP) $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/dtrf demo

# Skipped tests are listed with their reasons (`-rs` in pyproject's addopts).
# The suite runs on every core (pytest-xdist), a module's tests on one worker
# in their order (`--dist loadscope`, scoped in tests/conftest.py). One worker
# more than the cores: a worker waiting on something (a command it started, a
# Dask scheduler, a deadline) leaves its core to another (2 cores: 369 s with
# two workers, 328 s with three). The suite writes Python's bytecode even where
# the environment turns it off (PYTHONDONTWRITEBYTECODE): pytest then keeps its
# rewritten test modules, and the commands the tests start their compiled
# modules, instead of compiling every one from source in every process (a
# worker's collection: 9.5 s of CPU without, 6.6 s with).
PYTEST_WORKERS ?= $(shell $(PY) -c 'import os; print(len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1)')
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist loadscope

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

test-full: $(STAMP)
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist loadscope -m ''

# The published stories on the public traces (InceptionV4 diff and OOM, LSTM figures).
test-stories: $(STAMP)
	$(PYTEST) -q -m slow tests/test_forensics_public.py

bench: $(STAMP)
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/recording.py
	$(BIN)/python benchmarks/sweep.py
	$(BIN)/python benchmarks/sweep_share.py
	$(BIN)/python benchmarks/shared_work.py
	$(BIN)/python benchmarks/cluster.py
	$(BIN)/python benchmarks/trace_cache.py
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/torch_record.py
	$(BIN)/python benchmarks/torch_execute.py
	$(BIN)/python benchmarks/compiled_backend.py
	$(BIN)/python benchmarks/compiled_backend.py --against-knob
	$(BIN)/python benchmarks/policy_cost.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
