-- mlx5_hostile_spec.lua - both sides of the PCI interface treat what comes
-- across as hostile input:
--   - the device model refuses a CREATE_MKEY whose MTT does not back its
--     whole length (a 2^44-byte mkey on one page: the page count is 2^32,
--     which used to wrap to 0) and one whose start + length wraps; an mkey
--     is used only within what it really maps;
--   - the driver refuses a QUERY_PAGES answer beyond what the firmware can
--     be owed (it used to malloc 8 bytes per page asked: 17 GB for one
--     corrupted answer), naming the answer and the bound;
--   - the driver checks each CQE against what was posted: a send CQE naming
--     a WQE never posted, a receive CQE with more bytes than its buffer, an
--     opcode no CQE has each give an error completion with the reason (the
--     link breaks, saying why), never a wild counter or a crash.
local ffi = require("ffi")
local H = require("helpers")
local M = require("mlx5_helpers")
local L = require("links")
local task = require("tbrt.task")
local mlx5 = require("tbrt.mlx5")

local C = require("tbrt.ffi").C

local BAD_PARAM, BAD_INP_LEN = 0x3, 0x50
local MTT = 1                                  -- mkc access_mode_1_0

local function mkey_fields(pd, bus, start, len, entries)
  local f = { ["memory_key_mkey_entry.access_mode_1_0"] = MTT, ["memory_key_mkey_entry.lr"] = 1,
    ["memory_key_mkey_entry.lw"] = 1, ["memory_key_mkey_entry.pd"] = pd,
    ["memory_key_mkey_entry.start_addr"] = start, ["memory_key_mkey_entry.len"] = len,
    ["memory_key_mkey_entry.log_page_size"] = 12,
    ["memory_key_mkey_entry.translations_octword_size"] = (entries + 1) / 2,
    translations_octword_actual_size = (entries + 1) / 2 }
  if entries > 0 then
    -- MTT entries are 64 bits: two 32-bit words each, rd/wr enable in the low bits
    local words = {}
    for i = 0, entries - 1 do
      local pa = bus + i * 4096
      words[#words + 1] = math.floor(pa / 2 ^ 32)
      words[#words + 1] = pa % 2 ^ 32 + 3
    end
    f["klm_pas_mtt[]"] = words
  end
  return f
end

describe("the mlx5 device model, given hostile commands", function()
  local dev
  after_each(function() if dev then dev:close() dev = nil end end)

  it("refuses an mkey its MTT does not back, whatever the length's page count", function()
    dev = M.model()
    local pd = assert(dev:cmd("ALLOC_PD")).pd
    local _, bus = assert(dev:dma(2 * 4096))
    -- the control: two pages, two MTT entries, 8 KiB
    local ok = assert(dev:cmd("CREATE_MKEY", mkey_fields(pd, bus, 0, 8192, 2)))
    assert.is_number(ok.mkey_index)
    -- 2^44 bytes on two pages: 2^32 pages needed, not 0
    local r, err, st = dev:cmd("CREATE_MKEY", mkey_fields(pd, bus, 0, 2 ^ 44, 2))
    assert.is_nil(r, "a 2^44-byte mkey on two pages")
    assert.equal(BAD_INP_LEN, st.status, err)
    -- one page more than the table holds
    r, err, st = dev:cmd("CREATE_MKEY", mkey_fields(pd, bus, 0, 8193, 2))
    assert.is_nil(r)
    assert.equal(BAD_INP_LEN, st.status, err)
    -- start + length past 2^64
    r, err, st = dev:cmd("CREATE_MKEY", mkey_fields(pd, bus, 0xfffffffffffff000ULL, 8192, 2))
    assert.is_nil(r)
    assert.equal(BAD_PARAM, st.status, err)
    assert.equal(2, dev:state().mkeys, "the bring-up's and the control's only")
  end)

  it("reads no byte past a command that carries no MTT at all", function()
    -- in a child: before the fix the model read 8 bytes past the input
    -- (ASan stops the process) and made the mkey anyway
    local r = H.run_tbrt({ "-e", [[
      local M = require("tbrt.mlx5")
      local dev = assert(M.open{ model = true })
      local pd = assert(dev:cmd("ALLOC_PD")).pd
      local r, err, st = dev:cmd("CREATE_MKEY", {
        ["memory_key_mkey_entry.access_mode_1_0"] = 1, ["memory_key_mkey_entry.pd"] = pd,
        ["memory_key_mkey_entry.len"] = 2 ^ 44, ["memory_key_mkey_entry.log_page_size"] = 12 })
      print(r == nil and string.format("refused 0x%x", st.status) or "made")
      dev:close()
    ]] }, { timeout = 30 })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("refused 0x50", r.stdout)
  end)
end)

describe("the mlx5 driver, given hostile device output", function()
  it("refuses a QUERY_PAGES answer beyond what the firmware can be owed", function()
    -- in a child, bounded: before the fix it set out to allocate 17 GB
    local r = H.run_tbrt({ "-e", [[
      local M = require("tbrt.mlx5")
      for _, o in ipairs{ { boot_pages = 0x7fffffff }, { init_pages = 0x10000000 } } do
        o.model = true
        local d, err = M.open(o)
        print(d and "opened" or err)
        if d then d:close() end
      end
    ]] }, { timeout = 30 })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("EPROTO: mlx5 model0: QUERY_PAGES %(boot%): the firmware asks for 2147483647 " ..
      "pages %(8192%.0 GiB%), more than it can be owed now %(%d+: at most 1048576 pages in all, " ..
      "and half this host's memory; it holds 0%): a corrupted answer%? %(status 0x0, syndrome " ..
      "0x0%)\n", r.stdout)
    assert.matches("QUERY_PAGES %(init%): the firmware asks for 268435456 pages", r.stdout)
  end)

  -- A link over two model NICs in this process; `fault` is injected into
  -- the model NIC of one end, then a message goes one way.
  local function link_with_fault(fault, on_receiver)
    return task.run(function()
      local la, lb = L.pair({ device = "mlx5", timeout = 5 })
      assert(la and lb)
      local victim = on_receiver and lb or la
      local h = assert(mlx5.of_dev(C.tbrt_link_dev(victim._l)))
      assert.equal(0, C.tbrt_mlx5_inject(h.h, fault))
      local sent = task.spawn(function() return la:send("twelve bytes") and la:flush() end)
      local _, err = (on_receiver and lb or la):recv(12, 5)
      if not on_receiver then err = select(2, la:recv(1, 5)) end
      sent:join(5)
      local state = victim:info().state
      la:close() ; lb:close()
      return err, state
    end)
  end

  it("gives an error completion for a send CQE naming a WQE never posted", function()
    local err, state = link_with_fault(C.TBRT_MLX5_INJECT_CQE_WQE_COUNTER, false)
    assert.equal("broken", state)
    assert.matches("^EIO: link %d+: send completion: IBV_WC_GENERAL_ERR.*: mlx5:model0 %(model%): " ..
      "completion: qp 0x%x+: send CQE names WQE %d+, but %d+%.%.%d+ are in flight %(a corrupted CQE%)", err)
  end)

  it("gives a length error for a receive CQE with more bytes than its buffer", function()
    local err, state = link_with_fault(C.TBRT_MLX5_INJECT_CQE_BYTE_COUNT, true)
    assert.equal("broken", state)
    assert.matches("^EIO: link %d+: recv completion: IBV_WC_LOC_LEN_ERR.*receive CQE says " ..
      "2147483647 bytes arrived in a 131072%-byte receive %(a corrupted CQE%)", err)
  end)

  it("gives an error completion for a CQE opcode no CQE has", function()
    local err, state = link_with_fault(C.TBRT_MLX5_INJECT_CQE_OPCODE, false)
    assert.equal("broken", state)
    assert.matches("CQE opcode 0xb is none a completion of this queue pair can have", err)
  end)
end)

-- A destroy that fails at close (here DESTROY_QP never reaches the model)
-- is reported, the rings the QP may still write into outlive the device,
-- and closing the device destroys what was left: nothing leaks (the
-- sanitizer build's leak checker runs the same in a child).
describe("a link over the mlx5 model whose close fails to destroy", function()
  local SCRIPT = [[
    local C = require("tbrt.ffi").C
    local tbrt, task = require("tbrt"), require("tbrt.task")
    local verbs, mlx5 = require("tbrt.verbs"), require("tbrt.mlx5")
    task.run(function()
      local srv = assert(tbrt.listen("127.0.0.1", 0, { device = "mlx5" }))
      local t = task.spawn(function() return srv:accept(10) end)
      local a = assert(tbrt.connect("127.0.0.1", srv.port, { device = "mlx5" }))
      local b = assert(t:join(10))
      srv:close()
      local h = assert(mlx5.of_dev(C.tbrt_link_dev(a._l)))
      h:set_timeout(0.05)
      h:inject("no_doorbell")           -- the next command, DESTROY_QP, never runs
      local ok, err = a:close()
      print("close:", ok, err)
      print("teardown:", a:teardown())
      assert(b:close())
      -- the verbs tier: what a caller leaves open is destroyed at close
      local dev = assert(verbs.open("mlx5:model0"))
      local pd, cq = assert(dev:pd()), assert(dev:cq(16))
      assert(pd:qp{ type = "RC", send_cq = cq, recv_cq = cq, send_wr = 8, recv_wr = 8 })
      local buf = require("ffi").new("uint8_t[8192]")
      assert(pd:reg(buf, 8192))
      dev:close()
      print("done")
    end)
  ]]

  -- The leak reports that name code of ours (a frame in core/, bindings/,
  -- lua/, libtbrt or the tbrt program). A report of the sanitizer runtime's
  -- own per-thread allocation (every frame its own or unknown, under
  -- start_thread: a detached thread, such as the soft device's alarm thread,
  -- may still be ending when the process exits) is not.
  local function our_leaks(stderr)
    local ours = {}
    for block in (stderr .. "\n\n"):gmatch("(%a+ leak of .-)\n%s*\n") do
      if block:find("/core/", 1, true) or block:find("/bindings/", 1, true) or
         block:find("/lua/", 1, true) or block:find("libtbrt", 1, true) or
         block:find("/tbrt+0x", 1, true) or block:find("/tbrt)", 1, true) then
        ours[#ours + 1] = block
      end
    end
    return ours
  end

  it("says so, releases the rings after the device, and leaks nothing", function()
    local asan = os.getenv("TBRT_ASAN") ~= nil
    local r = H.run_tbrt({ "-e", SCRIPT }, { timeout = 60,
      env = asan and { ASAN_OPTIONS = "detect_leaks=1:abort_on_error=0",
                       LSAN_OPTIONS = "exitcode=0" } or nil })
    assert.equal(0, r.code, H.describe(r))
    assert.matches("close:\tnil\tETIMEDOUT: link %d+: close: mlx5:model0 %(model%): destroy_qp: " ..
      "mlx5 DESTROY_QP: no completion within 50 ms\n", r.stdout)
    -- the CQ is still the undead QP's: its destroy fails too, and the device takes both
    assert.matches("teardown:\tqp%(failed%),mr,mr,cq%(failed%),pd,dev,buf,buf\n", r.stdout)
    assert.matches("done\n", r.stdout)
    assert.same({}, our_leaks(r.stderr), r.stderr)
  end)

end)
