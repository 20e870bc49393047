# strata: top-level entry points. `make demo` and `make test` install what is missing
# (as root, from Debian's packages), build Release with CMake + Ninja, then run.
BUILD     ?= build
JOBS      ?= $(shell nproc)
DEB_PKGS  := cmake ninja-build g++ pkg-config libopenblas-openmp-dev libopenmpi-dev openmpi-bin \
             libcli11-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev libsodium-dev \
             libpng-dev chromium iproute2 libdnnl-dev libicu-dev \
             libsentencepiece-dev sentencepiece libtomlplusplus-dev python3-dev pybind11-dev python3-numpy
STRATA    := $(BUILD)/strata
# `make install`: the strata binary to $(PREFIX)/bin, the Python package to Debian's python3
# path for the prefix (docs/building.md).
PREFIX    ?= /usr/local

.PHONY: all deps test-deps bench-deps pip-deps apt-packages build demo test bench clean install uninstall

all: build

# PyTorch for /usr/bin/python3: the Python package's tests compare with it, and the
# benchmarks' peers are written in it. `make demo` does not need it.
TEST_PKGS  := python3-torch
BENCH_PKGS := $(TEST_PKGS)

deps:
	@$(MAKE) --no-print-directory apt-packages PKGS="$(DEB_PKGS)"

test-deps:
	@$(MAKE) --no-print-directory apt-packages PKGS="$(DEB_PKGS) $(TEST_PKGS)"

bench-deps:
	@$(MAKE) --no-print-directory apt-packages PKGS="$(DEB_PKGS) $(BENCH_PKGS)"

# `pip install --no-build-isolation .` builds with Debian's setuptools and wheel (pyproject.toml,
# setup.py), offline; pip itself and venv for a virtual environment.
PIP_PKGS := python3-pip python3-setuptools python3-wheel python3-venv

pip-deps:
	@$(MAKE) --no-print-directory apt-packages PKGS="$(DEB_PKGS) $(PIP_PKGS)"

# apt-packages PKGS="...": installs those of PKGS that are missing (as root).
apt-packages:
	@missing=""; for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing (run as root, or: sudo apt-get install$$missing)"; exit 1; \
	  fi; \
	fi

# Benchmarks and tools are built only for `make bench` (STRATA_BENCH); `make build` and
# `make test` switch them off again, `make demo` builds the strata binary alone.
$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD)/build.ninja
	cmake -S . -B $(BUILD) -DSTRATA_BENCH=OFF >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

demo: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target strata
	rm -rf runs/demo
	$(STRATA) train --model tiny --data synthetic --seq 64 --batch 16 --steps 600 --lr 3e-3 \
	  --min-lr 1e-4 --weight-decay 0 --eval-every 100 --eval-batches 32 --log-every 20 \
	  --nproc 2 --zero 1 --ckpt-every 200 --run-dir runs/demo

test: test-deps build
	cd $(BUILD) && OMP_NUM_THREADS=1 ctest --output-on-failure -j $(JOBS) --timeout 600

bench: bench-deps $(BUILD)/build.ninja
	cmake -S . -B $(BUILD) -DSTRATA_BENCH=ON >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	bash bench/run_all.sh

# The binary and the Python package (install rules: CMakeLists.txt, python/CMakeLists.txt);
# `cmake --install` lists what it wrote in $(BUILD)/install_manifest.txt, which uninstall reads.
install: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target strata _strata
	cmake --install $(BUILD) --prefix $(PREFIX)

uninstall:
	@test -f $(BUILD)/install_manifest.txt || { echo "no $(BUILD)/install_manifest.txt: nothing installed from $(BUILD)"; exit 1; }
	@pkg=$$(dirname "$$(grep '/_strata[^/]*$$' $(BUILD)/install_manifest.txt)"); \
	xargs -d '\n' rm -fv < $(BUILD)/install_manifest.txt && rm -rf "$$pkg/__pycache__" && \
	{ rmdir "$$pkg" 2>/dev/null; rm -f $(BUILD)/install_manifest.txt; }

clean:
	rm -rf $(BUILD)

# The reference encoders (npm gpt-3-encoder, js-tiktoken) for tools/tokenizer's fixture
# generator and bench/data; neither `make` nor `make test` needs them.
tokenizer-tools:
	cd tools/tokenizer && npm install --no-audit --no-fund
