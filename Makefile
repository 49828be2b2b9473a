# Entry points: `make demo` and `make test` work on a fresh Debian 12 machine as root.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The project's Python environment (deploy/python-env.sh, docs/PYTHON.md): torch 2.x and the
# frameworks of python/requirements.lock, in a venv cached outside the clone. Everything Python
# below runs on it, with this clone's python/ first on the path (no .pth file, no install).
# (Expanded when used, after `deps` made /usr/bin/python3 and the venv: its key depends on them.)
PY = $(shell bash deploy/python-env.sh --path)/bin/python
PYENV = PTCFS_BUILD=$(abspath $(BUILD)) PTCFS_PYTHON=$(PY) PYTHONPATH=$(abspath python)

.PHONY: deps build compile test unit integration fuzz fuzz-build demo bench clean test-gpu bench-gpu

deps:
	@bash deploy/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps
	@$(MAKE) --no-print-directory compile

# Compiles with what is installed (no install step): the GPU machine, which reaches no registry.
compile: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

unit: build
	cd $(BUILD) && ctest --output-on-failure

integration: build
	$(PYENV) $(PY) -m pytest -q tests/python tests/integration

# The libFuzzer targets (clang, sanitizers) in their own build folder; `make fuzz` runs each
# for FUZZ_SECONDS, `make test` for 30 s (tests/fuzz/README.md).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 300
fuzz-build: deps
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DPTCFS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

fuzz: fuzz-build
	FUZZ_BUILD=$(abspath $(FUZZ_BUILD)) $(PYENV) bash tests/fuzz/run.sh $(FUZZ_SECONDS)

test: unit integration
	$(MAKE) fuzz FUZZ_SECONDS=30

demo: build
	$(PYENV) bash deploy/demo.sh

# Benchmarks against same-run baselines (docs/BENCHMARKS.md "Budgets"): one table, bench/results.json
# and docs/repartition-vs-size.png; a few minutes (docs/BENCHMARKS.md).
bench: build
	@bash deploy/install-deps.sh bench
	$(PYENV) $(PY) bench/run.py

# Every test that needs a GPU (tests/gpu/run.sh): without one it says so and exits non-zero.
# What ran where: docs/BENCHMARKS.md "GPU".
# The GPU machine reaches no registry: only Debian's packages are checked (`gpu`), and the tests
# run on its own torch (tests/gpu/run.sh finds it; PTCFS_PYTHON names another).
test-gpu:
	@bash deploy/install-deps.sh gpu
	@$(MAKE) --no-print-directory compile
	PTCFS_BUILD=$(abspath $(BUILD)) PYTHONPATH=$(abspath python) bash tests/gpu/run.sh

# The GPU load benchmark (bench/bench_gpu.py): ~4 GB into GPU memory against cudaMemcpy from pinned.
bench-gpu: build
	PTCFS_BUILD=$(abspath $(BUILD)) PYTHONPATH=$(abspath python) $${PTCFS_PYTHON:-$(PY)} bench/bench_gpu.py

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
