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
