# mk/lib.mk: the attention library, static and shared, and its pkg-config.

BLAS_CFLAGS = $(shell pkg-config --cflags openblas)
BLAS_LIBS = $(shell pkg-config --libs openblas)

LIB_SRCS := $(wildcard lib/src/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
LIB_PICS := $(LIB_SRCS:%.c=$(BUILD)/pic/%.o)
# Only what attn.h marks ATTN_API leaves the shared library.
LIB_VISIBILITY := -fvisibility=hidden
CFLAGS_lib/src = $(BLAS_CFLAGS) $(LIB_VISIBILITY)
LIB_HEADERS := lib/include/attn.h lib/include/attn_analysis.h \
               lib/include/attn_coretype.h
LIB_SONAME := libattn.so.2

ALL_TARGETS += $(BUILD)/libattn.a $(BUILD)/libattn.so $(BUILD)/attn.pc

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(filter-out -fPIE,$(CFLAGS_ALL)) -fPIC $(BLAS_CFLAGS) \
	  $(LIB_VISIBILITY) -c $< -o $@

$(BUILD)/libattn.a: $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libattn.so: $(LIB_PICS)
	$(CC) -shared -Wl,-soname,$(LIB_SONAME) -Wl,-z,relro,-z,now $(LDSAN) \
	  -o $@ $^ $(BLAS_LIBS) -lm

# The one version of the library, the headers, attn.pc and attnd: attn.h's
# ATTN_VERSION_* macros.
ATTN_VERSION := $(shell sed -n 's/^\#define ATTN_VERSION_\(MAJOR\|MINOR\|PATCH\) //p' \
                  lib/include/attn.h | paste -sd.)

# attn.pc for $(PREFIX): the stamp holds the prefix and version it was made
# for, so `make install PREFIX=...` rewrites it when either changes.
$(BUILD)/attn.pc.stamp: FORCE
	@mkdir -p $(@D)
	@echo '$(PREFIX) $(ATTN_VERSION)' | cmp -s - $@ || \
	  echo '$(PREFIX) $(ATTN_VERSION)' > $@

$(BUILD)/attn.pc: lib/attn.pc.in $(BUILD)/attn.pc.stamp
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(ATTN_VERSION)|' $< > $@

.PHONY: FORCE
FORCE:

install: $(BUILD)/libattn.a $(BUILD)/libattn.so $(BUILD)/attn.pc \
         $(BUILD)/attnd
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(LIB_HEADERS) $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libattn.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libattn.so $(DESTDIR)$(PREFIX)/lib/$(LIB_SONAME)
	ln -sf $(LIB_SONAME) $(DESTDIR)$(PREFIX)/lib/libattn.so
	install -m 644 $(BUILD)/attn.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -m 755 $(BUILD)/attnd $(DESTDIR)$(PREFIX)/bin/
