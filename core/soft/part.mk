# part.mk - test tools of the soft device, part of `make` so the specs can use
# them:
#   $(BUILD)/test/soft-scribble   plays a hostile peer: writes one field of a
#                                 queue pair's shared memory (spec/support/soft_scribble.c)
#   $(BUILD)/test/udp-crc         the UDP wire's CRC-32 ways against its tables
#                                 (spec/support/udp_crc_check.c)
#   $(BUILD)/test/bulk-copy       the core's bulk copy (util/copy.h), piecewise and not
#                                 (spec/support/bulk_copy_check.c)
# and, built by `make fuzz` only (clang, libFuzzer):
#   $(BUILD)/fuzz-udp-wire        a hostile host's datagrams against the UDP
#                                 wire (spec/support/fuzz_udp_wire.c)
#   $(BUILD)/fuzz-shm-wire        a hostile peer's writes into the shared memory
#                                 of the shm wire (spec/support/fuzz_shm_wire.c)
SOFT_SCRIBBLE := $(BUILD)/test/soft-scribble
UDP_CRC_CHECK := $(BUILD)/test/udp-crc
BULK_COPY_CHECK := $(BUILD)/test/bulk-copy

all: $(SOFT_SCRIBBLE) $(UDP_CRC_CHECK) $(BULK_COPY_CHECK)

$(SOFT_SCRIBBLE): spec/support/soft_scribble.c core/soft/wire/shm/shm.h $(BUILD)/libtbrt.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libtbrt.a $(LDLIBS_CORE)

$(UDP_CRC_CHECK): spec/support/udp_crc_check.c core/soft/wire/udp/udp.h $(BUILD)/libtbrt.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libtbrt.a $(LDLIBS_CORE)

$(BULK_COPY_CHECK): spec/support/bulk_copy_check.c core/util/copy.h $(BUILD)/libtbrt.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libtbrt.a $(LDLIBS_CORE)

$(BUILD)/fuzz-udp-wire: spec/support/fuzz_udp_wire.c spec/support/fuzz_common.h core/soft/wire/udp/udp.h \
                        $(BUILD)/libtbrt.a
	$(FUZZ_LINK)

$(BUILD)/fuzz-shm-wire: spec/support/fuzz_shm_wire.c spec/support/fuzz_common.h core/soft/wire/shm/shm.h \
                        $(BUILD)/libtbrt.a
	$(FUZZ_LINK)
