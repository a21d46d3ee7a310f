# zeroshard: the entry points. Each target installs what is missing first, so on a
# fresh Debian 12 machine each is one command.
#
#   make train    build and run the main job
#   make test     check that no include points up a layer (tools/check_layers.sh),
#                 build and run every test, then print how many ran and passed;
#                 then make isa-test, make sim-test, make bundle-sim-test and
#                 make consumer-test
#   make isa-test the numerics tests (kernels, autograd, optim, sharded parity,
#                 checkpoints, the GPT job) again with ZEROSHARD_CPU_ISA=baseline
#   make bench    build with -c opt and run the benchmark suites; each writes JSON
#                 under bench/results/<machine>/<UTC date>_<commit>/<suite>.json
#   make bench-docs RESULTS=bench/results/<machine>[/<run>]  rewrite the generated
#                 tables of docs/benchmarks.md from stored results (tools/bench_docs)
#   make gpu-test on a GPU machine: every test tagged "gpu" (CUDA kernels and
#                 attention against their CPU twins, allocator, AdamW, a GPT on CUDA,
#                 NCCL collectives, a sharded GPT on GPUs), run afresh; elsewhere a
#                 message, exit 0
#   make gpu-bench on a GPU machine: bench/cuda_bench (GB/s beside memcpy, TFLOP/s
#                 beside cuBLAS, attention ours beside cuDNN, GPT step tokens/s and
#                 MFU, NCCL busbw beside raw NCCL); elsewhere a message, exit 0.
#                 See docs/gpu.md.
#   make gpu-bundle  gpu_bundle/: the GPU tests, cuda_bench, train_gpt and the record
#                 writer built with CUDA (and again for the simulator), their
#                 libraries and run.sh, for a GPU machine without Bazel: there
#                 `gpu_bundle/run.sh OUTDIR` writes OUTDIR/record.json and summary.md
#   make gpu-check RECORD=OUTDIR/record.json  fails on any problem in a record
#   make bundle-sim-test  the bundle's run.sh --sim on a few GPU tests, cuda_bench
#                 --quick and the job, whose record must pass gpu-check (`make test`
#                 runs it). docs/gpu.md.
#   make sim-train the main job (examples/configs/default.json, 4 steps) on 2
#                 simulated GPUs as 2 processes (mpirun and torchrun-style), on 2
#                 GPU threads, resumed from its step-2 checkpoint, and on 2 CPU
#                 ranks, for FULL_SHARD and HYBRID_SHARD; prints the loss lists
#                 and checks them (tools/sim_train.sh; docs/launch.md).
#                 SIM_TRAIN_ARGS="--shrink" for a model ~10x cheaper
#   make sim-test the same GPU tests on any machine, the device being the CPU
#                 simulator (--define=cuda_sim=1, tools/cuda/sim): our kernels run
#                 through the op entries, allocator and copies, with stand-ins for
#                 cudart, cuBLASLt and NCCL; cuDNN cases skip. `make test` runs it too.
#   make install PREFIX=/some/where  the library for other build systems:
#                 include/zeroshard/..., lib/libzeroshard.{a,so} (the CUDA kernels
#                 in them when the build has CUDA), lib/cmake/zeroshard
#                 (find_package(zeroshard), target zeroshard::zeroshard) and
#                 lib/pkgconfig/zeroshard.pc. docs/embedding.md
#   make consumer-test  install into a temporary prefix, check the installed
#                 headers include nothing outside it, then build and run
#                 tests/consumer with CMake and a one-file program with
#                 pkg-config (`make test` runs it)
#   make bazel-consumer-test  tests/bazel_consumer: another Bazel workspace that
#                 depends on this one (@zeroshard//:zeroshard)
#   make deps     install missing Debian packages (idempotent)
#   make bench-peers  build and run the peers (libtorch's GPT and Llama steps) at their best;
#                 only where libtorch is installed (WITH_PEERS=1 make deps); the library
#                 and //... never link or build them (docs/peers.md)
#   make sanitize the tests under ASan + LSan + UBSan and TSan (a chosen set:
#                 SANITIZE_TESTS, TSAN_TESTS; docs/reliability.md)
#   make ci-sanitize  the parsers' corpus tests under ASan + LSan + UBSan (the
#                 part of make sanitize that .ci/run adds after make test)
#   make fuzz     libFuzzer + ASan + UBSan on the safetensors reader, the
#                 manifest, token files and the config reader, FUZZ_SECONDS each
#                 (default 600); their corpora also run in make test
#   make faults   the fault-injection suite (tools/faults.sh): kill -9 during
#                 saves, resumed bitwise, FAULT_TRIALS each (default 20); writes
#                 its table into docs/reliability.md; a few trials run in make test
#   make soak     the main job for SOAK_STEPS steps (default 20000) with async
#                 saves, watching memory, descriptors and checkpoints on disk
#                 (tools/soak.sh); neither is part of make test
#   make CUDA=0 … build CPU-only, even where /usr/local/cuda exists

BAZEL       ?= bazel
# A disk cache in the home directory lets a fresh clone reuse earlier compiles.
DISK_CACHE  ?= $(HOME)/.cache/zeroshard/bazel-disk
BAZEL_FLAGS := --disk_cache=$(DISK_CACHE)
# Flags `bazel query` shares with the builds, so it lists the same targets.
QUERY_FLAGS :=
ifeq ($(CUDA),0)
BAZEL_FLAGS += --repo_env=ZEROSHARD_CUDA=0
QUERY_FLAGS += --repo_env=ZEROSHARD_CUDA=0
endif

.PHONY: install consumer-test bazel-consumer-test deps test train config-doc bench bench-docs bench-peers fuzz sanitize sanitize-asan sanitize-tsan ci-sanitize faults soak plot clean gpu-test gpu-bench sim-test sim-train \
	isa-test gpu-bundle gpu-check bundle-sim-test sim-validate

# The main job: a GPT trained with FULL_SHARD over 4 in-process ranks on the
# bundled Shakespeare (bytes), as examples/configs/default.json says; the run
# folder is work_dirs/default/<timestamp>/. Extra flags:
#   make train ARGS="--steps=50 --set strategy.forward_prefetch=true"
#   make train TRAIN_ARGS=--config=examples/configs/bf16.json
TRAIN_ARGS ?= --config=examples/configs/default.json

deps:
	@./tools/install_deps.sh

PREFIX ?= /usr/local
install: deps
	$(BAZEL) build $(BAZEL_FLAGS) //:install_tree
	./tools/install.sh bazel-bin/install_tree "$(PREFIX)"

consumer-test: deps
	@tmp=$$(mktemp -d /tmp/zeroshard-consumer.XXXXXX); \
	  $(MAKE) --no-print-directory install PREFIX=$$tmp/prefix && \
	  ./tools/consumer_test.sh $$tmp/prefix $$tmp/build; status=$$?; \
	  rm -rf $$tmp; exit $$status

bazel-consumer-test: deps
	./tools/bazel_consumer_test.sh

test: deps
	./tools/check_layers.sh
	$(BAZEL) test $(BAZEL_FLAGS) --keep_going //... ; status=$$?; \
	  $(BAZEL) query $(QUERY_FLAGS) 'tests(//...)' 2>/dev/null | ./tools/test_summary.sh bazel-testlogs; \
	  summary=$$?; \
	  if [ $$status -ne 0 ] || [ $$summary -ne 0 ]; then exit 1; fi
	$(MAKE) --no-print-directory isa-test
	$(MAKE) --no-print-directory sim-test
	$(MAKE) --no-print-directory bundle-sim-test
	$(MAKE) --no-print-directory consumer-test

# The numerics tests again on the portable code path (ZEROSHARD_CPU_ISA=baseline:
# plain x86-64 loops and Eigen's SSE2 GEMM), whatever this processor has, so
# every machine checks the path an older or different one would take. The
# tests of "bitwise the same on every instruction set" inside them loop over
# every level the processor runs (kernels/cpu/isa.h SupportedCpuIsas).
ISA_TESTS := //tests/kernels/... //tests/autograd/... //tests/optim/... //tests/sharding/... \
             //tests/checkpoint:checkpoint_test //tests/train:train_gpt_test
isa-test: deps
	@echo "CPU: $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); the numerics tests on ZEROSHARD_CPU_ISA=baseline:"
	$(BAZEL) test $(BAZEL_FLAGS) --keep_going --test_tag_filters=-gpu --test_env=ZEROSHARD_CPU_ISA=baseline \
	  $(ISA_TESTS) ; status=$$?; \
	  q=$$(echo $(ISA_TESTS) | sed 's/ / + /g'); \
	  $(BAZEL) query $(QUERY_FLAGS) "tests($$q) except attr(tags, '\bgpu\b', tests($$q))" 2>/dev/null | \
	    ./tools/test_summary.sh bazel-testlogs; \
	  summary=$$?; \
	  if [ $$status -ne 0 ] || [ $$summary -ne 0 ]; then exit 1; fi

# The GPU tests with the CPU simulator as the device (see tools/cuda/sim/cuda_sim.h).
# Needs the CUDA toolkit's headers (the vendor libraries are linked, not run).
sim-test: deps
	@if [ "$(CUDA)" = "0" ] || [ ! -x "$${ZEROSHARD_CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then \
	  echo "make sim-test: no CUDA toolkit (or CUDA=0): the simulated-device build needs its headers; skipped."; \
	  exit 0; \
	fi; \
	$(BAZEL) test $(BAZEL_FLAGS) --define=cuda_sim=1 --test_tag_filters=gpu --build_tests_only \
	  --keep_going //... ; \
	  status=$$?; \
	  echo "The GPU tests again, on the simulated device (--define=cuda_sim=1):"; \
	  $(BAZEL) query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null | ./tools/test_summary.sh bazel-testlogs; \
	  summary=$$?; \
	  if [ $$status -ne 0 ] || [ $$summary -ne 0 ]; then exit 1; fi

# The main job as people run it on GPUs, on the simulator (issue 20): 2
# processes under mpirun and started torchrun-style, 2 threads, a resume and
# the CPU job; tools/sim_train.sh prints the three loss lists and fails unless
# the GPU runs agree bitwise and the CPU run is within its derived fp32 bound.
# The build is sim-test's (--define=cuda_sim=1), so after it nothing compiles.
# About 10 minutes at the config's size on 2 busy cores; SIM_TRAIN_ARGS adds
# flags (--shrink, --steps=N, --save_at=K, --strategies=..., -- train_gpt flags).
SIM_TRAIN_ARGS ?=
sim-train: deps
	@if $(NO_TOOLKIT); then \
	  echo "make sim-train: no CUDA toolkit (or CUDA=0): the simulated-device build needs its headers."; exit 1; fi
	$(BAZEL) build $(BAZEL_FLAGS) --define=cuda_sim=1 //examples:train_gpt
	./tools/sim_train.sh bazel-bin/examples/train_gpt $(SIM_TRAIN_ARGS)

# The GPU visit in one folder (docs/gpu.md, "The GPU bundle"): the programs of
# tools/gpu_bundle/targets.txt built with CUDA and linked to shared libraries
# (--dynamic_mode=fully: one copy of each), then the same for the simulator
# (gpu_bundle/sim/), with run.sh and the PyTorch baseline. At most 64 MiB. Every
# gpu-tagged cc_test must be listed (the sh_test //bench:cuda_bench_test is not a
# program to carry: run.sh's bench step runs cuda_bench itself).
GPU_BUNDLE_TARGETS = $$(grep -v '^\#' tools/gpu_bundle/targets.txt | cut -d' ' -f1)
GPU_BUNDLE_SIM_TARGETS = $$(grep -v '^\#' tools/gpu_bundle/targets.txt | grep -v gpu-only | cut -d' ' -f1)
NO_TOOLKIT = [ "$(CUDA)" = "0" ] || [ ! -x "$${ZEROSHARD_CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]

gpu-bundle: deps
	@if $(NO_TOOLKIT); then \
	  echo "make gpu-bundle: no CUDA toolkit (or CUDA=0): nothing to bundle."; exit 1; fi
	@missing=$$($(BAZEL) query 'kind(cc_test, attr(tags, "\bgpu\b", tests(//...)))' 2>/dev/null | \
	  while read t; do grep -q "^$$t\b" tools/gpu_bundle/targets.txt || echo "$$t"; done); \
	  if [ -n "$$missing" ]; then \
	    echo "make gpu-bundle: GPU tests missing from tools/gpu_bundle/targets.txt: $$missing"; exit 1; fi
	$(BAZEL) build $(BAZEL_FLAGS) --dynamic_mode=fully $(GPU_BUNDLE_TARGETS)
	./tools/gpu_bundle/make_bundle.sh gpu_bundle bazel-bin
	$(BAZEL) build $(BAZEL_FLAGS) --dynamic_mode=fully --define=cuda_sim=1 $(GPU_BUNDLE_SIM_TARGETS)
	./tools/gpu_bundle/make_bundle.sh --sim gpu_bundle bazel-bin

# run.sh --sim over a few GPU test programs, cuda_bench --quick and the job (the
# CPU simulator as the device): the bundle's layout, libraries, steps and record
# stay working between GPU visits. The record must pass gpu-check.
BUNDLE_SIM_TESTS ?= cuda_rows_test,strided_copy_test,cuda_gpt_test,train_gpt_gpu_test
bundle-sim-test:
	@if $(NO_TOOLKIT); then \
	  echo "make bundle-sim-test: no CUDA toolkit (or CUDA=0): skipped."; exit 0; fi
	$(MAKE) --no-print-directory gpu-bundle
	rm -rf gpu_bundle_sim_run
	./gpu_bundle/run.sh --sim --tests=$(BUNDLE_SIM_TESTS) gpu_bundle_sim_run > gpu_bundle_sim_run.log 2>&1 || \
	  { tail -40 gpu_bundle_sim_run.log; exit 1; }
	./gpu_bundle/sim/bin/gpu_record --check=gpu_bundle_sim_run/record.json

# Exits non-zero on any problem in a GPU record (a failed test or step, a crash,
# a sanitizer error, cuDNN refusing where it should run, a missing figure).
gpu-check:
	@test -n "$(RECORD)" || { echo "usage: make gpu-check RECORD=OUTDIR/record.json"; exit 2; }
	$(BAZEL) build $(BAZEL_FLAGS) //tools/gpu_bundle:gpu_record
	./bazel-bin/tools/gpu_bundle/gpu_record --check=$(RECORD)

train: deps
	$(BAZEL) build $(BAZEL_FLAGS) -c opt //examples:train_gpt
	OMP_WAIT_POLICY=PASSIVE ./bazel-bin/examples/train_gpt $(TRAIN_ARGS) $(ARGS)

# docs/config.md, the config reference, from the field table of
# train/config_schema.cc (//tests/train:config_doc_test fails until it is current).
config-doc: deps
	$(BAZEL) build $(BAZEL_FLAGS) //tools:config_doc
	./bazel-bin/tools/config_doc > docs/config.md

# The simulator against this machine (issue 24, docs/simulator.md): calibrates
# a CPU profile here, runs the main job's step for real under every strategy at
# world 1, 2 and 4, simulates the same and prints them side by side; fails
# beyond 15% step time, 5 points of exposed communication or 5% peak memory.
# SIM_VALIDATE_ARGS adds flags (--steps, --worlds, --config).
sim-validate: deps
	$(BAZEL) build $(BAZEL_FLAGS) -c opt //sim:sim_validate
	OMP_WAIT_POLICY=PASSIVE ./bazel-bin/sim/sim_validate $(SIM_VALIDATE_ARGS)

bench: deps
	$(BAZEL) build $(BAZEL_FLAGS) -c opt //bench:all
	./tools/run_benchmarks.sh

# The regions of docs/benchmarks.md marked <!-- bench:SUITE begin/end --> rewritten from
# stored results (tools/bench_docs.cc): RESULTS is a machine folder (the newest run with
# each suite) or one run folder; the default is the runs committed as the docs' data.
RESULTS ?= bench/results/amd-epyc-2c
bench-docs: deps
	BAZEL="$(BAZEL)" DISK_CACHE="$(DISK_CACHE)" CUDA="$(CUDA)" ./tools/bench_docs $(RESULTS)

# GPU suites: no GPU (or a CPU-only build) is not a failure, only nothing to run.
# Test results are never taken from the cache: one cached on a machine without
# a GPU (where every GPU test skips) says nothing about this one.
gpu-test: deps
	@if ! ./tools/cuda/has_gpu.sh; then \
	  echo "make gpu-test: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing to run."; \
	  echo "The GPU tests also run, and skip, in 'make test'. See docs/gpu.md."; \
	  exit 0; \
	fi; \
	$(BAZEL) test $(BAZEL_FLAGS) --nocache_test_results --test_tag_filters=gpu \
	  --test_output=errors --test_summary=detailed //tests/...

gpu-bench: deps
	@if ! ./tools/cuda/has_gpu.sh; then \
	  echo "make gpu-bench: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing to measure."; \
	  echo "See docs/gpu.md."; \
	  exit 0; \
	fi; \
	$(BAZEL) build $(BAZEL_FLAGS) -c opt //bench:cuda_bench && BENCH=cuda ./tools/run_benchmarks.sh

# loss.png and memory.png beside a run's metrics.csv (default: the newest run
# under work_dirs/; make plot RUN=work_dirs/default/<timestamp>). Needs gnuplot-nox.
plot:
	@dpkg-query -W -f='$${Status}' gnuplot-nox 2>/dev/null | grep -q "install ok installed" || \
	  { echo "installing gnuplot-nox"; $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -qq gnuplot-nox; }
	./tools/plot/plot_metrics.sh $(RUN)

# libFuzzer runs (clang-14, libFuzzer + ASan + UBSan, built by Bazel with
# --config=fuzz) of the safetensors reader, the checkpoint manifest, token files
# and the config reader, FUZZ_SECONDS each (default 600), on copies of their
# committed corpora; FUZZ_TARGETS=config,token_data picks some (tools/fuzz.sh).
# Needs clang-14, libclang-rt-14-dev, libomp-14-dev (installed if missing).
fuzz: deps
	@for p in clang-14 libclang-rt-14-dev libomp-14-dev; do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || \
	  { echo "installing $$p"; $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -qq $$p; }; done
	BAZEL="$(BAZEL)" BAZEL_FLAGS="$(BAZEL_FLAGS)" ./tools/fuzz.sh

# The tests again under the sanitizers (.bazelrc configs; docs/reliability.md,
# "Sanitizers and fuzzing"), CPU-only, each config in its own output directory:
#   ASan + LSan + UBSan (fatal) over SANITIZE_TESTS,
#   TSan over TSAN_TESTS (threads: in-process ranks, communication threads,
#   async saves, NVMe swap I/O, the watchdog; OpenMP teams capped at one thread,
#   as libgomp is not instrumented; Debian's Abseil is not instrumented either,
#   and tools/sanitizers:absl_tsan, linked into the tests, tells TSan about
#   absl::Mutex and friends).
# GPU-tagged tests are left out (no CUDA in these builds).
SANITIZE_TESTS ?= //tests/runtime/... //tests/collectives/... //tests/checkpoint/... //tests/data/... \
	//tests/train:config_read_test //tests/train:config_errors_test //tests/train:config_deepspeed_test \
	//tests/train:config_resnet_test //tests/train:config_schema_test //tests/train:config_fuzz_test \
	//tests/train:log_sink_test //tests/train:progress_test //tests/train:tensorboard_test \
	//tests/kernels:flat_buffer_test //tests/kernels:attention_test //tests/kernels:dropout_test \
	//tests/optim/...
TSAN_TESTS ?= //tests/collectives:local_communicator_test //tests/collectives:watchdog_test \
	//tests/checkpoint:checkpoint_test //tests/checkpoint:safetensors_test //tests/runtime/nvme:swap_test \
	//tests/sharding:nvme_offload_test //tools/sanitizers:absl_tsan_test
# CI's sanitizer pass (.ci/run, after make test): the corpus regression tests of
# the four fuzz targets - the safetensors reader, the checkpoint manifest, token
# files and the config reader, the parsers of untrusted bytes where the
# overflows of issue 26 were found - under ASan + LSan + UBSan, every report
# fatal. The whole SANITIZE_TESTS pass does not fit CI's budget beside make test
# (docs/reliability.md gives both costs).
CI_SANITIZE_TESTS ?= //tests/checkpoint:safetensors_fuzz_test //tests/checkpoint:manifest_fuzz_test \
	//tests/data:token_data_fuzz_test //tests/train:config_fuzz_test
ci-sanitize: deps
	$(MAKE) --no-print-directory sanitize-asan SANITIZE_TESTS="$(CI_SANITIZE_TESTS)"

sanitize: sanitize-asan sanitize-tsan

sanitize-asan: deps
	$(BAZEL) test $(BAZEL_FLAGS) --config=asan-ubsan --test_tag_filters=-gpu --keep_going $(SANITIZE_TESTS); \
	  status=$$?; \
	  echo "ASan + UBSan:"; \
	  q=$$(echo $(SANITIZE_TESTS) | sed 's/ / + /g'); \
	  $(BAZEL) query $(QUERY_FLAGS) "tests($$q) except attr(tags, '\bgpu\b', tests($$q))" 2>/dev/null | \
	    ./tools/test_summary.sh $$($(BAZEL) info $(BAZEL_FLAGS) --config=asan-ubsan bazel-testlogs 2>/dev/null); \
	  summary=$$?; \
	  if [ $$status -ne 0 ] || [ $$summary -ne 0 ]; then exit 1; fi

sanitize-tsan: deps
	$(BAZEL) test $(BAZEL_FLAGS) --config=tsan --test_tag_filters=-gpu --keep_going $(TSAN_TESTS); \
	  status=$$?; \
	  echo "TSan:"; \
	  q=$$(echo $(TSAN_TESTS) | sed 's/ / + /g'); \
	  $(BAZEL) query $(QUERY_FLAGS) "tests($$q) except attr(tags, '\bgpu\b', tests($$q))" 2>/dev/null | \
	    ./tools/test_summary.sh $$($(BAZEL) info $(BAZEL_FLAGS) --config=tsan bazel-testlogs 2>/dev/null); \
	  summary=$$?; \
	  if [ $$status -ne 0 ] || [ $$summary -ne 0 ]; then exit 1; fi

# The fault-injection suite (issue 26; docs/reliability.md, "The fault suite"):
# tools/faults.sh builds train_gpt with -c opt, runs each scenario script of its
# SCENARIOS list (tests/faults/save_kill.sh: kill -9 at random moments of runs
# that save every step, resumed with --resume=auto, bitwise against an
# uninterrupted run) FAULT_TRIALS times each (default 20; FAULT_SEED, default 26,
# makes the kill moments repeat) and writes their summary table into
# docs/reliability.md. Minutes; //tests/faults:* run a couple of trials in make test.
faults: deps
	BAZEL="$(BAZEL)" BAZEL_FLAGS="$(BAZEL_FLAGS)" ./tools/faults.sh

# A soak (tools/soak.sh): examples/configs/default.json for SOAK_STEPS steps
# (default 20000: over an hour on 2 cores) with an async save every 50 steps
# and keep_last 3, sampling RSS, open descriptors and the checkpoints on disk;
# fails if the disk held more than 4 checkpoints or descriptors or memory grew
# after warm-up (the bound is derived in the script). SOAK_ARGS adds flags.
soak: deps
	$(BAZEL) build $(BAZEL_FLAGS) -c opt //examples:train_gpt
	./tools/soak.sh "$$($(BAZEL) info $(BAZEL_FLAGS) -c opt bazel-bin 2>/dev/null)/examples/train_gpt"

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
	./build/peers/torch_gpt_step --check_golden=tests/testdata/llama_golden_gqa.safetensors --threads=1
	./build/peers/torch_gpt_step --check_golden=tests/testdata/llama_golden_tied.safetensors --threads=1
	$(BAZEL) build $(BAZEL_FLAGS) -c opt //bench:step_bench //bench:optim_bench
	./tools/peers/run_step_peers.sh
	@if [ -f tools/peers/torch_adamw_bench.py ]; then \
	  echo "OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 tools/peers/torch_adamw_bench.py"; \
	  OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 tools/peers/torch_adamw_bench.py; \
	fi
endif

clean:
	$(BAZEL) clean
