-- mlx5_model_spec.lua - the ConnectX device model as firmware: a full
-- bring-up and a teardown that leaves nothing behind, the HCA life cycle it
-- enforces, and every malformed or out-of-order command getting the status
-- a device gives (bad opcode, bad parameter, bad system state, bad QP state,
-- bad resource, resource busy, bad input/output length; delivery errors for
-- tokens, block numbers, signatures, descriptor type, pointer alignment),
-- never a crash; and a bounded wait when no completion comes.
local M = require("mlx5_helpers")
local mlx5 = require("tbrt.mlx5")
local verbs = require("tbrt.verbs")

local STAT = { BAD_OP = 0x2, BAD_PARAM = 0x3, BAD_SYS_STATE = 0x4, BAD_RES = 0x5, RES_BUSY = 0x6,
  BAD_QP_STATE = 0x10, BAD_INP_LEN = 0x50, BAD_OUTP_LEN = 0x51 }

-- Expect a command to fail with a command status; returns the message.
local function refused(dev, status, name, fields, opts)
  local r, err, st = dev:cmd(name, fields, opts)
  assert.is_nil(r, name .. " should fail")
  assert.equal(status, st.status, err)
  assert.matches("^EPROTO: mlx5 " .. name:gsub("%p", "%%%0") .. ": .*%(" ..
    mlx5.const_name("status", status) .. " 0x%x+%), syndrome 0x%x+$", err)
  assert.is_true(st.syndrome ~= 0)
  return err
end

local function delivery(dev, code, name, fields, opts)
  local r, err, st = dev:cmd(name, fields, opts)
  assert.is_nil(r)
  assert.equal(code, st.delivery, err)
  assert.matches("^EIO: mlx5 " .. name .. ": delivery status .*%(0x%x+%)$", err)
end

describe("mlx5 device model", function()
  local dev
  after_each(function() if dev then dev:close() dev = nil end end)

  it("brings up fully and tears down leaving no pages or objects", function()
    dev = M.model()
    local st = assert(dev:state())
    assert.same({ 1, 1, 1, 0 }, { st.enabled, st.initialized, st.issi, st.pages_owed })
    assert.is_true(st.pages_given > 0)
    assert.same({ 1, 1, 1 }, { st.uars, st.pds, st.mkeys })
    assert.is_true(st.roce_entries >= 2)          -- link-local + ::ffff:127.0.0.1 at least
    assert.equal(0, st.bad_commands)
    assert(dev:teardown())
    st = assert(dev:state())
    assert.same({ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, { st.enabled, st.initialized, st.pages_given,
      st.pages_owed, st.uars, st.pds, st.mkeys, st.eqs, st.cqs, st.qps, st.roce_entries })
    assert.equal(0, st.bad_commands)
  end)

  it("brings up with command checksums on (every block signed and verified)", function()
    dev = M.model{ checksums = true }
    local caps = assert(dev:cmd("QUERY_HCA_CAP", { op_mod = 1 }))
    assert.equal(3, caps["capability.cmd_hca_cap.cmdif_checksum"])
    assert.equal(0, dev:state().bad_commands)
  end)

  it("answers QUERY_HCA_CAP with the ConnectX-4's capabilities", function()
    dev = M.model()
    local cur = assert(dev:cmd("QUERY_HCA_CAP", { op_mod = 1 }))
    assert.equal(17, cur["capability.cmd_hca_cap.log_max_qp"]) -- as the driver set it
    assert.equal(12, cur["capability.cmd_hca_cap.log_pg_sz"])
    assert.equal(30, cur["capability.cmd_hca_cap.log_max_msg"])
    assert.equal(1, cur["capability.cmd_hca_cap.roce"])
    local roce = assert(dev:cmd("QUERY_HCA_CAP", { op_mod = 9 }))
    assert.is_number(roce["capability.roce_cap.roce_apm"])
  end)

  it("enforces the HCA life cycle: enable, ISSI, pages, then INIT_HCA", function()
    dev = M.model{ raw = true, boot_pages = 2, init_pages = 3 }
    refused(dev, STAT.BAD_SYS_STATE, "INIT_HCA")          -- not enabled
    refused(dev, STAT.BAD_SYS_STATE, "ALLOC_PD")
    assert(dev:cmd("ENABLE_HCA"))
    refused(dev, STAT.BAD_SYS_STATE, "ENABLE_HCA")         -- twice
    refused(dev, STAT.BAD_SYS_STATE, "INIT_HCA")           -- ISSI 0
    refused(dev, STAT.BAD_PARAM, "SET_ISSI", { current_issi = 5 })
    assert(dev:cmd("SET_ISSI", { current_issi = 1 }))
    assert.equal(2, assert(dev:cmd("QUERY_PAGES", { op_mod = 1 })).num_pages)
    local err = refused(dev, STAT.BAD_SYS_STATE, "INIT_HCA") -- boot and init pages owed
    assert.matches("syndrome 0x4d440004", err)
    -- pages outside DMA memory are a bad parameter
    refused(dev, STAT.BAD_PARAM, "MANAGE_PAGES", { op_mod = 1, input_num_entries = 1, ["pas[]"] = { 0x1000 } })
    refused(dev, STAT.BAD_INP_LEN, "MANAGE_PAGES", { op_mod = 1, input_num_entries = 4, ["pas[]"] = { 0 } })
    local _, bus = dev:dma(5 * 4096)
    assert(dev:cmd("MANAGE_PAGES", { op_mod = 1, input_num_entries = 2, ["pas[]"] = { bus, bus + 4096 } }))
    refused(dev, STAT.BAD_SYS_STATE, "INIT_HCA")           -- init pages still owed
    assert.equal(3, assert(dev:cmd("QUERY_PAGES", { op_mod = 2 })).num_pages)
    assert(dev:cmd("MANAGE_PAGES", { op_mod = 1, input_num_entries = 3,
      ["pas[]"] = { bus + 2 * 4096, bus + 3 * 4096, bus + 4 * 4096 } }))
    assert(dev:cmd("INIT_HCA"))
    refused(dev, STAT.BAD_SYS_STATE, "INIT_HCA")           -- twice
    refused(dev, STAT.BAD_SYS_STATE, "SET_HCA_CAP", { op_mod = 0 }) -- after INIT_HCA
    -- an initialized HCA keeps its pages; after TEARDOWN_HCA they come back
    assert.equal(0, assert(dev:cmd("MANAGE_PAGES", { op_mod = 2, input_num_entries = 5 }, { out_extra = 40 })).output_num_entries)
    refused(dev, STAT.RES_BUSY, "DISABLE_HCA")
    assert(dev:cmd("TEARDOWN_HCA"))
    assert.equal(-5, bit.tobit(assert(dev:cmd("QUERY_PAGES", { op_mod = 3 })).num_pages))
    local r = assert(dev:cmd("MANAGE_PAGES", { op_mod = 2, input_num_entries = 5 }, { out_extra = 40 }))
    assert.equal(5, r.output_num_entries)
    assert(dev:cmd("DISABLE_HCA"))
    local st = dev:state()
    assert.same({ 0, 0, 0 }, { st.enabled, st.initialized, st.pages_given })
  end)

  it("refuses unknown opcodes, bad op_mods and short buffers", function()
    dev = M.model()
    -- an opcode no firmware knows, sent raw
    local r, err, st = dev:raw("\7\255\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16, 16)
    assert.is_nil(r)
    assert.equal(STAT.BAD_OP, st.status, err)
    refused(dev, STAT.BAD_PARAM, "QUERY_HCA_CAP", { op_mod = 0x1f })
    refused(dev, STAT.BAD_PARAM, "ACCESS_REG", { register_id = 0x1234 }, { inlen = 32, outlen = 32 })
    refused(dev, STAT.BAD_INP_LEN, "SET_HCA_CAP", { op_mod = 0 }, { inlen = 16 })
    refused(dev, STAT.BAD_OUTP_LEN, "QUERY_HCA_CAP", { op_mod = 1 }, { outlen = 16 })
    refused(dev, STAT.BAD_RES, "DEALLOC_PD", { pd = 77 })
    refused(dev, STAT.BAD_RES, "DESTROY_MKEY", { mkey_index = 0x123 })
    refused(dev, STAT.BAD_RES, "DEALLOC_UAR", { uar = 3 })
    refused(dev, STAT.BAD_PARAM, "SET_ROCE_ADDRESS", { roce_address_index = 99 })
    refused(dev, STAT.BAD_RES, "CREATE_CQ", { ["cq_context.c_eqn_or_apu_element"] = 0x55 })
    refused(dev, STAT.BAD_RES, "DESTROY_QP", { qpn = 0x4242 })
    -- the device still works, and counted every refusal
    assert(dev:cmd("NOP"))
    assert.equal(11, dev:state().bad_commands)
  end)

  it("refuses QP commands out of the state machine's order with BAD_QP_STATE", function()
    local vdev = assert(verbs.open("mlx5:model0"))
    local h = assert(mlx5.of_dev(vdev.d))
    local pd, cq = assert(vdev:pd()), assert(vdev:cq(16))
    local qp = assert(pd:qp{ type = "RC", send_cq = cq, recv_cq = cq })
    local q = { qpn = qp.num }
    refused(h, STAT.BAD_QP_STATE, "INIT2RTR_QP", q)
    refused(h, STAT.BAD_QP_STATE, "RTR2RTS_QP", q)
    assert.equal(0, assert(h:cmd("QUERY_QP", q))["qpc.state"])
    -- RST2INIT on a port the NIC does not have is a bad parameter
    refused(h, STAT.BAD_PARAM, "RST2INIT_QP", { qpn = qp.num, ["qpc.primary_address_path.vhca_port_num"] = 2 })
    assert(qp:modify{ state = "INIT", port = 1, pkey_index = 0, access = 0 })
    refused(h, STAT.BAD_QP_STATE, "RST2INIT_QP", { qpn = qp.num, ["qpc.primary_address_path.vhca_port_num"] = 1 })
    -- INIT2RTR needs a valid RoCE address entry as source
    refused(h, STAT.BAD_PARAM, "INIT2RTR_QP", { qpn = qp.num, ["qpc.mtu"] = 3,
      ["qpc.primary_address_path.src_addr_index"] = 15 })
    assert.equal(1, assert(h:cmd("QUERY_QP", q))["qpc.state"])
    assert(h:cmd("2ERR_QP", q))
    assert.equal(6, assert(h:cmd("QUERY_QP", q))["qpc.state"])
    assert(h:cmd("2RST_QP", q))
    assert.equal(0, assert(h:cmd("QUERY_QP", q))["qpc.state"])
    -- a CQ in use cannot go
    refused(h, STAT.RES_BUSY, "DESTROY_CQ", { cqn = 0x80 }) -- the model's first CQN
    assert(qp:destroy())
    cq:destroy(); pd:free()
    local st = h:state()
    assert.same({ 0, 0 }, { st.qps, st.cqs })
    vdev:close()
  end)

  it("turns broken command deliveries into delivery errors", function()
    dev = M.model{ checksums = true }
    local fields = { op_mod = 0, capability = nil }
    dev:inject("token")
    delivery(dev, 0x2, "SET_HCA_CAP", fields)       -- SET_HCA_CAP has input blocks
    dev:inject("block_num")
    delivery(dev, 0x3, "SET_HCA_CAP", fields)
    dev:inject("in_ptr_align")
    delivery(dev, 0x5, "SET_HCA_CAP", fields)
    dev:inject("signature")
    delivery(dev, 0x1, "NOP")
    dev:inject("type")
    delivery(dev, 0x10, "NOP")
    assert(dev:cmd("NOP"))
    assert.equal(5, dev:state().bad_commands)
  end)

  it("bounds the wait for a completion that never comes", function()
    dev = M.model()
    dev:set_timeout(0.2)
    dev:inject("no_doorbell")
    local t0 = require("helpers").now()
    local r, err = dev:cmd("NOP")
    assert.is_nil(r)
    assert.matches("^ETIMEDOUT: mlx5 NOP: no completion within 200 ms$", err)
    assert.is_true(require("helpers").now() - t0 < 2)
    assert(dev:cmd("NOP"))                           -- and the queue still works
  end)

  it("checks the Lua builder's options and names (misuse raises, failures return nil, err)", function()
    assert.has_error(function() mlx5.open{ bogus = 1 } end,
      "mlx5.open: unknown option bogus (known: boot_pages, checksums, init_pages, model, pci, raw, regular_pages, timeout, trace)")
    assert.has_error(function() mlx5.open{ model = true, pci = "x" } end, "mlx5.open: model or pci, not both")
    assert.has_error(function() mlx5.open{ raw = "yes" } end, "mlx5.open: raw must be a boolean")
    local d, err = mlx5.open{ pci = "0000:99:00.0" }
    assert.is_nil(d)
    assert.matches("^ENODEV: mlx5 0000:99:00.0: no way to the device", err)
    dev = M.model()
    assert.has_error(function() dev:cmd("NO_SUCH_COMMAND") end, "mlx5 cmd: unknown command NO_SUCH_COMMAND")
    assert.has_error(function() dev:cmd("QUERY_HCA_CAP", { no_field = 1 }) end,
      "mlx5: query_hca_cap_in has no field no_field")
    assert.has_error(function() dev:cmd("QUERY_HCA_CAP", { op_mod = {} }) end)
    local soft = assert(verbs.open("soft0", { personality = "linux-rc" }))
    assert.same({ nil, "EINVAL: not an mlx5 device" }, { mlx5.of_dev(soft.d) })
    soft:close()
  end)

  it("survives random commands: every one gets a status, none a crash", function()
    dev = M.model()
    local names = { "QUERY_HCA_CAP", "SET_HCA_CAP", "CREATE_CQ", "CREATE_QP", "CREATE_EQ", "CREATE_MKEY",
      "RST2INIT_QP", "INIT2RTR_QP", "SET_ROCE_ADDRESS", "MANAGE_PAGES", "ACCESS_REG", "DESTROY_QP",
      "MODIFY_NIC_VPORT_CONTEXT", "QUERY_QP", "DEALLOC_PD", "QUERY_MKEY" }
    math.randomseed(42)
    local before = dev:state()
    for i = 1, 300 do
      local name = names[math.random(#names)]
      local layout = mlx5.layout_of(mlx5.opcode(name), false)
      local fields = {}
      for _, f in ipairs(mlx5.fields(layout)) do
        if f.kind == 0 and f.width <= 32 and f.name ~= "opcode" and math.random() < 0.3 then
          fields[f.name] = math.random(0, 2 ^ math.min(f.width, 31) - 1)
        end
      end
      fields.opcode = mlx5.opcode(name)
      local buf, len = mlx5.encode(layout, fields)
      if math.random() < 0.2 then len = 16 end             -- cut short
      local outlen = math.max(16, mlx5.size(mlx5.layout_of(fields.opcode, true)))
      local r, err, st = dev:raw(buf, len, outlen)
      assert.truthy(r or (st and (st.status ~= 0 or st.delivery ~= 0)), err)
    end
    assert(dev:cmd("NOP"))
    assert.is_true(dev:state().commands >= before.commands + 300)
  end)
end)
