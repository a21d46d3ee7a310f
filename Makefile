# zeroshard: the entry points. Each target installs what is missing first, so on a
# fresh Debian 12 machine each is one command.
#
#   make train    build and run the main job
#   make test     build and run every test, then print how many ran and passed
#   make bench    build with -c opt and run the benchmark suites
#   make deps     install missing Debian packages (idempotent)
#   make bench-peers  build and run the peers (libtorch's GPT step) at their best;
#                 only where libtorch is installed (WITH_PEERS=1 make deps); the library
#                 and //... never link or build them (docs/peers.md)
#   make CUDA=0 … build CPU-only, even where /usr/local/cuda exists

BAZEL       ?= bazel
# A disk cache in the home directory lets a fresh clone reuse earlier compiles.
DISK_CACHE  ?= $(HOME)/.cache/zeroshard/bazel-disk
BAZEL_FLAGS := --disk_cache=$(DISK_CACHE)
ifeq ($(CUDA),0)
BAZEL_FLAGS += --repo_env=ZEROSHARD_CUDA=0
endif

.PHONY: deps test train bench bench-peers clean

deps:
	@./tools/install_deps.sh

test: deps
	$(BAZEL) test $(BAZEL_FLAGS) --keep_going //... ; status=$$?; \
	  $(BAZEL) query 'tests(//...)' 2>/dev/null | ./tools/test_summary.sh bazel-testlogs; \
	  summary=$$?; \
	  if [ $$status -ne 0 ] || [ $$summary -ne 0 ]; then exit 1; fi

bench: deps
	$(BAZEL) build $(BAZEL_FLAGS) -c opt //bench:all
	./bazel-bin/bench/kernels_bench --benchmark_counters_tabular=true

# The peers: built with g++ against Debian's libtorch, outside Bazel, into build/peers/.
TORCH_HEADER   := /usr/include/torch/csrc/api/include/torch/torch.h
PEER_CXX       ?= g++
PEER_CXXFLAGS  ?= -std=c++17 -O2 -march=native -DNDEBUG -Wall
PEER_INCLUDES  := -I/usr/include/torch/csrc/api/include
PEER_LDLIBS    := -ltorch -ltorch_cpu -lc10 -ldl

build/peers/torch_gpt_step: bench/peers/torch_gpt_step.cc
	@mkdir -p $(@D)
	$(PEER_CXX) $(PEER_CXXFLAGS) $(PEER_INCLUDES) $< -o $@ $(PEER_LDLIBS)

HAVE_TORCH     := $(wildcard $(TORCH_HEADER))

bench-peers:
ifeq ($(HAVE_TORCH),)
	@echo "bench-peers: libtorch is not installed; skipped (install: WITH_PEERS=1 make deps)"
else
	@WITH_PEERS=1 ./tools/install_deps.sh
	@$(MAKE) --no-print-directory build/peers/torch_gpt_step
	./build/peers/torch_gpt_step --check_golden=tests/testdata/gpt_golden.safetensors --threads=1
	./tools/peers/run_step_peers.sh
	@if [ -f tools/peers/torch_adamw_bench.py ]; then \
	  echo "OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 tools/peers/torch_adamw_bench.py"; \
	  OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 tools/peers/torch_adamw_bench.py; \
	fi
endif

clean:
	$(BAZEL) clean
