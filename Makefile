# Entry points: `make demo` and `make test` work on a fresh Debian 12 machine as root.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
PY := /usr/bin/python3

.PHONY: deps build python test unit integration fuzz fuzz-build demo bench clean test-gpu bench-gpu

deps:
	@bash deploy/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

unit: build
	cd $(BUILD) && ctest --output-on-failure

# `import ptcfs` works with /usr/bin/python3: a .pth file puts <repo>/python on its path.
python: deps
	@d="$$($(PY) -c 'import site; print(site.getsitepackages()[0])')" && mkdir -p "$$d" && \
	  echo "$(abspath python)" > "$$d/ptcfs.pth"

integration: build python
	PTCFS_BUILD=$(abspath $(BUILD)) $(PY) -m pytest -q tests/python tests/integration

# The libFuzzer targets (clang, sanitizers) in their own build folder; `make fuzz` runs each
# for FUZZ_SECONDS, `make test` for 30 s (tests/fuzz/README.md).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 300
fuzz-build: deps
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DPTCFS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

fuzz: fuzz-build
	FUZZ_BUILD=$(abspath $(FUZZ_BUILD)) bash tests/fuzz/run.sh $(FUZZ_SECONDS)

test: unit integration
	$(MAKE) fuzz FUZZ_SECONDS=30

demo: build python
	PTCFS_BUILD=$(abspath $(BUILD)) bash deploy/demo.sh

# Benchmarks against same-run baselines (docs/BENCHMARKS.md "Budgets"): one table, bench/results.json
# and docs/repartition-vs-size.png; a few minutes (docs/BENCHMARKS.md).
bench: build
	@bash deploy/install-deps.sh bench
	PTCFS_BUILD=$(abspath $(BUILD)) $(PY) bench/run.py

# Every test that needs a GPU (tests/gpu/run.sh): without one it says so and exits non-zero.
# What ran where: docs/BENCHMARKS.md "GPU".
test-gpu: build python
	PTCFS_BUILD=$(abspath $(BUILD)) bash tests/gpu/run.sh

# The GPU load benchmark (bench/bench_gpu.py): ~4 GB into GPU memory against cudaMemcpy from pinned.
bench-gpu: build python
	PTCFS_BUILD=$(abspath $(BUILD)) $${PTCFS_PYTHON:-python3} bench/bench_gpu.py

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
