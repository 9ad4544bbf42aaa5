# qkv: the two commands of the quick start, and the longer jobs.
#   make train   install what is missing, build, train the default config
#   make test    install what is missing, build, run the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)
CONFIG ?= configs/sort.yaml
CMAKE_FLAGS ?=

.PHONY: all deps build train test asan bench perf experiments experiments-quick fuzz clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

train: build
	$(BUILD)/qkv train $(CONFIG)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DQKV_SANITIZE=ON -DQKV_BUILD_EXAMPLES=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) build-asan build-bench build-fuzz
