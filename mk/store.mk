# mk/store.mk: the tensor store (service/store): a content-addressed LRU of
# float32 tensors named by SHA-256, and its HTTP endpoints' logic. SHA-256
# comes from OpenSSL's libcrypto (Debian libssl-dev).
#
# Read before mk/service.mk (the Makefile's order), whose SERVICE_OBJS and
# SERVICE_LIBS include STORE_OBJS and STORE_LIBS.

DEB_PACKAGES += libssl-dev

STORE_SRCS := $(wildcard service/store/*.c)
STORE_OBJS := $(STORE_SRCS:%.c=$(BUILD)/obj/%.o)
STORE_CFLAGS = $(shell pkg-config --cflags libcrypto)
STORE_LIBS = $(shell pkg-config --libs libcrypto)

CFLAGS_service/store += $(SERVICE_PKG_CFLAGS) $(STORE_CFLAGS)
