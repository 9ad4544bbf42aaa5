# qkv: the two commands of the quick start, and the longer jobs.
#   make train   install what is missing, build, train the default config
#   make test    install what is missing, build, run the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)
CONFIG ?= configs/sort.yaml
CMAKE_FLAGS ?=

.PHONY: all deps build train test tour test-torch asan package bench experiments experiments-quick fuzz clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

train: build
	$(BUILD)/qkv train $(CONFIG)

# CTest, then what ran: tests run, passed, failed and skipped (a skip fails under CI=true).
test: build
	@cd $(BUILD) && { ctest --output-on-failure -j $(JOBS) --output-junit ctest-junit.xml; rc=$$?; \
	  /usr/bin/python3 $(CURDIR)/tests/suite_summary.py ctest-junit.xml || rc=1; exit $$rc; }

# The guided tour as written: every command, the long trainings included, and every number it
# quotes checked against the output (make test runs the short ones; about 15 minutes on 2 cores).
tour: build
	/usr/bin/python3 tests/tour/test_tour.py --qkv $(BUILD)/qkv --workdir $(BUILD)/tour --long

# The PyTorch bridge, both ways (needs python3-torch: scripts/install-deps.sh --python).
test-torch: build
	@scripts/install-deps.sh --python
	/usr/bin/python3 tests/torch/test_bridge.py --qkv $(BUILD)/qkv

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DQKV_SANITIZE=ON -DQKV_BUILD_EXAMPLES=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && { LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -j $(JOBS) \
	  --output-junit ctest-junit.xml; rc=$$?; /usr/bin/python3 $(CURDIR)/tests/suite_summary.py ctest-junit.xml || rc=1; exit $$rc; }

# The CMake package and the Debian package (docs/packaging.md): a portable build for /usr in
# build-pkg/, installed into a temporary prefix for examples/consumer, then the .deb built, and
# (as root) installed, run and removed again.
package: deps
	@cmake -S . -B build-pkg -DCMAKE_BUILD_TYPE=Release -DQKV_NATIVE=OFF -DCMAKE_INSTALL_PREFIX=/usr \
	  -DQKV_BUILD_TESTS=OFF -DQKV_BUILD_EXAMPLES=OFF >/dev/null
	@cmake --build build-pkg -j $(JOBS) --target qkv qkv_cli
	tools/check_package.sh build-pkg

# Google Benchmark micro-benchmarks and the training-step benchmark (build-bench/bench/).
bench: deps
	@cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DQKV_BUILD_BENCH=ON -DQKV_BUILD_TESTS=OFF >/dev/null
	@cmake --build build-bench -j $(JOBS)

# The experiments: the first report (experiments/first-report/, tools/run_experiments.sh, about 40
# minutes on 2 cores) and the current one (experiments/README.md, tools/experiments/run.sh, about
# 10 hours, an estimate); --quick: a few minutes for the first, about 6 for the second, into runs/ only.
experiments: build
	tools/run_experiments.sh --qkv $(BUILD)/qkv
	tools/experiments/run.sh --qkv $(BUILD)/qkv

experiments-quick: build
	tools/run_experiments.sh --quick --qkv $(BUILD)/qkv
	tools/experiments/run.sh --quick --qkv $(BUILD)/qkv

# libFuzzer on the config parser and the checkpoint loader (clang, build-fuzz/), 60 s each.
fuzz: deps
	tools/fuzz.sh 60

clean:
	rm -rf $(BUILD) build-asan build-bench build-fuzz build-pkg
