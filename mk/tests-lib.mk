# mk/tests-lib.mk: the library's check suites (tests/lib), their ASan+UBSan
# and valgrind runs, and the fixture generator.
#
#   make test-lib           every suite (kernel, torch, lesson, errors, alloc,
#                           exec, analysis, softmax, rules);
#                           `build/tests/test_lib <suite>` runs one
#   make test-lib-asan      the same, built with ASan+UBSan in build/asan
#   make test-lib-valgrind  the allocation-failure suite under valgrind
#   make fixtures           regenerates tests/fixtures/lib with PyTorch and
#                           NumPy (slow to import; not part of `make test`)

TESTS_LIB_SRCS := $(wildcard tests/lib/*.c)
TESTS_LIB_OBJS := $(TESTS_LIB_SRCS:%.c=$(BUILD)/obj/%.o)
TESTS_LIB_BIN := $(BUILD)/tests/test_lib
TESTS_LIB_FIXTURE_DIR := $(CURDIR)/tests/fixtures/lib
FIXTURES_DEB_PACKAGES := python3-torch python3-numpy

CHECK_CFLAGS = $(shell pkg-config --cflags check)
CHECK_LIBS = $(shell pkg-config --libs check)
CFLAGS_tests/lib = $(CHECK_CFLAGS) -pthread \
                   -DTEST_LIB_FIXTURES='"$(TESTS_LIB_FIXTURE_DIR)"'

# OpenBLAS's own threads confuse neither ASan nor valgrind, but slow them
# down and add noise; one thread is enough for the test sizes.
TESTS_LIB_ENV := OPENBLAS_NUM_THREADS=1

# The suite builds with `make` when check is installed (it is a test-only
# package, so `make run` on a machine without it still builds the rest).
ifneq ($(shell pkg-config --exists check 2>/dev/null && echo yes),)
ALL_TARGETS += $(TESTS_LIB_BIN)
endif
TEST_TARGETS += test-lib test-lib-asan test-lib-valgrind
TEST_BINS += tests/test_lib
TEST_BINS_ASAN += tests/test_lib

.PHONY: test-lib test-lib-asan test-lib-valgrind fixtures

$(TESTS_LIB_BIN): $(TESTS_LIB_OBJS) $(BUILD)/libattn.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_ALL) -pthread -o $@ $(TESTS_LIB_OBJS) \
	  $(BUILD)/libattn.a $(CHECK_LIBS) $(BLAS_LIBS) -lm

test-lib: $(TESTS_LIB_BIN)
	$(TESTS_LIB_BIN)

test-lib-asan:
	$(TESTS_LIB_ENV) $(MAKE) --no-print-directory BUILD=build/asan SAN=1 \
	  test-lib

test-lib-valgrind: $(TESTS_LIB_BIN)
	$(TESTS_LIB_ENV) CK_FORK=no valgrind -q --leak-check=full \
	  --errors-for-leak-kinds=definite --error-exitcode=1 \
	  $(TESTS_LIB_BIN) alloc

fixtures:
	$(call install_missing,$(FIXTURES_DEB_PACKAGES))
	/usr/bin/python3 tests/gen/gen_lib_fixtures.py tests/fixtures/lib
