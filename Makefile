# Entry points: `make demo` and `make test` work on a fresh Debian 12 machine as root.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
PY := /usr/bin/python3

.PHONY: deps build python test unit integration demo bench clean

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

test: unit integration

demo: build python
	PTCFS_BUILD=$(abspath $(BUILD)) bash deploy/demo.sh

# Benchmarks against same-run baselines (DESIGN.md "Budgets"): one table, bench/results.json
# and docs/repartition-vs-size.png; a few minutes (docs/BENCHMARKS.md).
bench: build
	@bash deploy/install-deps.sh bench
	PTCFS_BUILD=$(abspath $(BUILD)) $(PY) bench/run.py

clean:
	rm -rf $(BUILD)
