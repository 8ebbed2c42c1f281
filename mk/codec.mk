# mk/codec.mk: the service's JSON codec (service/codec*.c): its one C++ shim
# over Debian's header-only dragonbox and fast_float, its unit-test binary
# and its micro-benchmark. The codec's C objects are compiled and linked into
# the service by mk/service.mk with the other service/*.c files.

DEB_PACKAGES += g++ libjansson-dev libdragonbox-dev libfast-float-dev
DEB_TEST_PACKAGES += check

# The shim is compiled by the C++ driver of the same family as $(CC), so the
# sanitizer runtimes of a SAN=1 build never mix gcc's and clang's.
CODEC_CXX = $(if $(findstring clang,$(CC)),clang++,g++)
CODEC_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror -Wshadow $(OPT) $(HARDEN) \
                 -fno-exceptions -fno-rtti \
                 $(addprefix -isystem ,$(wildcard /usr/include/dragonbox-*)) \
                 -Iservice -MMD -MP
CODEC_CC_OBJ := $(BUILD)/obj/service/codec_num_cc.o

$(CODEC_CC_OBJ): service/codec_num_cc.cc
	@mkdir -p $(@D)
	$(CODEC_CXX) $(CODEC_CXXFLAGS) -c $< -o $@

# codec_num.o calls the shim: making the shim its prerequisite builds the shim
# whenever the service is built, whichever fragment links it. The shim needs
# no libstdc++ symbols (no exceptions, RTTI or iostreams), so the C driver
# links it; jansson is the codec's other library.
$(BUILD)/obj/service/codec_num.o: $(CODEC_CC_OBJ)
SERVICE_LIBS += $(CODEC_CC_OBJ) -ljansson

CODEC_OBJS = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard service/codec*.c)) \
             $(BUILD)/obj/service/errors.o $(BUILD)/obj/service/limits.o \
             $(CODEC_CC_OBJ)
CODEC_CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CODEC_CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)
CODEC_LINK_LIBS = $(BUILD)/libattn.a -ljansson \
                  $(shell pkg-config --libs openblas 2>/dev/null) -lm -lpthread

# test_codec.c also builds on its own (CODEC_TEST_STANDALONE adds a main) so
# the codec's suite runs before the service runner exists and without it.
$(BUILD)/obj/tests/service/test_codec_main.o: tests/service/test_codec.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(CODEC_CHECK_CFLAGS) -DCODEC_TEST_STANDALONE \
	  -DCODEC_FIXTURES='"tests/fixtures/codec"' -c $< -o $@

$(BUILD)/test_codec: $(BUILD)/obj/tests/service/test_codec_main.o \
                     $(CODEC_OBJS) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CODEC_LINK_LIBS) \
	  $(CODEC_CHECK_LIBS)

$(BUILD)/bench_codec: $(BUILD)/obj/tests/service/bench_codec.o \
                      $(CODEC_OBJS) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CODEC_LINK_LIBS)

.PHONY: test-codec bench-codec
TEST_TARGETS += test-codec

test-codec: $(BUILD)/test_codec
	$(BUILD)/test_codec

# Not a test: prints parse and format costs, never fails on a time.
bench-codec: $(BUILD)/bench_codec
	$(BUILD)/bench_codec
