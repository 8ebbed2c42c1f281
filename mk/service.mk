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
#
# Other fragments may append to SERVICE_LIBS (extra link flags, e.g.
# -lstdc++) and SERVICE_EXTRA_OBJS (objects built from non-C sources).

SERVICE_DIRS := service service/http service/json service/attend
SERVICE_SRCS := $(foreach d,$(SERVICE_DIRS),$(wildcard $(d)/*.c))
SERVICE_OBJS := $(SERVICE_SRCS:%.c=$(BUILD)/obj/%.o)
SERVICE_MAIN_OBJ := $(BUILD)/obj/service/main.o
SERVICE_LIBS +=
SERVICE_EXTRA_OBJS +=
SERVICE_PKGS := libmicrohttpd jansson
SERVICE_PKG_CFLAGS = $(shell pkg-config --cflags $(SERVICE_PKGS))
SERVICE_PKG_LIBS = $(shell pkg-config --libs $(SERVICE_PKGS))
$(foreach d,$(SERVICE_DIRS),$(eval CFLAGS_$(d) += $$(SERVICE_PKG_CFLAGS)))
CFLAGS_tests/service += $(SERVICE_PKG_CFLAGS) $(shell pkg-config --cflags check libcurl)

SERVICE_TEST_SRCS := $(wildcard tests/service/*.c)
SERVICE_TEST_OBJS := $(SERVICE_TEST_SRCS:%.c=$(BUILD)/obj/%.o)

ASSET_FILES += /openapi.json=service/attend/openapi.json:application/json
DEB_TEST_PACKAGES += libcurl4-openssl-dev
ALL_TARGETS += $(BUILD)/attnd
TEST_TARGETS += test-service test-service-asan

# Second expansion: ASSETS_OBJ is defined by mk/web.mk, read after this file.
.SECONDEXPANSION:

$(BUILD)/attnd: $(SERVICE_OBJS) $$(SERVICE_EXTRA_OBJS) $$(ASSETS_OBJ) \
                $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(SERVICE_LIBS) \
	  $(SERVICE_PKG_LIBS) $(BLAS_LIBS) -lm -lpthread

$(BUILD)/tests/test_service: $(SERVICE_TEST_OBJS) \
    $(filter-out $(SERVICE_MAIN_OBJ),$(SERVICE_OBJS)) \
    $$(SERVICE_EXTRA_OBJS) $$(ASSETS_OBJ) $(BUILD)/libattn.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(SERVICE_LIBS) \
	  $(SERVICE_PKG_LIBS) $(shell pkg-config --libs check libcurl) \
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
