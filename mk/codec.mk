# mk/codec.mk: the service's JSON codec (service/json, service/attend): its one C++ shim
# over Debian's header-only dragonbox and fast_float, its unit-test binary
# and its micro-benchmark. The codec's C objects are compiled and linked into
# the service by mk/service.mk with the other service objects.

DEB_PACKAGES += g++ libjansson-dev libdragonbox-dev libfast-float-dev
DEB_TEST_PACKAGES += check

# The shim is compiled by the C++ driver of the same family as $(CC), so the
# sanitizer runtimes of a SAN=1 build never mix gcc's and clang's.
CODEC_CXX = $(if $(findstring clang,$(CC)),clang++,g++)
# dragonbox's asserts check its own invariants on every number (5 of the
# shim's ~130 instructions a number); the sanitizer build keeps them.
CODEC_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror -Wshadow $(OPT) $(HARDEN) \
                 $(if $(filter 1,$(SAN)),,-DNDEBUG) -fno-exceptions -fno-rtti \
                 $(addprefix -isystem ,$(wildcard /usr/include/dragonbox-*)) \
                 -Iservice -MMD -MP
CODEC_CC_OBJ := $(BUILD)/obj/service/json/numbers_cc.o

$(CODEC_CC_OBJ): service/json/numbers_cc.cc
	@mkdir -p $(@D)
	$(CODEC_CXX) $(CODEC_CXXFLAGS) -c $< -o $@

# The shim needs no libstdc++ symbols (no exceptions, RTTI or iostreams), so
# the C driver links it into the service and its tests (mk/service.mk).
SERVICE_EXTRA_OBJS += $(CODEC_CC_OBJ)

# The codec resolves {"ref": ...} tensors through the tensor store, whose
# SHA-256 is libcrypto's.
CODEC_OBJS = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard service/json/*.c service/attend/*.c service/store/*.c)) \
             $(BUILD)/obj/service/errors.o \
             $(CODEC_CC_OBJ)
CODEC_CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CODEC_CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)
CODEC_LINK_LIBS = $(BUILD)/libattn.a -ljansson -lcrypto \
                  $(shell pkg-config --libs openblas 2>/dev/null) -lm -lpthread

# test_codec.c's suite runs in mk/service.mk's runner (make test-service and
# its ASan twin). It also builds on its own (CODEC_TEST_STANDALONE adds a
# main) for `make test-codec`, a quicker loop that needs no HTTP parts.
$(BUILD)/obj/tests/service/test_codec_main.o: tests/service/test_codec.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(CODEC_CHECK_CFLAGS) -DCODEC_TEST_STANDALONE \
	  -DCODEC_FIXTURES='"tests/fixtures/codec"' -c $< -o $@

# tests/service/test_reader_forms.c: every form of number read to the same
# float32 values. Its suite runs in the service runner too.
$(BUILD)/obj/tests/service/test_reader_forms_main.o: tests/service/test_reader_forms.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(CODEC_CHECK_CFLAGS) -DREADER_FORMS_STANDALONE \
	  -c $< -o $@

$(BUILD)/test_reader_forms: $(BUILD)/obj/tests/service/test_reader_forms_main.o \
                            $(BUILD)/obj/tests/service/test_reader_pairs.o \
                            $(CODEC_OBJS) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CODEC_LINK_LIBS) \
	  $(CODEC_CHECK_LIBS)

# The allocation-failure test interposes the allocator of the codec's objects.
CODEC_WRAP = -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc

$(BUILD)/test_codec: $(BUILD)/obj/tests/service/test_codec_main.o \
                     $(CODEC_OBJS) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CODEC_LINK_LIBS) \
	  $(CODEC_CHECK_LIBS) $(CODEC_WRAP)

# The benchmark's other reader: simdjson On-Demand + fast_float
# (tests/bench/bench_simdjson.cc), a benchmark package only: the service
# does not use it (docs/performance.md, "The JSON reader").
BENCH_DEB_PACKAGES += libsimdjson-dev
CODEC_BENCH_CXX_OBJ := $(BUILD)/obj/tests/bench/bench_simdjson.o

.PHONY: bench-codec-deps
bench-codec-deps:
	$(call install_missing,libsimdjson-dev)

$(CODEC_BENCH_CXX_OBJ): tests/bench/bench_simdjson.cc | bench-codec-deps
	@mkdir -p $(@D)
	$(CODEC_CXX) $(CODEC_CXXFLAGS) -DSIMDJSON_EXCEPTIONS=0 -c $< -o $@

$(BUILD)/bench_codec: $(BUILD)/obj/tests/bench/bench_codec.o \
                      $(CODEC_BENCH_CXX_OBJ) $(CODEC_OBJS) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CODEC_LINK_LIBS) \
	  -lsimdjson -lstdc++

$(BUILD)/shortest_all: $(BUILD)/obj/tests/exhaustive/shortest_all.o \
                       $(CODEC_OBJS) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CODEC_LINK_LIBS)

.PHONY: test-codec test-codec-alloc test-codec-alloc-asan bench-codec \
        test-shortest-all test-reader-forms
TEST_TARGETS += test-codec-alloc test-codec-alloc-asan test-shortest-all
TEST_BINS += test_codec shortest_all
TEST_BINS_ASAN += test_codec

# Every codec case (the service runner runs them too, in test-service).
test-codec: $(BUILD)/test_codec
	$(BUILD)/test_codec

# The reader on every form of number (the service runner runs it too).
test-reader-forms: $(BUILD)/test_reader_forms
	$(BUILD)/test_reader_forms

# Only what the service runner cannot run: allocation failure in turn, and
# its ASan+UBSan twin whose LeakSanitizer proves the failure paths free all
# (no fork, so the leak check at exit covers the whole case).
test-codec-alloc: $(BUILD)/test_codec
	CK_FORK=no CK_RUN_CASE=alloc $(BUILD)/test_codec

test-codec-alloc-asan:
	$(MAKE) --no-print-directory BUILD=build/asan SAN=1 test-codec-alloc

# The AVX-512 shortest-digit loop against dragonbox on all 2^32 float32
# bit patterns (tests/exhaustive/shortest_all.c), in the optimized build only.
test-shortest-all: $(BUILD)/shortest_all
	$(BUILD)/shortest_all

# Not a test: prints parse and format costs, never fails on a time.
bench-codec: $(BUILD)/bench_codec
	$(BUILD)/bench_codec
