# part.mk - test tools of the soft device, part of `make` so the specs can use
# them:
#   $(BUILD)/test/soft-scribble   plays a hostile peer: writes one field of a
#                                 queue pair's shared memory (spec/support/soft_scribble.c)
SOFT_SCRIBBLE := $(BUILD)/test/soft-scribble

all: $(SOFT_SCRIBBLE)

$(SOFT_SCRIBBLE): spec/support/soft_scribble.c core/soft/wire/shm/shm.h $(BUILD)/libtbrt.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libtbrt.a $(LDLIBS_CORE)
