# part.mk - tbrt's libibverbs (bindings/verbs): the C ABI of libibverbs over
# tbrt's device interface, for unmodified verbs programs (tbrt exec):
#   $(BUILD)/lib/tbrt/verbs/libibverbs.so.1  rdma-core 44's ABI, symbol versions
#   $(BUILD)/lib/tbrt/apple/librdma.so       Apple's librdma: unversioned, no GID types
#   $(BUILD)/lib/tbrt/verbs/libmlx5.so.1, libefa.so.1  stand-ins for the vendor
#                                            libraries perftest and UCX link (dv/)
#   $(BUILD)/lib/tbrt/verbs/librdmacm.so.1   the RDMA CM over TCP (rdmacm/), on
#                                            top of the libibverbs beside it
#   $(BUILD)/lib/pkgconfig/librdma.pc        links a program against the Apple
#                                            flavor (pkg-config --libs librdma)
# Each has the core linked in (libtbrt.a, every symbol of it local), so it
# needs nothing but libc: no RUNPATH, it works wherever it is copied or
# linked from. `make install` puts them under PREFIX/lib/tbrt/.
VERBS_DIR     := bindings/verbs
VERBS_NAMES   := $(notdir $(basename $(wildcard $(VERBS_DIR)/*.c)))
VERBS_LIBDIR  := $(BUILD)/lib/tbrt/verbs
APPLE_LIBDIR  := $(BUILD)/lib/tbrt/apple
VERBS_LINUX   := $(VERBS_LIBDIR)/libibverbs.so.1
VERBS_APPLE   := $(APPLE_LIBDIR)/librdma.so
VERBS_OBJ_L   := $(VERBS_NAMES:%=$(BUILD)/obj/verbs/linux/%.o)
VERBS_OBJ_A   := $(VERBS_NAMES:%=$(BUILD)/obj/verbs/apple/%.o)
VERBS_LINK     = $(CC) -shared -Wl,-z,defs $(SANITIZE)
VERBS_LIBS    := $(BUILD)/libtbrt.a -ldl -lpthread -lm

VERBS_DV      := $(VERBS_LIBDIR)/libmlx5.so.1 $(VERBS_LIBDIR)/libefa.so.1
RDMACM        := $(VERBS_LIBDIR)/librdmacm.so.1
RDMACM_NAMES  := $(notdir $(basename $(wildcard $(VERBS_DIR)/rdmacm/*.c)))
RDMACM_OBJ    := $(RDMACM_NAMES:%=$(BUILD)/obj/verbs/rdmacm/%.o)

LIBRDMA_PC    := $(BUILD)/lib/pkgconfig/librdma.pc

all: $(VERBS_LINUX) $(VERBS_APPLE) $(VERBS_DV) $(RDMACM) $(LIBRDMA_PC)

# Apple-targeting code builds on Linux against Debian's verbs.h and this
# library, and runs with tbrt exec --apple. Written for the build tree;
# make install writes the installed one.
define LIBRDMA_PC_TEXT
prefix=$(1)
libdir=$${prefix}/lib/tbrt/apple

Name: librdma
Description: tbrt's Apple-flavored librdma (TN3205 verbs: UC, untyped GIDs) on the soft device; run programs with tbrt exec --apple
Version: 0.1.0
Libs: -L$${libdir} -lrdma
Cflags:
endef
export LIBRDMA_PC_BUILD = $(call LIBRDMA_PC_TEXT,$(abspath $(BUILD)))
export LIBRDMA_PC_INSTALL = $(call LIBRDMA_PC_TEXT,$(PREFIX))

$(LIBRDMA_PC): $(VERBS_DIR)/part.mk
	@mkdir -p $(dir $@)
	@printf '%s\n' "$$LIBRDMA_PC_BUILD" > $@

$(BUILD)/obj/verbs/linux/%.o: $(VERBS_DIR)/%.c $(BUILD)/gen/tbrt_header_hash.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/verbs/apple/%.o: $(VERBS_DIR)/%.c $(BUILD)/gen/tbrt_header_hash.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DTBRT_VERBS_APPLE -MMD -MP -c $< -o $@

$(VERBS_LINUX): $(VERBS_OBJ_L) $(VERBS_DIR)/libibverbs.map $(BUILD)/libtbrt.a
	@mkdir -p $(dir $@)
	$(VERBS_LINK) -Wl,-soname,libibverbs.so.1 -Wl,--version-script=$(VERBS_DIR)/libibverbs.map \
	  -o $@ $(VERBS_OBJ_L) $(VERBS_LIBS)

$(VERBS_APPLE): $(VERBS_OBJ_A) $(VERBS_DIR)/librdma.map $(BUILD)/libtbrt.a
	@mkdir -p $(dir $@)
	$(VERBS_LINK) -Wl,-soname,librdma.so -Wl,--version-script=$(VERBS_DIR)/librdma.map \
	  -o $@ $(VERBS_OBJ_A) $(VERBS_LIBS)

# the vendor stand-ins need nothing but libc
$(VERBS_LIBDIR)/libmlx5.so.1: $(VERBS_DIR)/dv/mlx5dv.c $(VERBS_DIR)/dv/dv.h $(VERBS_DIR)/dv/libmlx5.map
	@mkdir -p $(dir $@)
	$(VERBS_LINK) $(ALL_CFLAGS) -Wl,-soname,libmlx5.so.1 -Wl,--version-script=$(VERBS_DIR)/dv/libmlx5.map \
	  -o $@ $<

$(VERBS_LIBDIR)/libefa.so.1: $(VERBS_DIR)/dv/efadv.c $(VERBS_DIR)/dv/dv.h $(VERBS_DIR)/dv/libefa.map
	@mkdir -p $(dir $@)
	$(VERBS_LINK) $(ALL_CFLAGS) -Wl,-soname,libefa.so.1 -Wl,--version-script=$(VERBS_DIR)/dv/libefa.map \
	  -o $@ $<

$(BUILD)/obj/verbs/rdmacm/%.o: $(VERBS_DIR)/rdmacm/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# linked with the libibverbs.so.1 beside it, at its symbol versions
$(RDMACM): $(RDMACM_OBJ) $(VERBS_DIR)/rdmacm/librdmacm.map $(VERBS_LINUX)
	$(VERBS_LINK) -Wl,-soname,librdmacm.so.1 -Wl,--version-script=$(VERBS_DIR)/rdmacm/librdmacm.map \
	  -o $@ $(RDMACM_OBJ) -L$(VERBS_LIBDIR) -l:libibverbs.so.1 -lpthread

# The spec's ABI check (spec/support/verbs_abi): a verbs program built like
# any user's, against Debian's headers and -libverbs; spec/verbs_abi_spec.lua
# runs it on this library through tbrt exec.
ABI_CHECK     := $(BUILD)/test/verbs_abi_check
ABI_CHECK_SRC := $(wildcard spec/support/verbs_abi/*.c)
all: $(ABI_CHECK)
$(ABI_CHECK): $(ABI_CHECK_SRC) spec/support/verbs_abi/abi_check.h $(VERBS_DIR)/compat_1_0.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $(ABI_CHECK_SRC) -libverbs -ldl -lpthread

.PHONY: install-verbs
install: install-verbs
install-verbs: all
	install -d $(DESTDIR)$(PREFIX)/lib/tbrt/verbs $(DESTDIR)$(PREFIX)/lib/tbrt/apple
	install -m 644 $(VERBS_LIBDIR)/*.so.1 $(DESTDIR)$(PREFIX)/lib/tbrt/verbs/
	install -m 644 $(VERBS_APPLE) $(DESTDIR)$(PREFIX)/lib/tbrt/apple/
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig
	@printf '%s\n' "$$LIBRDMA_PC_INSTALL" > $(DESTDIR)$(PREFIX)/lib/pkgconfig/librdma.pc

-include $(VERBS_OBJ_L:.o=.d) $(VERBS_OBJ_A:.o=.d) $(RDMACM_OBJ:.o=.d)
