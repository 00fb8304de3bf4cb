# part.mk - the test shim for the ibverbs device: spec/support/ibverbs_shim/*.c
# built twice against libtbrt.so (see shim.h there):
#   $(BUILD)/test/libibverbs-soft.so.1  a libibverbs with rdma-core 44's symbol
#                                       versions (specs set TBRT_IBVERBS_LIB to it)
#   $(BUILD)/test/librdma-soft.so       Apple-like: unversioned, no GID types
# Both are part of `make`, so the specs can run the ibverbs device end to end.
IBV_SHIM_DIR   := spec/support/ibverbs_shim
IBV_SHIM_NAMES := $(notdir $(basename $(wildcard $(IBV_SHIM_DIR)/*.c)))
IBV_SHIM_LINUX := $(BUILD)/test/libibverbs-soft.so.1
IBV_SHIM_APPLE := $(BUILD)/test/librdma-soft.so
IBV_SHIM_OBJ_L := $(IBV_SHIM_NAMES:%=$(BUILD)/obj/ibverbs_shim/linux/%.o)
IBV_SHIM_OBJ_A := $(IBV_SHIM_NAMES:%=$(BUILD)/obj/ibverbs_shim/apple/%.o)
# $ORIGIN/..: the shim in build/test finds build/libtbrt.so (when the
# process has not loaded it already, which it normally has)
IBV_SHIM_LINK   = $(CC) -shared -Wl,-z,defs $(SANITIZE) -Wl,-rpath,'$$ORIGIN/..'

all: $(IBV_SHIM_LINUX) $(IBV_SHIM_APPLE)

$(BUILD)/obj/ibverbs_shim/linux/%.o: $(IBV_SHIM_DIR)/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/ibverbs_shim/apple/%.o: $(IBV_SHIM_DIR)/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DSHIM_APPLE -MMD -MP -c $< -o $@

$(IBV_SHIM_LINUX): $(IBV_SHIM_OBJ_L) $(IBV_SHIM_DIR)/libibverbs.map $(BUILD)/libtbrt.so
	@mkdir -p $(dir $@)
	$(IBV_SHIM_LINK) -Wl,-soname,libibverbs-soft.so.1 \
	  -Wl,--version-script=$(IBV_SHIM_DIR)/libibverbs.map -o $@ $(IBV_SHIM_OBJ_L) \
	  -L$(BUILD) -ltbrt -lpthread

$(IBV_SHIM_APPLE): $(IBV_SHIM_OBJ_A) $(IBV_SHIM_DIR)/librdma.map $(BUILD)/libtbrt.so
	@mkdir -p $(dir $@)
	$(IBV_SHIM_LINK) -Wl,-soname,librdma-soft.so \
	  -Wl,--version-script=$(IBV_SHIM_DIR)/librdma.map -o $@ $(IBV_SHIM_OBJ_A) \
	  -L$(BUILD) -ltbrt -lpthread

-include $(IBV_SHIM_OBJ_L:.o=.d) $(IBV_SHIM_OBJ_A:.o=.d)
