# mk/bench.mk: the benchmarks (figures, never a pass/fail on a time).
#
#   make bench        all of the below
#   make bench-lib    sgemm peak, the scaling exercise and PyTorch side by side
#   make bench-http   attnd against the FastAPI + PyTorch peer over HTTP, each
#                     JSON workload in the long number form clients send and
#                     the short compact one
#   make bench-refs   re-running a layer: weights inline against tensor-store
#                     refs
#   make bench-window windowed attention's cost against the window and n
#
# BENCH_QUICK=1 gives short, noisy runs for development. Results (CSV, JSON,
# PNG, request bodies) go to $(BUILD)/bench/. Not part of `make test`.

BENCH_DEB_PACKAGES := wrk hyperfine gnuplot-nox python3-torch python3-numpy \
                      python3-fastapi python3-uvicorn python3-ujson curl
BENCH_PY := /usr/bin/python3
BENCH_QUICK ?=
BENCH_THREADS ?= $(shell nproc 2>/dev/null || echo 1)
BENCH_DIR := $(BUILD)/bench
BENCH_FLAGS = $(if $(filter 1,$(BENCH_QUICK)),--quick) --threads $(BENCH_THREADS)

CFLAGS_tests/bench = $(BLAS_CFLAGS)

.PHONY: bench bench-lib bench-http bench-refs bench-window bench-deps

bench-deps: deps
	$(call install_missing,$(BENCH_DEB_PACKAGES))

$(BENCH_DIR)/bench_lib: $(BUILD)/obj/tests/bench/bench_lib.o $(BUILD)/libattn.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(BLAS_LIBS) -lpthread -lm

bench: bench-lib bench-http bench-refs bench-window

bench-lib: bench-deps $(BENCH_DIR)/bench_lib
	OPENBLAS_NUM_THREADS=$(BENCH_THREADS) $(BENCH_PY) tests/bench/run_lib.py \
	  --bin $(BENCH_DIR)/bench_lib --out $(BENCH_DIR) $(BENCH_FLAGS)

bench-http: bench-deps $(BENCH_DIR)/bench_lib $(BUILD)/attnd
	OPENBLAS_NUM_THREADS=$(BENCH_THREADS) $(BENCH_PY) tests/bench/run_http.py \
	  --attnd $(BUILD)/attnd --peak-bin $(BENCH_DIR)/bench_lib \
	  --out $(BENCH_DIR) $(BENCH_FLAGS)

bench-refs: bench-deps $(BUILD)/attnd
	$(BENCH_PY) tests/bench/run_refs.py --attnd $(BUILD)/attnd \
	  --out $(BENCH_DIR) $(if $(filter 1,$(BENCH_QUICK)),--quick)

bench-window: bench-deps $(BUILD)/attnd
	$(BENCH_PY) tests/bench/run_window.py --attnd $(BUILD)/attnd \
	  --out $(BENCH_DIR) $(if $(filter 1,$(BENCH_QUICK)),--quick)
