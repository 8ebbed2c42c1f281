# mk/service.mk: the HTTP daemon build/attnd and its tests.
#
#   $(BUILD)/attnd               every service/**/*.c object (main.o included),
#                                the embedded assets, libattn.a
#   $(BUILD)/tests/test_service  every service object but main.o, and the
#                                suites of tests/service/ over real HTTP
#   make serve                   build and run attnd on $(HOST):$(PORT)
#                                (PORT=N make run: port N; default
#                                0.0.0.0:8080)
#   make test-service[-asan]     the service suites (ASan+UBSan twin)
#   make test-service-tsan       the pool, metrics, store, v2 and HTTP suites
#                                built with ThreadSanitizer (build/tsan)
#
# Read after mk/codec.mk, which adds SERVICE_EXTRA_OBJS (objects built
# from non-C sources), and mk/store.mk (STORE_OBJS, STORE_LIBS); before
# mk/web.mk, which makes ASSETS_OBJ from ASSET_FILES.

SERVICE_DIRS := service service/http service/json service/attend
SERVICE_SRCS := $(foreach d,$(SERVICE_DIRS),$(wildcard $(d)/*.c))
SERVICE_OBJS := $(SERVICE_SRCS:%.c=$(BUILD)/obj/%.o) $(STORE_OBJS)
SERVICE_MAIN_OBJ := $(BUILD)/obj/service/main.o
SERVICE_LIBS += $(STORE_LIBS)
SERVICE_EXTRA_OBJS +=
# The service writes its own JSON (json/text.h); jansson is the tests'.
SERVICE_PKGS := libmicrohttpd
SERVICE_PKG_CFLAGS = $(shell pkg-config --cflags $(SERVICE_PKGS))
SERVICE_PKG_LIBS = $(shell pkg-config --libs $(SERVICE_PKGS))
$(foreach d,$(SERVICE_DIRS),$(eval CFLAGS_$(d) += $$(SERVICE_PKG_CFLAGS)))
# the rollout's products (attend/run.c) call OpenBLAS's cblas_dgemm
CFLAGS_service/attend += $(BLAS_CFLAGS)
CFLAGS_tests/service += $(SERVICE_PKG_CFLAGS) \
                        $(shell pkg-config --cflags check libcurl jansson)

SERVICE_TEST_SRCS := $(wildcard tests/service/*.c)
SERVICE_TEST_OBJS := $(SERVICE_TEST_SRCS:%.c=$(BUILD)/obj/%.o)

# The dashboard and the documents served beside it, embedded by mk/web.mk.
ASSETS_OBJ := $(BUILD)/obj/gen/assets.o
ASSET_FILES += /openapi.json=service/attend/openapi.json:application/json
DEB_TEST_PACKAGES += libcurl4-openssl-dev
ALL_TARGETS += $(BUILD)/attnd
TEST_TARGETS += test-service test-service-asan test-service-tsan
TEST_BINS += tests/test_service attnd
TEST_BINS_ASAN += tests/test_service attnd
TEST_BINS_TSAN += tests/test_service attnd

$(BUILD)/attnd: $(SERVICE_OBJS) $(SERVICE_EXTRA_OBJS) $(ASSETS_OBJ) \
                $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(SERVICE_LIBS) \
	  $(SERVICE_PKG_LIBS) $(BLAS_LIBS) -lm -lpthread

$(BUILD)/tests/test_service: $(SERVICE_TEST_OBJS) \
    $(filter-out $(SERVICE_MAIN_OBJ),$(SERVICE_OBJS)) \
    $(SERVICE_EXTRA_OBJS) $(ASSETS_OBJ) $(BUILD)/libattn.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(SERVICE_LIBS) \
	  $(SERVICE_PKG_LIBS) $(shell pkg-config --libs check libcurl jansson) \
	  $(BLAS_LIBS) -lm -lpthread

.PHONY: serve test-service test-service-asan

# The environment's PORT and HOST win over these defaults (make's ?=).
PORT ?= 8080
HOST ?= 0.0.0.0

serve: $(BUILD)/attnd
	exec $(BUILD)/attnd --port $(PORT) --host $(HOST)

# ATTND_BIN: the binary the drain test spawns as a child process.
test-service: $(BUILD)/tests/test_service $(BUILD)/attnd
	ATTND_BIN=$(abspath $(BUILD)/attnd) CK_DEFAULT_TIMEOUT=120 \
	  $(BUILD)/tests/test_service

# ASan+UBSan: LeakSanitizer at the exit of each forked test costs about
# 0.3 s a test, two thirds of the codec suite's time. The suites that keep
# no state between tests (the ThreadSanitizer run's, and codec and
# reader_forms, whose tests each start their generator afresh) run in one
# process each, CK_FORK=no, where LeakSanitizer at exit checks the whole
# suite and a leak fails the run; `timeout` stands in for check's per-test
# timeout, which needs the fork. config and drain (whose tests spawn attnd
# and set the environment) run forked, and http: in one process under ASan
# it once ended in libmicrohttpd's "Failed to remove listen FD from epoll
# set" at a test's server_quiesce, its race that guard.c's epoll_ctl now
# answers; forked it has always passed. Every suite of the runner must be
# in one list or the other.
SERVICE_SUITES := $(shell sed -n 's/.*srunner_[a-z_]*(\(sr, \)\{0,1\}\([a-z_0-9]*\)_suite()).*/\2/p' \
                    tests/service/main.c)
SERVICE_ASAN_ONE_PROCESS := codec reader_forms pool metrics store v2
SERVICE_ASAN_FORKED := config drain http
SERVICE_ASAN_TIMEOUT := 1200
test-service-asan:
	$(if $(filter-out $(sort $(SERVICE_ASAN_ONE_PROCESS) $(SERVICE_ASAN_FORKED)),$(sort $(SERVICE_SUITES)))$(filter-out $(sort $(SERVICE_SUITES)),$(sort $(SERVICE_ASAN_ONE_PROCESS) $(SERVICE_ASAN_FORKED))),\
	  $(error test-service-asan: suites of tests/service/main.c ($(SERVICE_SUITES)) and mk/service.mk's lists differ))
	$(MAKE) --no-print-directory BUILD=build/asan SAN=1 \
	  build/asan/tests/test_service build/asan/attnd
	@set -e; for s in $(SERVICE_ASAN_ONE_PROCESS); do \
	  echo "-- $$s (ASan, one process)"; \
	  ATTND_BIN=$(abspath build/asan/attnd) CK_FORK=no CK_RUN_SUITE=$$s \
	  timeout -k 10 $(SERVICE_ASAN_TIMEOUT) build/asan/tests/test_service || \
	  { echo "test-service-asan: suite $$s failed (exit $$?)"; exit 1; }; \
	done; \
	for s in $(SERVICE_ASAN_FORKED); do \
	  echo "-- $$s (ASan, a process a test)"; \
	  ATTND_BIN=$(abspath build/asan/attnd) CK_DEFAULT_TIMEOUT=120 \
	  CK_RUN_SUITE=$$s build/asan/tests/test_service || \
	  { echo "test-service-asan: suite $$s failed (exit $$?)"; exit 1; }; \
	done

# The suites whose code runs on many threads, in one process each (no fork,
# so a race between the server's threads and the test's is seen); a report
# fails the run (halt_on_error). OpenBLAS is uninstrumented: the server
# keeps it on the calling thread.
TSAN_SUITES := pool metrics store v2 http
test-service-tsan:
	$(MAKE) --no-print-directory BUILD=build/tsan SAN=thread \
	  build/tsan/tests/test_service build/tsan/attnd
	@set -e; for s in $(TSAN_SUITES); do \
	  echo "-- $$s (ThreadSanitizer)"; \
	  ATTND_BIN=$(abspath build/tsan/attnd) CK_DEFAULT_TIMEOUT=300 \
	  CK_FORK=no CK_RUN_SUITE=$$s OPENBLAS_NUM_THREADS=1 \
	  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  build/tsan/tests/test_service; done
