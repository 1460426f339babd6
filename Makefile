# Thin wrapper over the CMake presets. `make run` and `make test` work on a fresh machine:
# they install the pinned dependencies first (scripts/install_deps.sh).
PRESET ?= release
BUILD_DIR := build/$(PRESET)
export PATH := $(PATH):/usr/local/cuda/bin

.PHONY: deps configure build run test test-gpu clean

deps:
	./scripts/install_deps.sh

configure: deps
	cmake --preset $(PRESET)

build: configure
	cmake --build --preset $(PRESET)

# The CLI on its default problem (the seed problem; on the GPU if one is present).
run: build
	./$(BUILD_DIR)/tools/gather-linear

# Every test; GPU tests report as skipped on a machine without a GPU.
test: build
	ctest --preset $(PRESET)

test-gpu: build
	ctest --preset gpu

clean:
	rm -rf build
