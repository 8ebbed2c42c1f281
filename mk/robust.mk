# mk/robust.mk: robustness checks: hostile input, faults, load.
#
#   make test-hardening        build/attnd is PIE with full RELRO, stack
#                              protector, FORTIFY_SOURCE and an NX stack
#   make test-jsonsuite        every JSONTestSuite test_parsing file posted to
#                              a real attnd: a 4xx JSON error, never 5xx, a
#                              reset or a hang; /healthz answers after each
#   make test-cases            the bad-input table tests/cases/invalid/*:
#                              status, error.code and error.field (pointer)
#   make test-robust-asan      both of the above against attnd built with
#                              ASan+UBSan
#   make test-fuzz-corpus      each libFuzzer harness (tests/fuzz: codec = the
#                              request path, http = an in-process attnd over
#                              loopback, alloc = every allocation of the
#                              request path failed in turn, rows = the
#                              numeric rows' loops at every level against
#                              each other and the general reader) over its
#                              committed corpus once
#   make fuzz                  each harness for FUZZ_SECONDS (default 300;
#                              FUZZ_HARNESSES=codec picks one); finds go to
#                              build/fuzz/corpus_<h>, crashes to
#                              build/fuzz/artifacts
#   make test-valgrind-service attnd under valgrind memcheck serving valid and
#                              invalid requests, then SIGTERM: 0 errors, 0
#                              definitely lost, exit 0
#   make test-shutdown-load    SIGTERM during load: every request completes
#                              200 or is refused 503 before it starts; exit 0
#   make test-hostile          attacks on a real attnd from several loopback
#                              addresses (run_hostile.py, ~65 s): 3,000 idle,
#                              200 slow-head, 200 slow-body connections and
#                              40 x 50 MB uploads while an honest client must
#                              get every small POST /attend in under 2 s;
#                              RSS within the body budget; SIGTERM exit time;
#                              a slow reader cut off, a steady one served;
#                              one address holding every slot it can with
#                              slowly read answers while another is served;
#                              strict framing; the memory bomb under an
#                              address-space limit (HOSTILE_PHASES=
#                              reader,steady runs those phases only)
#   make loadtest              figures, not a test (LOADTEST_SECONDS, default
#                              60): wrk at 64 connections with bad requests
#                              mixed in, 200 slowloris connections, vanishing
#                              clients; p99, slowloris-time probe, RSS; then
#                              run_hostile.py's siege for half as long
#
# The fuzz harnesses build with clang and libFuzzer in their own folder
# (build/fuzz) through a sub-make, so their flags never mix with the others.
# The runners are python3 (stdlib only) with raw sockets, so lying headers
# can be sent.

ROBUST_PY := /usr/bin/python3
DEB_TEST_PACKAGES += python3
ROBUST_LOAD_DEB_PACKAGES := wrk
TEST_TARGETS += test-hardening test-jsonsuite test-cases test-robust-asan \
                test-fuzz-corpus test-valgrind-service test-shutdown-load \
                test-hostile
TEST_BUILDS += fuzz-bins

FUZZ_BUILD := build/fuzz
FUZZ_SECONDS ?= 300
FUZZ_HARNESSES := codec http alloc rows
# Corpus folders of harness $(1) (a shell word): the seeds written by
# tests/fuzz/gen_corpus.py, and <name>_found, inputs the fuzzer found, merged
# and minimised (-merge=1) after the long runs. The allocation-failure
# harness runs over the codec's.
# A harness without a _found folder yet has its seeds alone.
fuzz_corpus_of = $$(c=$(1); [ $$c = alloc ] && c=codec; \
                 for d in $(FUZZ_CORPUS)/$$c $(FUZZ_CORPUS)/$${c}_found; do \
                   if [ -d $$d ]; then printf "%s " $$d; fi; done)
FUZZ_CORPUS := tests/fuzz/corpus
# The fuzz build: clang, ASan+UBSan (SAN=1), coverage for libFuzzer on every
# object; harnesses link the libFuzzer runtime (its main).
FUZZ_MAKE = $(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang SAN=1 \
            EXTRA_CFLAGS=-fsanitize=fuzzer-no-link
FUZZ_ENV := OPENBLAS_NUM_THREADS=1 \
            ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# -rss_limit_mb: the harness's limits keep every request small, so more
# means unbounded growth. -timeout: seconds for one input.
FUZZ_FLAGS := -rss_limit_mb=2048 -timeout=60 -max_len=65536 \
              -print_final_stats=1

LOADTEST_SECONDS ?= 60

.PHONY: test-hardening test-jsonsuite test-cases test-robust-asan test-fuzz-corpus fuzz \
        fuzz-bins \
        test-valgrind-service test-shutdown-load test-hostile loadtest

# -- fuzzing --------------------------------------------------------------

FUZZ_CODEC_OBJS = $(BUILD)/obj/tests/fuzz/fuzz_codec.o \
                  $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard service/json/*.c service/attend/*.c service/store/*.c)) \
                  $(BUILD)/obj/service/errors.o
FUZZ_HTTP_OBJS = $(BUILD)/obj/tests/fuzz/fuzz_http.o \
                 $(filter-out $(SERVICE_MAIN_OBJ),$(SERVICE_OBJS))

# Meaningful only inside the fuzz sub-make (BUILD=build/fuzz, CC=clang).
# The service's variables come from mk/service.mk and mk/codec.mk, read
# before this file (the Makefile's order).
$(BUILD)/fuzz_codec: $(FUZZ_CODEC_OBJS) $(SERVICE_EXTRA_OBJS) \
                     $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -fsanitize=fuzzer -o $@ $(filter %.o %.a,$^) \
	  -ljansson -lcrypto $(BLAS_LIBS) -lm -lpthread

# Every malloc, calloc and realloc of the codec and the library goes through
# the harness's failing wrappers.
$(BUILD)/fuzz_alloc: $(BUILD)/obj/tests/fuzz/fuzz_alloc.o \
                     $(filter-out %/fuzz_codec.o,$(FUZZ_CODEC_OBJS)) \
                     $(SERVICE_EXTRA_OBJS) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -fsanitize=fuzzer \
	  -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc -o $@ \
	  $(filter %.o %.a,$^) -ljansson -lcrypto $(BLAS_LIBS) -lm -lpthread

$(BUILD)/fuzz_http: $(FUZZ_HTTP_OBJS) $(SERVICE_EXTRA_OBJS) \
                    $(ASSETS_OBJ) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -fsanitize=fuzzer -o $@ $(filter %.o %.a,$^) \
	  $(SERVICE_LIBS) $(SERVICE_PKG_LIBS) $(BLAS_LIBS) -lm -lpthread

# The numeric rows' loops (json/rows.c, json/rows_avx512.c) at every
# isa level against each other and against the general reader.
$(BUILD)/fuzz_rows: $(BUILD)/obj/tests/fuzz/fuzz_rows.o \
                    $(filter-out %/fuzz_codec.o,$(FUZZ_CODEC_OBJS)) \
                    $(SERVICE_EXTRA_OBJS) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -fsanitize=fuzzer -o $@ $(filter %.o %.a,$^) \
	  -ljansson -lcrypto $(BLAS_LIBS) -lm -lpthread

fuzz-bins:
	$(FUZZ_MAKE) $(foreach h,$(FUZZ_HARNESSES),$(FUZZ_BUILD)/fuzz_$(h))

# -runs=0 over a directory: every file once, no mutation. The http
# harness's corpus includes the codec's (a request body is also a valid
# HTTP body in its seeds); each harness gets its own folder.
test-fuzz-corpus: fuzz-bins
	@set -e; for h in $(FUZZ_HARNESSES); do \
	  c=$(call fuzz_corpus_of,$$h); \
	  echo "fuzz_$$h: $$(find $$c -type f | wc -l) corpus entries in $$c"; \
	  $(FUZZ_ENV) $(FUZZ_BUILD)/fuzz_$$h $(FUZZ_FLAGS) -runs=0 \
	    $$c 2>$(FUZZ_BUILD)/corpus_$$h.log || \
	    { tail -n 60 $(FUZZ_BUILD)/corpus_$$h.log; exit 1; }; \
	  grep -E 'stat::number_of_executed_units|Done' \
	    $(FUZZ_BUILD)/corpus_$$h.log | tail -n 2; \
	done

# New interesting inputs go to $(FUZZ_BUILD)/corpus_<h> (not the committed
# seed folder); crashes to $(FUZZ_BUILD)/artifacts/.
fuzz: fuzz-bins
	@set -e; mkdir -p $(FUZZ_BUILD)/artifacts; \
	for h in $(FUZZ_HARNESSES); do \
	  mkdir -p $(FUZZ_BUILD)/corpus_$$h; \
	  echo "fuzz_$$h for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_ENV) nice -n 10 $(FUZZ_BUILD)/fuzz_$$h $(FUZZ_FLAGS) \
	    -max_total_time=$(FUZZ_SECONDS) \
	    -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$h- \
	    $(FUZZ_BUILD)/corpus_$$h $(call fuzz_corpus_of,$$h); \
	done

# -- the binary's hardening -------------------------------------------------

test-hardening: $(BUILD)/attnd
	$(ROBUST_PY) tests/robust/check_hardening.py $(BUILD)/attnd

# -- bad input over HTTP ----------------------------------------------------

test-jsonsuite: $(BUILD)/attnd
	$(ROBUST_PY) tests/robust/run_jsonsuite.py --attnd $(BUILD)/attnd \
	  --suite tests/robust/jsontestsuite

test-cases: $(BUILD)/attnd
	$(ROBUST_PY) tests/robust/run_cases.py --attnd $(BUILD)/attnd \
	  --cases tests/cases/invalid

# Both against attnd built with ASan+UBSan (build/asan): a sanitizer report
# aborts attnd, and LeakSanitizer at exit turns the SIGTERM exit code
# non-zero, both of which the runners fail on.
test-robust-asan:
	ASAN_OPTIONS=detect_leaks=1 $(MAKE) --no-print-directory \
	  BUILD=build/asan SAN=1 test-jsonsuite test-cases

# -- leaks and memory errors of the real binary -------------------------------

test-valgrind-service: $(BUILD)/attnd
	$(ROBUST_PY) tests/robust/run_valgrind.py --attnd $(BUILD)/attnd \
	  --corpus $(FUZZ_CORPUS)/codec --cases tests/cases/invalid

# -- shutdown under load --------------------------------------------------------

test-shutdown-load: $(BUILD)/attnd
	$(ROBUST_PY) tests/robust/run_shutdown.py --attnd $(BUILD)/attnd

# -- hostile clients ------------------------------------------------------------

test-hostile: $(BUILD)/attnd
	$(ROBUST_PY) tests/robust/run_hostile.py --attnd $(BUILD)/attnd \
	  $(if $(HOSTILE_PHASES),--phases $(HOSTILE_PHASES))

# -- load and faults (figures; not in TEST_TARGETS) ---------------------------

loadtest: $(BUILD)/attnd
	$(call install_missing,$(ROBUST_LOAD_DEB_PACKAGES))
	$(ROBUST_PY) tests/robust/run_loadtest.py --attnd $(BUILD)/attnd \
	  --seconds $(LOADTEST_SECONDS) --out $(BUILD)/loadtest
