-- mlx5_ifc_spec.lua - the layout tables generated from core/mlx5/data: field
-- get/set in PRM bit numbering at odd offsets and widths (wider than 32 bits
-- too), lookups by name and path, opcodes and constants.
local ffi = require("ffi")
local mlx5 = require("tbrt.mlx5")
local C = require("tbrt.ffi").C

local function buf(n) return ffi.new("uint8_t[?]", n) end
local function bytes(b, n) return ffi.string(b, n) end

describe("mlx5 layout tables", function()
  it("set and get a field at an odd offset that straddles bytes", function()
    local b = buf(32)
    -- 5 bits at PRM bit 155: bits 3..7 of byte 19 counted from the MSB (cmd_hca_cap.log_max_qp)
    mlx5.set(b, 155, 5, 17)
    assert.equal(0x11, b[19])
    assert.equal(17, mlx5.get(b, 155, 5))
    -- 12 bits at bit 3 cover bytes 0 and 1 and leave the neighbours alone
    b[0] = 0xe0; b[1] = 0x00
    mlx5.set(b, 3, 12, 0xabc)
    assert.equal(0xf5, b[0])  -- 111 + top 5 bits of 0xabc (10101)
    assert.equal(0x78, b[1])  -- low 7 bits of 0xabc (0111100) then the untouched bit 15 (0)
    assert.equal(0xabc, mlx5.get(b, 3, 12))
    assert.equal(7, mlx5.get(b, 0, 3))
  end)

  it("sets a 32-bit field at an unaligned offset (spanning five bytes)", function()
    local b = buf(8)
    mlx5.set(b, 4, 32, 0xdeadbeef)
    assert.equal("0deadbeef0000000", (bytes(b, 8):gsub(".", function(c) return ("%02x"):format(c:byte()) end)))
    assert.equal(0xdeadbeef, mlx5.get(b, 4, 32))
  end)

  it("reads and writes fields wider than 32 bits as byte strings, aligned or not", function()
    local b = buf(32)
    local gid = "\254\128\0\0\0\0\0\0\2\17\34\255\254\51\68\85"
    mlx5.set(b, 128, 128, gid)
    assert.equal(gid, mlx5.get(b, 128, 128))
    assert.equal(gid, bytes(b + 16, 16))
    -- 40 bits at bit 3: five bytes, right-aligned; neighbours unchanged
    local c = buf(8)
    c[0] = 0xe0; c[5] = 0x1f
    C.tbrt_mlx5_set_bytes(c, 3, 40, "\18\52\86\120\154")
    local out = buf(5)
    C.tbrt_mlx5_get_bytes(c, 3, 40, out)
    assert.equal("\18\52\86\120\154", bytes(out, 5))
    assert.equal(7, mlx5.get(c, 0, 3))
    assert.equal(0x1f, mlx5.get(c, 43, 5))
    -- 64-bit numbers (dbr_addr): exact up to 2^53
    local d = buf(8)
    mlx5.set(d, 0, 64, 0x7ab0e8400)
    assert.equal(0x7ab0e8400, mlx5.get(d, 0, 64))
    assert.equal("\0\0\0\7\171\14\132\0", bytes(d, 8))
  end)

  it("finds fields by name, by nested path and through the capability union", function()
    assert.same({ off = 1280, width = 64, kind = 0 }, mlx5.field("qpc", "dbr_addr"))
    assert.equal(192 + 1280, mlx5.field("create_qp_in", "qpc.dbr_addr").off)
    local f = mlx5.field("query_hca_cap_out", "capability.cmd_hca_cap.log_max_qp")
    assert.same({ off = 128 + 155, width = 5, kind = 0 }, f)
    assert.equal(128 + mlx5.field("roce_cap", "roce_apm").off,
      mlx5.field("query_hca_cap_out", "capability.roce_cap.roce_apm").off)
    -- eqe.event_data holds comp_event: the CQ number of a completion event
    assert.equal(256 + 200, mlx5.field("eqe", "event_data.comp_event.cq_number").off)
    assert.is_nil(mlx5.field("create_qp_in", "qpc.no_such_field"))
    assert.is_nil(mlx5.field("no_such_layout", "opcode"))
    assert.equal(3, mlx5.field("create_qp_in", "pas[]").kind) -- flexible array
    assert.equal(272, mlx5.size("create_qp_in"))
    assert.equal(4112, mlx5.size("query_hca_cap_out"))
  end)

  it("knows every layout's opcode/op_mod and status/syndrome fields", function()
    for _, name in ipairs { "create_qp_in", "init2rtr_qp_in", "manage_pages_in", "set_hca_cap_in" } do
      assert.same({ off = 0, width = 16, kind = 0 }, mlx5.field(name, "opcode"))
      assert.same({ off = 48, width = 16, kind = 0 }, mlx5.field(name, "op_mod"))
    end
    for _, name in ipairs { "create_qp_out", "query_hca_cap_out", "query_issi_out" } do
      assert.same({ off = 0, width = 8, kind = 0 }, mlx5.field(name, "status"))
      assert.same({ off = 32, width = 32, kind = 0 }, mlx5.field(name, "syndrome"))
    end
  end)

  it("maps commands to opcodes and layouts, and constants to names", function()
    assert.equal(0x100, mlx5.opcode("QUERY_HCA_CAP"))
    assert.equal(0x100, mlx5.opcode("MLX5_CMD_OP_QUERY_HCA_CAP"))
    assert.equal(0x503, mlx5.opcode("INIT2RTR_QP"))
    assert.is_nil(mlx5.opcode("NO_SUCH_COMMAND"))
    assert.equal("access_register_in", mlx5.layout_of(mlx5.opcode("ACCESS_REG"), false))
    assert.equal("qp_2err_out", mlx5.layout_of(mlx5.opcode("2ERR_QP"), true))
    assert.is_nil(mlx5.layout_of(mlx5.opcode("QUERY_ADAPTER"), false))
    assert.equal(0x10, mlx5.const("MLX5_CMD_STAT_BAD_QP_STATE_ERR"))
    assert.equal("MLX5_CMD_STAT_BAD_INP_LEN_ERR", mlx5.const_name("status", 0x50))
    assert.equal("MLX5_CMD_DELIVERY_STAT_TOK_ERR", mlx5.const_name("delivery", 2))
  end)

  it("encodes and decodes a command by field name", function()
    local b, len = mlx5.encode("create_mkey_in", { opcode = 0x200, ["memory_key_mkey_entry.len"] = 65536,
      ["memory_key_mkey_entry.start_addr"] = 0x7f0012345000, ["klm_pas_mtt[]"] = { 1, 2, 3 } })
    assert.equal(272 + 12, len)
    local d = mlx5.decode("create_mkey_in", b, len)
    assert.equal(0x200, d.opcode)
    assert.equal(65536, d["memory_key_mkey_entry.len"])
    assert.equal(0x7f0012345000, d["memory_key_mkey_entry.start_addr"])
    assert.equal(3, mlx5.get(b, 2176 + 64, 32))
    assert.has_error(function() mlx5.encode("create_mkey_in", { bogus = 1 }) end,
      "mlx5: create_mkey_in has no field bogus")
  end)
end)
