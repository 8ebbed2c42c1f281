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

$(BUILD)/attn.pc: lib/attn.pc.in
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' $< > $@

install: $(BUILD)/libattn.a $(BUILD)/libattn.so $(BUILD)/attn.pc
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(LIB_HEADERS) $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libattn.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libattn.so $(DESTDIR)$(PREFIX)/lib/$(LIB_SONAME)
	ln -sf $(LIB_SONAME) $(DESTDIR)$(PREFIX)/lib/libattn.so
	install -m 644 $(BUILD)/attn.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
