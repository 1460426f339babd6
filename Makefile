# Thin wrapper over the CMake presets and the Python package. `make run` and `make test` work on a
# fresh machine: they install the pinned dependencies first (scripts/install_deps.sh, and a
# virtualenv .venv from python/requirements-test.txt for the PyTorch operator).
PRESET ?= release
BUILD_DIR := build/$(PRESET)
export PATH := $(PATH):/usr/local/cuda/bin

PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
# Stamps make the Python steps idempotent: the requirements install again only when the pinned
# list changes, the package rebuilds only when a source of it changes (and then incrementally, in
# build/python-<wheel tag>).
# ccache sees paths relative to each build directory: the package's build (as deep as the
# preset's) then reuses the objects the C++ build compiled, the CUTLASS units above all.
export CCACHE_BASEDIR := $(CURDIR)
REQUIREMENTS_STAMP := $(VENV)/.requirements-installed
PACKAGE_STAMP := $(VENV)/.package-installed
PACKAGE_SOURCES := pyproject.toml CMakeLists.txt $(shell find cmake include src python -type f ! -name '*.pyc')

.PHONY: deps configure build python run test test-gpu clean

deps:
	./scripts/install_deps.sh

configure: deps
	cmake --preset $(PRESET)

build: configure
	cmake --build --preset $(PRESET)

# The wheels (2.6 GB, torch's and its CUDA libraries') must not sit beside the 4.7 GB .venv they
# install: CI runs ran out of disk with them in ~/.cache/pip, and again with them all downloaded
# at once by one pip call (7.3 GB at the peak). So --no-cache-dir, and one package a call, whose
# wheel pip deletes once it is installed (peak about 5 GB). --no-deps: the list pins every
# dependency, which pip check confirms.
$(REQUIREMENTS_STAMP): python/requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$$' python/requirements-test.txt | xargs -n 1 \
	  $(VENV_PYTHON) -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps
	$(VENV_PYTHON) -m pip check
	touch $@

$(PACKAGE_STAMP): $(REQUIREMENTS_STAMP) $(PACKAGE_SOURCES)
	$(VENV_PYTHON) -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps .
	touch $@

# The PyTorch operator, built and installed into .venv.
python: deps $(PACKAGE_STAMP)

# The CLI on its default problem (the seed problem; on the GPU if one is present).
run: build
	./$(BUILD_DIR)/tools/gather-linear

# Every test, C++ (CTest) then Python (pytest); GPU tests report as skipped without a GPU.
test: build python
	ctest --preset $(PRESET)
	$(VENV_PYTHON) -m pytest tests/python

test-gpu: build python
	ctest --preset gpu
	$(VENV_PYTHON) -m pytest tests/python -m gpu

clean:
	rm -rf build $(VENV)
