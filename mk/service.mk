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

test-service-asan:
	$(MAKE) --no-print-directory BUILD=build/asan SAN=1 test-service

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
