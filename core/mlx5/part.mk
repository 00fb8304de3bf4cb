# part.mk - the mlx5 part's generated tables (see core/mlx5/gen_tables.lua):
# field offsets, opcodes and constants from core/mlx5/data/*.tsv, and the
# ConnectX-4 capability pages the device model reports, from the trace.
MLX5_DATA := $(wildcard core/mlx5/data/*.tsv) core/mlx5/data/linux-mlx5_core-cx4-trace.txt.gz
MLX5_GEN  := $(BUILD)/gen/mlx5_ifc_gen.h $(BUILD)/gen/mlx5_cx4_caps.h
GEN_HEADERS += $(MLX5_GEN)

$(BUILD)/gen/mlx5_ifc_gen.h: core/mlx5/gen_tables.lua lua/tbrt/mlx5/trace.lua $(MLX5_DATA)
	@mkdir -p $(dir $@)
	$(LUAJIT) core/mlx5/gen_tables.lua core/mlx5/data $(BUILD)/gen/mlx5_ifc_gen.h $(BUILD)/gen/mlx5_cx4_caps.h

$(BUILD)/gen/mlx5_cx4_caps.h: $(BUILD)/gen/mlx5_ifc_gen.h

# Built by `make fuzz` only (clang, libFuzzer): a hostile device under the
# driver (spec/support/fuzz_mlx5_device.c). The driver's call that opens its
# model is redirected by the linker to the program's wrapper, which puts a
# lying PCI function around the model (and its command queue's set-up, to
# shorten the command timeout); the library itself is not changed.
$(BUILD)/fuzz-mlx5-device: FUZZ_LDFLAGS = -Wl,--wrap=pci_model_open -Wl,--wrap=cmdq_init
$(BUILD)/fuzz-mlx5-device: spec/support/fuzz_mlx5_device.c spec/support/fuzz_common.h \
                           core/mlx5/pci.h core/mlx5/hca.h core/mlx5/cmdif.h $(BUILD)/libtbrt.a
	$(FUZZ_LINK)
