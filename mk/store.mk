# mk/store.mk: the tensor store (service/store): a content-addressed LRU of
# float32 tensors named by SHA-256, and its HTTP endpoints' logic. SHA-256
# comes from OpenSSL's libcrypto (Debian libssl-dev).
#
# This fragment is read after mk/service.mk, whose SERVICE_OBJS is already
# expanded into the rules of attnd and test_service: the store's objects are
# added to those two targets here, and to SERVICE_OBJS for the rules that
# expand it later (the fuzz_http harness). Anything else that links the
# store (the codec's own binaries, once /attend reads refs) takes
# STORE_OBJS and STORE_LIBS.

DEB_PACKAGES += libssl-dev

STORE_SRCS := $(wildcard service/store/*.c)
STORE_OBJS := $(STORE_SRCS:%.c=$(BUILD)/obj/%.o)
STORE_CFLAGS = $(shell pkg-config --cflags libcrypto)
STORE_LIBS = $(shell pkg-config --libs libcrypto)

CFLAGS_service/store += $(SERVICE_PKG_CFLAGS) $(STORE_CFLAGS)
SERVICE_OBJS += $(STORE_OBJS)
SERVICE_LIBS += $(STORE_LIBS)

$(BUILD)/attnd $(BUILD)/tests/test_service: $(STORE_OBJS)
